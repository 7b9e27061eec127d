"""Chapter 01, exercise 4: an imperfect world model of your own, written by hand instead of trained. The simulator
plays the world model, except on half of the `unstack x y` moves (`blocks_lm.forgotten_hand`), where it makes one
of two errors: optimistic (x is also put down, the chapter's "forgotten hand") or pessimistic (nothing happens).
RAP(20) on the chapter's held-out problems: success in imagination and in reality, and their gap."""

from course_lib import course_config
from course_lib.chapters import ch01_rap as ch01
from course_lib.envs.blocksworld import parse_state, render_state, successors
from course_lib.search.blocks_lm import forgotten_hand

SEED = 0
SHARE = 0.5
cfg = ch01.preset()
problems = ch01.test_problems(cfg.tasks_per_length, SEED)


def predicted(state, action: str, after, error: str):
    """The hand-written world model's next state."""
    if error == "none" or not forgotten_hand(render_state(state), action, SHARE):
        return after
    if error == "optimistic":
        return successors(after)[f"put-down {action.split()[1]}"]
    return state  # pessimistic: the move seems to do nothing


def fill(lm, init: str, depth: int, error: str) -> None:
    """The LM's caches hold the hand-written model's prediction for every (state, action) the search can reach."""
    frontier, seen = {parse_state(init)}, set()
    for _ in range(depth):
        reached = set()
        for state in frontier - seen:
            seen.add(state)
            for action, after in successors(state).items():
                guess = render_state(predicted(state, action, after, error))
                lm.world_cache[(render_state(state), action)] = guess
                lm.sample_cache[(render_state(state), action)] = [guess] * cfg.reward.confidence_samples
                reached.add(predicted(state, action, after, error))
        frontier = reached


print("RAP(20) imagined / real success (gap) by plan length")
for error in ("none", "optimistic", "pessimistic"):
    lm = ch01.load_lm()
    for length, pairs in problems.items():
        for init, _ in pairs:
            fill(lm, init, length, error)
    generator = course_config.seed_everything(SEED)
    scores = {n: ch01.evaluate_search(lm, p, n, 20, cfg, generator) for n, p in problems.items()}
    row = "  ".join(
        f"{n}-step {s['imagined']:.3f} / {s['real']:.3f} ({s['imagined'] - s['real']:+.3f})" for n, s in scores.items()
    )
    print(f"{error:11} {row}")

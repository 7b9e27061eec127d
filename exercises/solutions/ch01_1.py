"""Chapter 01, exercise 1: a perfect world model. The LM's next-state predictions (and the K samples behind the
confidence term) are replaced by the simulator's, for every state the search can reach, and RAP(20) is rerun on
the chapter's held-out problems beside the learned world model."""

from course_lib import course_config
from course_lib.chapters import ch01_rap as ch01
from course_lib.envs.blocksworld import parse_state, render_state, successors

SEED = 0
cfg = ch01.preset()
problems = ch01.test_problems(cfg.tasks_per_length, SEED)


def fill_from_simulator(lm, init: str, depth: int) -> None:
    """Put the simulator's next state into the LM's caches for every (state, action) within `depth` of `init`."""
    frontier, seen = {parse_state(init)}, set()
    for _ in range(depth):
        reached = set()
        for state in frontier - seen:
            seen.add(state)
            for action, after in successors(state).items():
                pair = (render_state(state), action)
                lm.world_cache[pair] = render_state(after)
                lm.sample_cache[pair] = [render_state(after)] * cfg.reward.confidence_samples
                reached.add(after)
        frontier = reached


for arm in ("learned", "perfect"):
    lm = ch01.load_lm()
    if arm == "perfect":
        for length, pairs in problems.items():
            for init, _ in pairs:
                fill_from_simulator(lm, init, length)
    generator = course_config.seed_everything(SEED)
    scores = {n: ch01.evaluate_search(lm, p, n, 20, cfg, generator) for n, p in problems.items()}
    row = "  ".join(f"{n}-step {s['imagined']:.3f} / {s['real']:.3f}" for n, s in scores.items())
    mean = sum(s["real"] for s in scores.values()) / len(scores)
    print(f"{arm:8} world model, RAP(20) imagined / real: {row}  real mean {mean:.3f}")

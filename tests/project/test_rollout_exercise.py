"""Issue 59: the implement-it exercise of the multi-turn rollout (`exercises/rollout.py`). A rollout written by hand
from the stub's docstring passes its checks; each plausible bookkeeping mistake, planted in it, fails the check
meant for it with a message that names the mistake. The reference itself (`course_lib.engine.episode`) is checked
against the engine in `tests/engine/test_episode.py`."""

from __future__ import annotations

from course_lib.engine.rollout import Trajectory
from course_lib.tokenizer import decode, encode
from exercises.checks import cases, first_failure


def rollout_by_hand(engine, policy, env, seed, *, mistake: str | None = None):
    """`play_episode` as a student might write it from the docstring, with at most one planted `mistake`."""
    tokenizer, config = engine.tokenizer, engine.config
    obs, _ = env.reset(seed=seed)
    ids = engine.format.prompt_ids(tokenizer, obs)
    t = Trajectory(env=env, token_ids=list(ids), loss_mask=[0] * len(ids), logprobs=[0.0] * len(ids),
                   entropies=[0.0] * len(ids), turn_ids=[-1] * len(ids), seed=seed)  # fmt: skip

    def add(token, mask, logprob, entropy, turn):
        t.token_ids.append(token)
        t.loss_mask.append(mask)
        t.logprobs.append(logprob)
        t.entropies.append(entropy)
        t.turn_ids.append(turn)

    turn: list[int] = []
    while True:
        token, logprob, entropy = policy(list(t.token_ids))
        add(token, 1, logprob, entropy, len(t.rewards))
        turn.append(token)
        stopped = token in engine.stop_ids
        if mistake != "stop ids only":
            stopped = stopped or any(stop in decode(tokenizer, turn) for stop in engine.stop_strings)
        if stopped or (len(turn) >= config.max_turn_tokens and mistake != "no turn budget"):
            if mistake != "no anchors":
                t.anchors.append(env.anchor())
            obs, reward, t.terminated, t.truncated, info = env.step(decode(tokenizer, turn))
            t.rewards.append(reward)
            t.infos.append(info)
            if not (t.terminated or t.truncated) and obs:
                if mistake == "observation encoded":
                    observation = encode(tokenizer, obs)
                else:
                    observation = engine.format.observation_ids(tokenizer, obs, turn[-1])
                for token in observation:
                    if len(t.token_ids) >= config.max_total_tokens and mistake != "no cap":
                        break
                    mask = 1 if mistake == "observation masked 1" else 0
                    turn_id = len(t.rewards) if mistake == "observation next turn" else len(t.rewards) - 1
                    logprob = logprob if mistake == "logprob repeated" else 0.0
                    add(token, mask, logprob, 0.0, turn_id)
            turn = []
        if t.terminated or t.truncated:
            return t
        if len(t.token_ids) >= config.max_total_tokens and mistake != "no cap":
            t.truncated = True
            if mistake != "cut unset":
                t.cut = True
            return t


def variant(mistake: str | None = None):
    def fn(engine, policy, env, seed):
        return rollout_by_hand(engine, policy, env, seed, mistake=mistake)

    return fn


def test_a_rollout_written_from_the_docstring_passes_every_check():
    assert first_failure("rollout.play_episode", variant()) == (len(cases("rollout.play_episode")), None)


MUTANTS = [
    ("rollout.play_episode", variant("observation masked 1"), "one tool call", "loss_mask differs"),
    ("rollout.play_episode", variant("observation next turn"), "one tool call", "turn_ids differs"),
    ("rollout.play_episode", variant("logprob repeated"), "one tool call", "logprobs differs"),
    ("rollout.play_episode", variant("no anchors"), "one tool call", "env.anchor()"),
    ("rollout.play_episode", variant("no turn budget"), "turn budget", "where the engine appends"),
    ("rollout.play_episode", variant("no cap"), "sequence cap", "max_total_tokens"),
    ("rollout.play_episode", variant("cut unset"), "sequence cap", "cut is False"),
    ("rollout.play_episode", variant("stop ids only"), "BPE stand-in", "stop string"),
    ("rollout.play_episode", variant("observation encoded"), "BPE stand-in", "format.observation_ids"),
]
"""Each planted mistake, the check that catches it and words its message must hold (run with the other exercises'
mutants by `tests/project/test_exercises.py::test_a_plausible_mistake_is_caught_with_its_message`)."""

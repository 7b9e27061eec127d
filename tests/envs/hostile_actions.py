"""The hostile-action harness the environments' tests share: an action no policy should write, repeated until the
episode ends, never raises and never pays; each test adds what its environment promises on top."""

from __future__ import annotations


def play_hostile(env, action, seed: int = 1) -> list[tuple]:
    """Reset `env` (seed `seed`) and step `action` until its turn limit: every step returns an observation string,
    no reward above 0, an info that marks the step invalid or holds a tool result, and a hashable anchor; nothing
    terminates and the episode ends truncated. Returns each step's `(obs, reward, terminated, truncated, info)`."""
    env.reset(seed=seed)
    steps = []
    for _ in range(env.max_turns):
        steps.append(env.step(action))
        obs, reward, terminated, _, info = steps[-1]
        assert isinstance(obs, str) and not terminated and reward <= 0
        assert info["valid"] is False or "tool_result" in info
        hash(info["anchor"])
    assert steps[-1][3] and env.done
    return steps

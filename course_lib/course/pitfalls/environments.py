"""Pitfall 5: one environment object shared by several rollouts (OpenRLHF PR 1169).

A group of G rollouts of one prompt needs G environments in the same start state, each stepped only by its own
rollout. A factory that returns a cached instance, or a list built as `[env] * G`, hands one object to all of them:
every reset and every step then acts on shared state, so one rollout's tool result, turn counter or `done` flag
shows up in another's. Environments that refuse a step after their episode ended (the course's do) turn this into
an error; those that do not mix the rollouts silently. The checks look at the objects themselves.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence

from course_lib.course.pitfalls.report import PitfallReport, finish


def check_distinct_envs(envs: Sequence[object], on_flag: str = "warn") -> PitfallReport:
    """Flag a list of environments (the one a rollout is handed) that holds one object more than once. Numbers:
    `envs`, `distinct`. Build one environment per rollout (`[make_env() for _ in range(G)]`)."""
    distinct = len({id(env) for env in envs})
    flagged = distinct < len(envs)
    message = f"{distinct} distinct objects among {len(envs)} environments" + (
        " (one environment per rollout)" if flagged else ""
    )
    numbers = {"envs": float(len(envs)), "distinct": float(distinct)}
    return finish(PitfallReport("shared environment", flagged, numbers, message), on_flag)


def _state(env: object) -> bytes | None:
    try:
        return pickle.dumps(vars(env))
    except Exception:  # an environment whose state does not pickle: the isolation test is skipped
        return None


def check_env_isolation(
    make_env: Callable[[], object], seeds: tuple[int, int] = (0, 1), action: str = "", on_flag: str = "warn"
) -> PitfallReport:
    """Flag a factory whose environments are not isolated: two calls return one object (`same_object`), or stepping
    one changes the other's state (`leaked`: the second's attributes, pickled, before and after the first takes
    `action`; a class-level mutable attribute shared by instances shows up here). Both are reset first, with
    `seeds`. Numbers: `same_object`, `leaked`, `state_checked`."""
    first, second = make_env(), make_env()
    same = first is second
    first.reset(seed=seeds[0])
    second.reset(seed=seeds[1])
    before = _state(second)
    first.step(action)
    after = _state(second)
    leaked = before is not None and before != after
    numbers = {"same_object": float(same), "leaked": float(leaked), "state_checked": float(before is not None)}
    flagged = same or leaked
    if same:
        message = "the factory returned the same object twice (build a new environment per call)"
    elif leaked:
        message = "stepping one environment changed another's state (no shared mutable state between instances)"
    else:
        message = "two environments from the factory are distinct and stepping one leaves the other unchanged"
    return finish(PitfallReport("shared environment", flagged, numbers, message), on_flag)

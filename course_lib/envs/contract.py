"""Every key of a step's `info` that the course's metrics and methods read, in one place.

An environment returns `info` from each step. The loop and the chapters read some of its keys, and a key that is
missing does not crash anything: it reads as "no" (no success, no tool call). So an environment that forgets
`success` trains on rewards but is evaluated at 0, and one that calls its tool without saying so in `tool_result`
shows a tool use of 0 and empty after-tool entropies, and a tool claim then passes with nothing measured.
`check_env` checks every key below on whole episodes of valid actions (`check_env(env, for_chapter="17")` adds the
keys only that chapter reads); `docs/extending.md` lists them for a fork.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InfoKey:
    """One key of a step's `info`: when an environment must set it, and who reads it."""

    name: str
    when: str
    """`every step`, `last step`, `tool step` (a step whose action called a tool: `envs.base.calls_tool`), or
    `valid step` (every step whose action was valid)."""
    meaning: str
    read_by: str
    chapters: tuple[str, ...] = ()
    """The chapters that need it beyond the contract every environment keeps (empty: every chapter)."""
    set_by_base: bool = False
    """Whether `TextEnv.step` sets it (a subclass then need not)."""


INFO_KEYS: tuple[InfoKey, ...] = (
    InfoKey("valid", "every step", "whether the action was valid (bool); an invalid one also gets `error`",
            "the invalid-action penalty of every estimator (`seams.penalised_rewards`), the invalid rate, GiGPO's "
            "step groups", set_by_base=True),
    InfoKey("is_action_valid", "every step", "`valid` under the name GEM and SkyRL-gym give it",
            "the integrations (TRL, verl, OpenEnv)", set_by_base=True),
    InfoKey("anchor", "every step", "the true state after the step, hashable (`TextEnv.anchor()`)",
            "GiGPO's step groups with `anchor_source='state'`", set_by_base=True),
    InfoKey("success", "last step", "whether the episode solved its problem (bool)",
            "held-out success (every chapter's evaluation), training success"),
    InfoKey("tool_result", "tool step", "what the tool returned (`\"error\"` when it failed)",
            "tool use and tool errors (`diagnostics.rollout_stats`), tool-call counts and the entropy after a tool's "
            "response (chapters 00, 04, 06, 08, 11)"),
    InfoKey("answer", "valid step", "the episode's gold answer, as text",
            "IGPO's information gain (`rl.info_gain`, `IGPOConfig.answer_key`)", chapters=("17",)),
    InfoKey("ambiguous", "valid step", "whether the question's first hop is ambiguous (bool)",
            "chapter 08's after-tool entropy split (its claim is not applicable without it)", chapters=("08",)),
)  # fmt: skip
"""What a step's `info` carries, for whom. Keys a chapter reads that are not here are its own environment's and
are not applicable to a fork (chapter 03's `r_<term>` reward terms, for one)."""


def keys_for(chapter: str | None = None) -> tuple[InfoKey, ...]:
    """The keys every environment sets, plus those `chapter` (`"17"`, or `"ch17"`) alone reads."""
    if chapter is not None:
        chapter = chapter.removeprefix("ch")
    return tuple(key for key in INFO_KEYS if not key.chapters or chapter in key.chapters)


def missing(key: InfoKey, info: dict, action: str, last: bool) -> bool:
    """Whether a step's `info` (of `action`; `last`: the step that ended its episode by `terminated`, the
    environment's own decision, not the turn limit's) lacks `key` where it must have it."""
    from course_lib.envs.base import calls_tool

    needed = {
        "every step": True,
        "last step": last,
        "tool step": calls_tool(action),
        "valid step": info.get("valid", True) is True,
    }[key.when]
    return needed and key.name not in info

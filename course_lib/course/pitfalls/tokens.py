"""Pitfalls 1 and 2: the ids the trainer scores are not the ids the policy sampled.

1. Retokenization drift (TRL issue 5224, verl issue 2165). A loop that keeps turns as text decodes each sampled
   turn and re-encodes it (or the whole transcript) before the update. Byte-level BPE maps many id sequences to one
   text and picks one of them when encoding, so the re-encoded ids can differ from the sampled ones; the update then
   takes log-probs of tokens the policy never sampled and divides them by the sampling log-probs of other tokens:
   the importance ratio of PPO/GRPO (DeepSeekMath, arXiv 2402.03300, eq. 3) is not 1 on on-policy data.
   `check_retokenization` finds it on the trajectories themselves; `retokenized` builds the ids such a loop would
   train on, so its symptom can be measured.
2. Thinking templates that strip earlier turns (verl issue 6854). Qwen3's chat template drops an earlier assistant
   turn's `<think>` once another message follows, so rendering the finished conversation is not the prefix each
   turn was sampled after. `check_incremental_template` renders the conversation message by message
   (`standins.template_breaks`).

Shapes: trajectories hold Python lists `[T]` (`token_ids`, `loss_mask`, `turn_ids`, `logprobs`).
"""

from __future__ import annotations

from collections.abc import Sequence

from course_lib.course import standins
from course_lib.course.pitfalls.report import PitfallReport, finish
from course_lib.engine.rollout import Trajectory


def policy_turns(trajectory: Trajectory) -> list[tuple[int, int]]:
    """`(start, end)` of each maximal run of policy tokens (`loss_mask` 1 and one `turn_id`): the sampled turns."""
    spans, start = [], None
    mask, turns = trajectory.loss_mask, trajectory.turn_ids
    for k in range(len(mask) + 1):
        inside = k < len(mask) and mask[k] == 1
        if start is not None and (not inside or turns[k] != turns[start]):
            spans.append((start, k))
            start = None
        if inside and start is None:
            start = k
    return spans


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids


def retokenized(tokenizer, trajectory: Trajectory) -> tuple[list[int], list[int], list[tuple[int, int]]]:
    """The ids and loss mask (`[T']` each) a text-keeping loop would train on: every sampled turn decoded and
    re-encoded, everything else (prompt, observations, template glue) kept as it was; and the `(start, end)` of each
    re-encoded turn in them, in the order of `policy_turns(trajectory)`."""
    ids: list[int] = []
    mask: list[int] = []
    spans, last = [], 0
    for start, end in policy_turns(trajectory):
        ids += trajectory.token_ids[last:start]
        mask += [0] * (start - last)
        again = _encode(tokenizer, tokenizer.decode(trajectory.token_ids[start:end]))
        spans.append((len(ids), len(ids) + len(again)))
        ids += again
        mask += [1] * len(again)
        last = end
    ids += trajectory.token_ids[last:]
    mask += [0] * (len(trajectory.token_ids) - last)
    return ids, mask, spans


def check_retokenization(tokenizer, trajectories: Sequence[Trajectory], on_flag: str = "warn") -> PitfallReport:
    """Flag sampled turns whose ids do not survive decode -> encode (`standins.resegmentation_drift`): a loop that
    re-tokenizes would train on other tokens than the sampled ones. Numbers: `turns`, `changed`, `lossy` (not valid
    UTF-8), `tokens`. Keep the sampled ids (the course's engine does) instead of re-encoding text."""
    sequences = [t.token_ids[s:e] for t in trajectories for s, e in policy_turns(t)]
    drift = standins.resegmentation_drift(tokenizer, sequences)
    numbers = {"turns": float(drift["sequences"]), "changed": float(drift["changed"]),
               "lossy": float(drift["lossy"]), "tokens": float(drift["tokens"])}  # fmt: skip
    flagged = drift["changed"] > 0
    message = f"{drift['changed']} of {drift['sequences']} sampled turns re-encode to other ids" + (
        " (train on the sampled ids, not on re-encoded text)" if flagged else ""
    )
    return finish(PitfallReport("retokenization drift", flagged, numbers, message), on_flag)


def check_incremental_template(
    tokenizer, episodes: Sequence[standins.Dialogue], on_flag: str = "warn"
) -> PitfallReport:
    """Flag a chat template that renders earlier turns differently once later ones follow (`episodes` as
    `(role, content)` messages): rendering the finished conversation would train on a prefix the policy never saw.
    Numbers: `episodes`, `broken`. Render turn by turn, or keep the ids rendered at sampling time."""
    counts = standins.template_breaks(tokenizer, episodes)
    flagged = counts["broken"] > 0
    message = f"{counts['broken']} of {counts['episodes']} episodes render non-incrementally" + (
        " (render turn by turn and keep those ids)" if flagged else ""
    )
    return finish(
        PitfallReport("non-incremental chat template", flagged, {k: float(v) for k, v in counts.items()}, message),
        on_flag,
    )

"""ToolRL's reward for function calling (Qian et al., arXiv 2504.13958; chapter 05).

A response is `<think> ... </think>` followed by either `<tool_call> CALL CALL ... </tool_call>`
or `<response> ... </response>`. Calls are written in a word-level JSON-like form, one token per
word, for example

    { name : get_weather , args : { city : paris , day : monday } }

The reward (the paper's Section 3, code `rlla.py`) is R = R_format + R_correct:

* R_format in {0, 1}: 1 iff the whole response has the shape of the ground truth's turn type
  (think then tool_call, or think then response), each tag exactly once.
* R_correct in [-3, 3]: 0 when the ground truth calls no tool; -3 when the prediction does not
  parse; +3 on an exact match; otherwise, with G the true calls and P the predicted ones,

      r_name   = |N_G ∩ N_P| / |N_G ∪ N_P|                   (multiset Jaccard of tool names)
      best(g)  = max over unused p with p.name == g.name of  r_param(g, p) + r_value(g, p)
      r_param  = multiset Jaccard of the two parameter-key lists
      r_value  = Σ_{k ∈ keys(g)} 1[p[k] == g[k]]
      S        = r_name + Σ_g best(g),     S_max = 1 + Σ_g (1 + |keys(g)|)
      R_correct = (R_max - R_min) · S / S_max + R_min  =  6 · S / S_max - 3.

Variants: the *coarse* correctness (exact match or R_min), the *length* reward
R_len = min(1, #think words / L) (Section 5.1), and the reward *scale* schedules of Section 5.2
(equal max, two-stage, dynamic), which move the format and correctness ranges with the step.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

Call = tuple[str, tuple[tuple[str, str], ...]]
"""A parsed call: `(name, ((key, value), ...))`, keys in the order written."""

_SHAPES = {
    "tool_call": re.compile(r"^<think>(?:(?!<\w+>|</\w+>).)*</think> <tool_call>(?:(?!<\w+>|</\w+>).)*</tool_call>$"),
    "response": re.compile(r"^<think>(?:(?!<\w+>|</\w+>).)*</think> <response>(?:(?!<\w+>|</\w+>).)*</response>$"),
}


# Parsing ---------------------------------------------------------------------------------------
def format_ok(text: str, kind: str) -> bool:
    """Whether `text` (canonical, single spaces) is exactly `<think> ... </think>` then one block
    of `kind` (`tool_call` or `response`), with no other tag anywhere."""
    return bool(_SHAPES[kind].match(" ".join(text.split())))


def parse_calls(text: str) -> list[Call] | None:
    """The calls inside the first `<tool_call> ... </tool_call>` of `text`, or None when there is
    no such block or its content is not a sequence of well-formed calls. Never raises."""
    match = re.search(r"<tool_call>(.*?)</tool_call>", text, flags=re.DOTALL)
    if match is None:
        return None
    words = match.group(1).split()
    calls, i = [], 0
    try:
        while i < len(words):
            # { name : NAME , args : { KEY : VALUE (, KEY : VALUE)* } }
            if words[i : i + 3] != ["{", "name", ":"] or words[i + 4 : i + 8] != [",", "args", ":", "{"]:
                return None
            name, i, args = words[i + 3], i + 8, []
            while words[i] != "}":
                if words[i + 1] != ":" or words[i] in "{}:," or words[i + 2] in "{}:,":
                    return None
                args.append((words[i], words[i + 2]))
                i += 3
                if words[i] == "," and words[i + 1] != "}":
                    i += 1
                elif words[i] != "}":
                    return None
            if words[i + 1] != "}":
                return None
            calls.append((name, tuple(args)))
            i += 2
    except IndexError:
        return None
    return calls


def render_call(name: str, args: dict[str, str] | tuple[tuple[str, str], ...]) -> str:
    """The canonical text of one call."""
    pairs = list(args.items()) if isinstance(args, dict) else list(args)
    inner = " , ".join(f"{k} : {v}" for k, v in pairs)
    return f"{{ name : {name} , args : {{ {inner} }} }}" if pairs else f"{{ name : {name} , args : {{ }} }}"


# The correctness score -------------------------------------------------------------------------
def multiset_jaccard(a: list[str], b: list[str]) -> float:
    """|A ∩ B| / |A ∪ B| over multisets; 1 when both are empty (nothing to disagree on)."""
    ca, cb = Counter(a), Counter(b)
    union = sum((ca | cb).values())
    return 1.0 if union == 0 else sum((ca & cb).values()) / union


def match_score(truth: list[Call], predicted: list[Call]) -> tuple[float, float]:
    """`(S, S_max)` of the partial-credit match (greedy per true call, as in `rlla.py`)."""
    s = multiset_jaccard([n for n, _ in truth], [n for n, _ in predicted])
    s_max = 1.0
    used: set[int] = set()
    for name, args in truth:
        keys = dict(args)
        s_max += 1 + len(keys)
        best, best_j = 0.0, None
        for j, (p_name, p_args) in enumerate(predicted):
            if j in used or p_name != name:
                continue
            p_keys = dict(p_args)
            score = multiset_jaccard([k for k, _ in args], [k for k, _ in p_args])
            score += sum(p_keys.get(k) == v for k, v in keys.items())
            if best_j is None or score > best:
                best, best_j = score, j
        if best_j is not None:
            used.add(best_j)
            s += best
    return s, s_max


def same_calls(truth: list[Call], predicted: list[Call]) -> bool:
    """Exact match: the same calls (name and argument dict), in any order."""
    canon = lambda calls: Counter((n, tuple(sorted(dict(a).items()))) for n, a in calls)  # noqa: E731
    return canon(truth) == canon(predicted)


def correctness(truth: list[Call], text: str, low: float = -3.0, high: float = 3.0, coarse: bool = False) -> float:
    """R_correct of response `text` against the true calls (none: a direct response is right)."""
    if not truth:
        return 0.0
    predicted = parse_calls(text)
    if predicted is None:
        return low
    if same_calls(truth, predicted):
        return high
    if coarse:
        return low
    s, s_max = match_score(truth, predicted)
    return (high - low) * s / s_max + low


def think_words(text: str) -> int:
    """Number of words between `<think>` and `</think>` (0 without a think block)."""
    match = re.search(r"<think>(.*?)</think>", text, flags=re.DOTALL)
    return 0 if match is None else len(match.group(1).split())


def length_reward(text: str, target: float) -> float:
    """R_len = min(1, #think words / L)."""
    return min(1.0, think_words(text) / target)


# Reward scales (Section 5.2) -------------------------------------------------------------------
@dataclass(frozen=True)
class Ranges:
    """Format reward is `format_high` on a match, else `format_low`; correctness lies in
    [`correct_low`, `correct_high`]."""

    format_low: float = 0.0
    format_high: float = 1.0
    correct_low: float = -3.0
    correct_high: float = 3.0


SCHEDULES = ("fixed", "equal_max", "two_stage", "dynamic")


def reward_ranges(schedule: str, step: int, horizon: int = 150, switch: int = 30) -> Ranges:
    """The reward ranges at training `step`.

    fixed: format {0, 1}, correctness [-3, 3] (the original).  equal_max: correctness [-1, 1].
    two_stage: correctness [-1, 1] before `switch`, then [-3, 3] with the format range halved.
    dynamic: linear over `horizon` steps, format max 2 -> 1 and min -2 -> -1 (reached at half the
    horizon, then clamped), correctness max 2 -> 3 and min -2 -> -3.
    """
    if schedule == "fixed":
        return Ranges()
    if schedule == "equal_max":
        return Ranges(correct_low=-1.0, correct_high=1.0)
    if schedule == "two_stage":
        return Ranges(correct_low=-1.0, correct_high=1.0) if step < switch else Ranges(format_high=0.5)
    if schedule == "dynamic":
        p = min(max(step / horizon, 0.0), 1.0)
        return Ranges(min(-1.0, -2.0 + 2 * p), 2.0 - p, -2.0 - p, 2.0 + p)
    raise ValueError(f"unknown schedule {schedule!r}; choose from {SCHEDULES}")


@dataclass(frozen=True)
class RewardSpec:
    """Which ToolRL reward to use."""

    coarse: bool = False
    """Exact-match correctness (+max or min) instead of partial credit."""
    schedule: str = "fixed"
    """Reward scale schedule, one of `SCHEDULES`."""
    horizon: int = 150
    """Steps over which the dynamic schedule (and dynamic length target) moves."""
    switch: int = 30
    """Step at which the two-stage schedule switches."""
    length_target: float = 0.0
    """L of the length reward; 0 turns the length reward off."""
    length_target_end: float | None = None
    """If set, L grows linearly from `length_target` to this over `horizon` (dynamic length)."""


def toolrl_reward(text: str, truth: list[Call], spec: RewardSpec = RewardSpec(), step: int = 0) -> dict[str, float]:
    """Every component of the reward of response `text`; `total` is what RL maximises."""
    ranges = reward_ranges(spec.schedule, step, spec.horizon, spec.switch)
    kind = "tool_call" if truth else "response"
    fmt = ranges.format_high if format_ok(text, kind) else ranges.format_low
    corr = correctness(truth, text, ranges.correct_low, ranges.correct_high, spec.coarse)
    length = 0.0
    if spec.length_target > 0:
        target = spec.length_target
        if spec.length_target_end is not None:
            target += (spec.length_target_end - target) * min(step / spec.horizon, 1.0)
        length = length_reward(text, target)
    return {"format": fmt, "correct": corr, "length": length, "total": fmt + corr + length}

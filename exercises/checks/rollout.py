"""Checks of `exercises/rollout.py` (chapter 00): the student's episode against the rollout engine's, token by token.

The policy the student's loop calls replays an expected trajectory: asked for the token at position n, it first
checks that the sequence so far is the expected one up to n and that the expected token there is one the policy
sampled, then returns it with its log-prob and entropy. So the first bookkeeping mistake stops the episode where it
happens, and the message names the position, what was expected there and what the loop did. The expected
trajectories are `RolloutEngine`'s own on chapter 00's word-level base (sampled, then replayed), and on a BPE
stand-in (a byte-level tokenizer and ChatML, where stop tags are several pieces) the reference rule's
(`course_lib.engine.episode.play_episode`, equal to the engine's by `tests/engine/test_episode.py`) with a scripted
policy. A finished episode is also put through chapter 00's exactness checks (`engine.bookkeeping`).
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from exercises.checks.common import Exercise, ExerciseFailure

FIELDS = (
    ("loss_mask", "1 on every token the policy sampled, 0 on the prompt and the observations"),
    ("turn_ids", "-1 on the prompt; k on turn k's sampled tokens and on the observation that answered it"),
    ("logprobs", "the policy's log-prob on its sampled tokens (pi_old of the update), 0 elsewhere"),
    ("entropies", "the policy's entropy on its sampled tokens, 0 elsewhere"),
    ("rewards", "one reward per env.step, in order"),
    ("anchors", "env.anchor() recorded just before each env.step"),
    ("terminated", "the episode's end as env.step said it"),
    ("truncated", "True when env.step truncated the episode or the sequence reached max_total_tokens"),
    ("cut", "True only when the sequence reached max_total_tokens with the episode still running"),
)


def where(expected, position: int, tokenizer) -> str:
    """What the expected sequence holds at `position`, in words."""
    from course_lib.tokenizer import decode

    token, mask, turn = (expected.token_ids[position], expected.loss_mask[position], expected.turn_ids[position])
    part = "the prompt" if turn == -1 else f"turn {turn}'s " + ("sampled tokens" if mask else "observation")
    return f"{decode(tokenizer, [token])!r} (in {part})"


class Replay:
    """The policy of a check: replays `expected`'s sampled tokens, refusing a sequence that has left it."""

    def __init__(self, expected, tokenizer, what: str):
        self.expected, self.tokenizer, self.what = expected, tokenizer, what

    def __call__(self, token_ids) -> tuple[int, float, float]:
        expected, ids = self.expected, list(token_ids)
        n = len(ids)
        for i, (mine, theirs) in enumerate(zip(ids, expected.token_ids, strict=False)):
            if mine != theirs:
                raise ExerciseFailure(self._diverged(i, ids))
        if n > len(expected.token_ids):
            raise ExerciseFailure(self._diverged(len(expected.token_ids), ids))
        if n == len(expected.token_ids):
            raise ExerciseFailure(
                f"{self.what}: you asked the policy for token {n}, but the episode ends at {n} tokens "
                f"({self._ending()}): stop when env.step ends the episode or the sequence reaches max_total_tokens"
            )
        if not expected.loss_mask[n]:
            raise ExerciseFailure(
                f"{self.what}: you asked the policy for token {n}, where the engine appends "
                f"{where(expected, n, self.tokenizer)}: "
                "the turn before it had ended (at a stop id, at the token that completes a stop string in the turn's "
                "decoded text, or after max_turn_tokens), so its text goes to env.step and the observation's ids "
                "(format.observation_ids(tokenizer, text, last_token)) follow, mask 0"
            )
        return expected.token_ids[n], expected.logprobs[n], expected.entropies[n]

    def _ending(self) -> str:
        expected = self.expected
        if expected.cut:
            return "the sequence reached max_total_tokens"
        return "env.step " + ("terminated" if expected.terminated else "truncated") + " it"

    def _diverged(self, i: int, ids: list[int]) -> str:
        from course_lib.tokenizer import decode

        expected = self.expected
        if i >= len(expected.token_ids):
            return f"{self.what}: your sequence goes on past the engine's {i} tokens ({self._ending()})"
        yours = decode(self.tokenizer, [ids[i]])
        wanted = where(expected, i, self.tokenizer)
        if expected.turn_ids[i] == -1:
            hint = "the prompt is format.prompt_ids(tokenizer, the first observation), nothing else"
        elif expected.loss_mask[i]:
            hint = (
                "the engine's turn goes on here: a turn ends only at a stop id, at the token that completes a stop "
                "string in the turn's decoded text, or after max_turn_tokens tokens"
            )
        else:
            hint = (
                "here the engine appends the observation: env.step gets the decoded turn (never re-encoded), and "
                "the ids of what it returns are format.observation_ids(tokenizer, text, last_token), last_token the "
                "turn's last sampled id"
            )
        return f"{self.what}: token {i} of your sequence is {yours!r}, the engine's {wanted}: {hint}"


def _compare(fn, engine, expected, env, what: str) -> None:
    """Play `expected`'s episode with `fn` and the replaying policy; fail at the first difference."""
    from course_lib.engine.bookkeeping import alignment_errors, expected_tokens
    from course_lib.engine.rollout import Trajectory

    mine = fn(engine, Replay(expected, engine.tokenizer, what), env, expected.seed)
    if not isinstance(mine, Trajectory):
        raise ExerciseFailure(f"{what}: return a course_lib.engine.rollout.Trajectory, not a {type(mine).__name__}")
    if list(mine.token_ids) != expected.token_ids:
        raise ExerciseFailure(
            f"{what}: your sequence has {len(mine.token_ids)} tokens, the engine's {len(expected.token_ids)}; the "
            "tokens you had when you last asked the policy matched, so the difference comes after: append the last "
            "turn's tokens and, unless the episode ended, its observation (up to max_total_tokens)"
        )
    for name, rule in FIELDS:
        got, want = getattr(mine, name), getattr(expected, name)
        if not isinstance(want, list):
            if got != want:
                raise ExerciseFailure(f"{what}: {name} is {got!r}, the engine's {want!r} ({rule})")
            continue
        got = list(got)
        if got != want:
            at = next((i for i, (g, w) in enumerate(zip(got, want, strict=False)) if g != w), min(len(got), len(want)))
            unit = "token" if len(want) == len(expected.token_ids) else "step"
            position = f", first at {unit} {at}"
            raise ExerciseFailure(f"{what}: {name} differs from the engine's{position} ({rule})")
    id_errors = alignment_errors(mine, engine.tokenizer, engine.format)
    ids, mask = expected_tokens(mine, engine.tokenizer, engine.format, actions="sampled")
    if id_errors or ids != mine.token_ids or mask != mine.loss_mask:
        raise ExerciseFailure(f"{what}: chapter 00's exactness checks fail: {(id_errors or ['ids or mask'])[0]}")


# The word-level base: episodes the engine sampled ---------------------------------------------------------------
@functools.cache
def _word_level():
    from course_lib import data
    from course_lib.chapters import ch00_tool_agent as ch00

    model, tokenizer = data.load_base(ch00.BASE_NAME, "cpu")
    return model, tokenizer, ch00.preset().sampling, ch00.make_env


@functools.cache
def _sampled(seeds: tuple[int, ...], **changes) -> tuple:
    """The engine's episodes of chapter 00's base on `seeds` (one row each, one generator), its sampling config
    changed by `changes`."""
    from course_lib.engine.rollout import RolloutEngine

    model, tokenizer, sampling, make_env = _word_level()
    engine = RolloutEngine(model, tokenizer, dataclasses.replace(sampling, **changes))
    rows = engine.rollout([make_env() for _ in seeds], list(seeds), generator=torch.Generator().manual_seed(0))
    return engine, rows, make_env


def _replayed(fn, seeds: tuple[int, ...], what: str, **changes) -> None:
    engine, rows, make_env = _sampled(seeds, **changes)
    for row in rows:
        _compare(fn, engine, row, make_env(), f"{what}, seed {row.seed}")


def one_tool_call(fn):
    engine, rows, make_env = _sampled(tuple(range(12)))
    # the batch's first episode that called the tool and went on: an observation between two turns
    row = next(row for row in rows if row.num_turns >= 2 and 0 in row.loss_mask[row.loss_mask.index(1) :])
    _compare(fn, engine, row, make_env(), f"chapter 00's base, a tool call then an answer, seed {row.seed}")


def twelve_episodes(fn):
    _replayed(fn, tuple(range(12)), "chapter 00's base, 12 episodes")


def turn_budget(fn):
    _replayed(fn, tuple(range(6)), "max_turn_tokens 3: turns that end without a stop", max_turn_tokens=3)


def sequence_cap(fn):
    _replayed(fn, tuple(range(6)), "max_total_tokens 12: sequences cut by the cap", max_total_tokens=12)


# A BPE stand-in: the reference rule, with scripted turns ---------------------------------------------------------
class Scripted:
    """A policy that writes planned turns, one id after another: a new turn starts when the sequence grew by more
    than the last token (an observation was appended). Distinct log-probs and entropies per token, so that a
    misaligned list shows."""

    def __init__(self, turns: list[list[int]], filler: int):
        self.turns, self.filler, self.turn, self.position, self.length = turns, filler, -1, 0, None

    def __call__(self, token_ids) -> tuple[int, float, float]:
        if self.length is None or len(token_ids) != self.length + 1:
            self.turn, self.position = self.turn + 1, 0
        plan = self.turns[self.turn] if self.turn < len(self.turns) else []
        token = plan[self.position] if self.position < len(plan) else self.filler
        self.position, self.length = self.position + 1, len(token_ids)
        return token, -0.01 * len(token_ids), 0.5 + 0.001 * len(token_ids)


@functools.cache
def _bpe():
    from course_lib.chapters import ch00_tool_agent as ch00
    from course_lib.course import standins
    from course_lib.engine.rollout import RolloutEngine, SamplingConfig

    tokenizer = standins.default_tokenizer()
    config = SamplingConfig(prompt_format="chat", max_turn_tokens=24, max_total_tokens=120)
    return RolloutEngine(None, tokenizer, config), ch00.make_env


def _bpe_episode(fn, seed: int, texts: list[str], spelled: bool, what: str, **changes) -> None:
    """Turns written as `texts` (each id by id: by the tokenizer's own segmentation, or with `spelled` one
    character per id, a sampling the tokenizer would not choose but the engine must keep as sampled)."""
    from course_lib.engine.episode import play_episode
    from course_lib.tokenizer import encode

    engine, make_env = _bpe()
    if changes:
        from course_lib.engine.rollout import RolloutEngine

        engine = RolloutEngine(None, engine.tokenizer, dataclasses.replace(engine.config, **changes))
    env = make_env()
    env.reset(seed=seed)
    a, op, b = env.problem
    texts = [text.format(a=a, op=op, b=b, result=a + b if op == "+" else a - b) for text in texts]
    tokenizer = engine.tokenizer

    def ids(text: str) -> list[int]:
        return [i for ch in text for i in encode(tokenizer, ch)] if spelled else encode(tokenizer, text)

    filler = encode(tokenizer, "x")[0]
    expected = play_episode(engine, Scripted([ids(text) for text in texts], filler), make_env(), seed)
    _compare(fn, engine, expected, make_env(), f"{what}, seed {seed}")


def bpe_stand_in(fn):
    what = "a BPE tokenizer with ChatML"
    # the tool call's stop completes inside the piece '>\n', then the answer
    _bpe_episode(fn, 3, ["<tool_call>{a} {op} {b}</tool_call>\n", "<answer>{result}</answer>"], False, what)
    # one character per id: the tool call runs out of turn tokens before its stop; the answer's '>' completes one
    _bpe_episode(fn, 4, ["<tool_call>{a} {op} {b}</tool_call>", "<answer>{result}</answer>"], True, what)
    # a first turn with no stop runs to max_turn_tokens; a short cap cuts the sequence inside an observation
    _bpe_episode(fn, 5, ["I think the answer is", "<answer>{result}</answer>"], False, what)
    _bpe_episode(fn, 6, ["<tool_call>{a} {op} {b}</tool_call>", "<answer>1</answer>"], False, what, max_total_tokens=40)


def library_play_episode(engine, policy, env, seed):
    from course_lib.engine.episode import play_episode

    return play_episode(engine, policy, env, seed)


EXERCISES = [
    Exercise(
        "rollout.play_episode",
        "00",
        "course_lib/engine/episode.py",
        library_play_episode,
        (
            ("one tool call", one_tool_call),
            ("twelve episodes", twelve_episodes),
            ("turn budget", turn_budget),
            ("sequence cap", sequence_cap),
            ("BPE stand-in", bpe_stand_in),
        ),
    ),
]

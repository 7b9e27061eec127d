"""Is the bookkeeping exact? A trajectory's ids checked against the environment's own transcript (every chapter's
mechanism check of the engine, and chapters 13-16's pitfalls).

`alignment_errors` compares ids: the prompt's and every observation's ids must be the prompt format's ids of the
text the environment returned, and the ids the policy sampled in a turn must decode to exactly the action the
environment received. `expected_tokens` rebuilds ids and mask from the transcript alone, as a trainer that
re-tokenizes the conversation would (with a BPE tokenizer, re-encoding an action may give other ids: retokenization
drift). `render` shows a trajectory with the policy's tokens bracketed.
"""

from __future__ import annotations

from course_lib.engine.prompt_format import PlainFormat
from course_lib.engine.rollout import Trajectory
from course_lib.tokenizer import decode, encode


def alignment_errors(trajectory: Trajectory, tokenizer, prompt_format=None) -> list[str]:
    """Mismatches between a trajectory's token ids and the environment's own transcript, at id level.

    The prompt's ids must be the prompt format's ids of the first observation, and every observation's ids the
    format's ids of the text the environment returned (for a sequence `cut` by the length cap, a prefix of them);
    the ids the policy sampled in a turn must decode to exactly the action the environment received (the policy's
    ids are never re-encoded: re-encoding its text may give other ids, which is the drift a re-tokenizing trainer
    sees, `expected_tokens`). An empty list means the bookkeeping is exact.
    """
    prompt_format = prompt_format or PlainFormat()
    transcript = trajectory.env.transcript
    ids, mask, turns = trajectory.token_ids, trajectory.loss_mask, trajectory.turn_ids
    errors = []
    prompt = [i for i, k in zip(ids, turns, strict=True) if k == -1]
    if prompt != prompt_format.prompt_ids(tokenizer, transcript.observations[0]):
        errors.append(f"prompt: {decode(tokenizer, prompt)!r} is not the format's {transcript.observations[0]!r}")
    for step, action in enumerate(transcript.actions):
        sampled_ids = [i for i, m, k in zip(ids, mask, turns, strict=True) if k == step and m == 1]
        sampled = decode(tokenizer, sampled_ids)
        if sampled != action:
            errors.append(f"turn {step} action: {sampled!r} != {action!r}")
        observed = [i for i, m, k in zip(ids, mask, turns, strict=True) if k == step and m == 0]
        last_step = trajectory.env.done and step == len(transcript.actions) - 1
        expected = [] if last_step else transcript.observations[step + 1]
        last_token = sampled_ids[-1] if sampled_ids else None
        expected_ids = prompt_format.observation_ids(tokenizer, expected, last_token) if expected else []
        if trajectory.cut and step == len(transcript.actions) - 1:
            expected_ids = expected_ids[: len(observed)]
        if observed != expected_ids:
            errors.append(f"turn {step} observation: {decode(tokenizer, observed)!r} != {expected!r}")
    return errors


def expected_tokens(
    trajectory: Trajectory, tokenizer, prompt_format=None, actions: str = "reencode"
) -> tuple[list[int], list[int]]:
    """Token ids and loss mask rebuilt independently from the environment's transcript.

    The prompt and every observation are encoded on their own (mask 0), every action too (mask 1): what a trainer
    that re-tokenizes the conversation's text sees. With the course's word-level tokenizers a rollout whose
    bookkeeping is exact has exactly these ids and this mask; with a BPE tokenizer the policy's sampled ids may spell
    an action differently from its encoding (retokenization drift). With `actions="sampled"` each action's ids are
    the trajectory's own sampled ids of that turn instead (the engine never re-encodes them), so that the check is
    of everything else: the prompt's and observations' ids and the mask, exact for any tokenizer (that the sampled
    ids decode to the action the environment received is `alignment_errors`'). For a sequence `cut` by the length
    cap, the
    unfinished last action (which the environment never saw) is taken from the trajectory, and the result is
    truncated to the trajectory's length.
    """
    if actions not in ("reencode", "sampled"):
        raise ValueError(f"actions must be 'reencode' or 'sampled', got {actions!r}")
    prompt_format = prompt_format or PlainFormat()
    transcript = trajectory.env.transcript
    ids = prompt_format.prompt_ids(tokenizer, transcript.observations[0])
    mask = [0] * len(ids)
    rows = list(zip(trajectory.token_ids, trajectory.loss_mask, trajectory.turn_ids, strict=True))
    for step, action in enumerate(transcript.actions):
        if actions == "sampled":
            action_ids = [i for i, m, k in rows if k == step and m == 1]
        else:
            action_ids = encode(tokenizer, action)
        ids += action_ids
        mask += [1] * len(action_ids)
        if not (trajectory.env.done and step == len(transcript.actions) - 1):
            last_token = action_ids[-1] if action_ids else None
            observation_ids = prompt_format.observation_ids(tokenizer, transcript.observations[step + 1], last_token)
            ids += observation_ids
            mask += [0] * len(observation_ids)
    if trajectory.cut:
        unsent = [
            i for i, k in zip(trajectory.token_ids, trajectory.turn_ids, strict=True) if k == len(transcript.actions)
        ]
        ids, mask = (ids + unsent)[: len(trajectory.token_ids)], (mask + [1] * len(unsent))[: len(trajectory.token_ids)]
    return ids, mask


def render(trajectory: Trajectory, tokenizer) -> str:
    """The trajectory's text with each run of policy tokens (loss mask 1) wrapped in [[ ]]."""
    parts, inside = [], False
    for token, mask in zip(trajectory.token_ids, trajectory.loss_mask, strict=True):
        if mask and not inside:
            parts.append("[[")
        elif not mask and inside:
            parts.append("]]")
        inside = bool(mask)
        parts.append(tokenizer.convert_ids_to_tokens(token))
    if inside:
        parts.append("]]")
    return " ".join(parts).replace("[[ ", "[[").replace(" ]]", "]]")

"""Chapter 15's bug hunt: a GRPO loop on chapter 00's task with three pitfalls planted, found with the course's
checks (`course.pitfalls`) the way one debugs one's own trainer: from what the loop logs and the tensors it trained
on, never from its source.

`mystery_loop(seed)` trains chapter 00's base for 8 iterations with three of the four `SUSPECTS` planted, chosen by
the seed (a class gives each student a seed, so neighbours hunt different bugs), and returns its `Evidence`: the
training history, the first batch as the engine sampled it, and the mask, advantages and log-probs the loop's loss
used on it. `mystery_loop(seed, fixed=[...])` runs it again with the named suspects fixed; `accuse(seed, names)`
says how many of the named suspects were planted. Each suspect is one of chapter 15's pitfalls, with its check:

| suspect | planted as | its check |
|---|---|---|
| `alignment` | the loss mask shifted one token later | `check_advantage_alignment` |
| `observations` | the tool's output tokens in the loss | `check_observation_share` |
| `entropy` | a learning rate of 5e-2, 100 times the course's | `check_entropy` |
| `staleness` | 4 updates on every batch | `check_staleness` |

A flag is not yet a diagnosis: plants show in each other's checks (measured here: a shifted mask alone, or stale
data alone, also drives the entropy out of its band within 8 iterations). Read each check's numbers, and run the
loop again with what you found fixed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

SUSPECTS = {
    "alignment": "the loss mask shifted one token later: each turn's first token gets no advantage",
    "observations": "the tool's output tokens are trained on as if the policy wrote them",
    "entropy": "a learning rate of 5e-2, 100 times the course's: the entropy runs away",
    "staleness": "4 updates on every batch: by the last one the data are off-policy",
}
"""The pitfalls the loop may hide, each with what it does (shown by `accuse` once found)."""
PLANTED = 3
ITERATIONS = 8
TASKS, GROUP = 4, 8
"""Chapter 00's group size; 32 episodes an iteration."""


@dataclass
class Evidence:
    """What the mystery loop leaves behind, as a trainer's logs and tensors would."""

    history: list[dict[str, float]]
    """One record per iteration: `entropy` (mean over the policy's sampled tokens), `success`, `reward`."""
    batch: object
    """The first iteration's `RolloutBatch` as the engine collated it (its `loss_mask` is 1 exactly on the tokens the
    policy sampled; `old_logprobs` the sampling policy's; `rewards`, `group_ids`)."""
    loss_mask: torch.Tensor
    """`[B, T]` the mask the loop's loss used on that batch."""
    advantages: torch.Tensor
    """`[B]` the advantage the loop gave each row."""
    logprobs: torch.Tensor
    """`[B, T]` the policy's log-probs at the loop's last update on that batch (detached): the ratio's numerator."""


def planted(seed: int) -> tuple[str, ...]:
    """The suspects `mystery_loop(seed)` plants (read it only to check a hunt, as `accuse` does)."""
    return tuple(sorted(random.Random(f"bug hunt {seed}").sample(sorted(SUSPECTS), PLANTED)))


def mystery_loop(seed: int, fixed: Sequence[str] = (), iterations: int = ITERATIONS) -> Evidence:
    """Chapter 00's GRPO from its base for `iterations` iterations of 4 tasks x 8 episodes, with `planted(seed)`
    hidden in it, except the suspects named in `fixed` (as one fixes a bug and runs again to see which symptoms
    remain); under a minute on a CPU."""
    import copy

    from course_lib import course_config, data
    from course_lib.algos.grpo import clipped_surrogate_loss, group_advantages
    from course_lib.course.pitfalls import shifted_right
    from course_lib.engine.rollout import RolloutEngine, collate
    from course_lib.models import token_logprobs
    from course_lib.rl.train import observation_and_policy_mask
    from course_lib.tasks import tool_arithmetic

    unknown = [name for name in fixed if name not in SUSPECTS]
    if unknown:
        raise ValueError(f"no suspect {unknown}; the suspects are {', '.join(SUSPECTS)}")
    if iterations < 1:
        raise ValueError(f"the loop needs at least one iteration, got {iterations}")
    bugs = set(planted(seed)) - set(fixed)
    updates = 4 if "staleness" in bugs else 1
    rate = 5e-2 if "entropy" in bugs else 5e-4
    course_config.seed_everything(seed)
    model, tokenizer = data.load_base(tool_arithmetic.BASE_NAME, course_config.device())
    model = copy.deepcopy(model)
    engine = RolloutEngine(model, tokenizer, tool_arithmetic.preset("cpu").sampling)
    optimizer = torch.optim.AdamW(model.parameters(), lr=rate, weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    make_env = tool_arithmetic.make_env
    history = []
    for iteration in range(iterations):
        tasks = [seed * 1_000_003 + iteration * 100 + k for k in range(TASKS)]
        seeds = [task for task in tasks for _ in range(GROUP)]
        groups = [k for k in range(TASKS) for _ in range(GROUP)]
        rows = engine.rollout([make_env() for _ in seeds], seeds, groups, generator)
        batch = collate(rows, tokenizer.pad_token_id)
        mask = batch.loss_mask
        if "observations" in bugs:
            mask = observation_and_policy_mask(batch.turn_ids, batch.attention_mask)
        if "alignment" in bugs:
            mask = shifted_right(mask)
        advantages = group_advantages(batch.rewards, batch.group_ids)
        policy = batch.loss_mask > 0
        history.append({
            "entropy": float(batch.entropies[policy].mean()),
            "success": sum(row.success for row in rows) / len(rows),
            "reward": float(batch.rewards.mean()),
        })  # fmt: skip
        model.train()
        for _ in range(updates):
            logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask)
            loss, _ = clipped_surrogate_loss(logprobs, batch.old_logprobs, advantages, mask)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        model.eval()
        if iteration == 0:  # what a careful trainer dumps: its first batch, before a bad run has wrecked the policy
            first = (batch, mask, advantages, logprobs.detach())
    return Evidence(history, *first)


def accuse(seed: int, names: Sequence[str]) -> str:
    """How many of the `names` were planted in `mystery_loop(seed)`: the line a hunt ends with. Unknown names are
    refused; a wrong accusation is named, a missed suspect is not (keep hunting)."""
    unknown = [name for name in names if name not in SUSPECTS]
    if unknown:
        raise ValueError(f"no suspect {unknown}; the suspects are {', '.join(SUSPECTS)}")
    bugs = set(planted(seed))
    right = [name for name in dict.fromkeys(names) if name in bugs]
    wrong = [name for name in dict.fromkeys(names) if name not in bugs]
    line = f"seed {seed}: {len(right)} of {PLANTED} planted pitfalls found"
    if right:
        line += ": " + "; ".join(f"{name} ({SUSPECTS[name]})" for name in right)
    if wrong:
        line += f". Not planted: {', '.join(wrong)}"
    return line + ("." if len(right) < PLANTED else ". All found.")

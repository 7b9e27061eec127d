"""Exercise 15.2: after how many reuses of one batch does the ratio check flag it, at two learning rates?

The lab's batch (8 train tasks x 8 rollouts of chapter 00's base, seed 0) and its pitfall-8 loop
(`ch15.staleness_pitfall`): AdamW steps of GRPO's clipped loss on the same batch, the ratio against the behaviour
log-probs measured before each step, judged by `pitfalls.check_staleness` (more than 5% of tokens outside the clip).
"""

import dataclasses

import torch

from course_lib import data
from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.chapters import ch15_pitfalls as ch15
from course_lib.engine.rollout import RolloutEngine, collate

config = ch15.preset()
model, tokenizer = data.load_base(ch00.BASE_NAME)
engine = RolloutEngine(model, tokenizer, ch00.preset("cpu").sampling)
rows = ch15.grouped_rollouts(
    engine, ch00.make_env, ch15.task_seeds(0, config.prompts), config.group_size, torch.Generator().manual_seed(0)
)
batch = collate(rows, tokenizer.pad_token_id)
for rate in (5e-4, 1e-4):
    lab = dataclasses.replace(config, course_learning_rate=rate)
    stale = ch15.staleness_pitfall(model, batch, lab)["per_update"]
    shares = " ".join(f"{s['outside_clip']:.2f}" for s in stale)
    first = next((k for k, s in enumerate(stale) if s["outside_clip"] > config.max_outside), None)
    print(f"learning rate {rate:g}: share outside the clip by update {shares}")
    print(f"  first flagged at update {first} (0 = fresh data), KL at the last {stale[-1]['kl']:.4f}")

"""Exercise 15.1: how the share of all-equal reward groups falls as the group grows, on chapter 00's base.

Groups of G rollouts of each of 32 train tasks; `pitfalls.check_zero_variance_groups` measures the share of groups
whose rewards are all equal. The prediction: a task the base solves with probability p gives an all-equal group of G
with probability p^G + (1 - p)^G, with p estimated from the task's group of 16.
"""

import torch

from course_lib import data
from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.chapters import ch15_pitfalls as ch15
from course_lib.course import pitfalls
from course_lib.engine.rollout import RolloutEngine, collate

model, tokenizer = data.load_base(ch00.BASE_NAME)
engine = RolloutEngine(model, tokenizer, ch00.preset("cpu").sampling)
seeds = ch15.task_seeds(0, 32)
sizes = (2, 4, 8, 16)
measured = {}
for size in sizes:
    rows = ch15.grouped_rollouts(engine, ch00.make_env, seeds, size, torch.Generator().manual_seed(0))
    batch = collate(rows, tokenizer.pad_token_id)
    measured[size] = pitfalls.check_zero_variance_groups(batch.rewards, batch.group_ids, 0.4, on_flag="return")
success = torch.tensor([float(t.success) for t in rows]).view(len(seeds), 16).mean(dim=1)  # p per task, G = 16
print(f"base success over the 32 tasks (G=16): {success.mean():.2f}")
for size in sizes:
    predicted = (success**size + (1 - success) ** size).mean()
    report = measured[size]
    print(f"G={size:2d}: all-equal groups {report.numbers['share']:.2f} (predicted {predicted:.2f}), "
          f"flagged at 0.4: {report.flagged}")  # fmt: skip

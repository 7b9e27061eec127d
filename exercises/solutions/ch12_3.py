"""Chapter 12, exercise 3 (one example answer): a method of your own through a seam. DAPO's dynamic-sampling filter
(arXiv 2503.14476) drops the groups whose rewards are all equal; here without DAPO's refill, as a batch filter on
AEPO's tree, beside the table's recorded rows."""

import copy

import torch

from course_lib import course_config, data
from course_lib.algos.filters import group_reward_std
from course_lib.chapters import ch12_capstone as ch12
from course_lib.course import recorded
from course_lib.rl import seams


def nonzero_std(batch, grpo):
    """Keep every row of a group whose episode rewards are not all equal (`[B]` bool)."""
    groups, stds = group_reward_std(batch.rewards.detach().cpu(), batch.group_ids.detach().cpu())
    informative = {group for group, std in zip(groups, stds.tolist(), strict=True) if std > 1e-10}
    return torch.tensor([int(g) in informative for g in batch.group_ids.tolist()], device=batch.input_ids.device)


seams.register("batch_filter", "nonzero_std", nonzero_std)
ch12.ARMS["aepo_dapo"] = {**ch12.AEPO, "batch_filter": "nonzero_std"}

SEED = 0
cfg = ch12.preset("cpu")
base, tokenizer = data.load_base(ch12.BASE_NAME, "cpu")
course_config.seed_everything(SEED)
base_stats = ch12.evaluate(base, tokenizer, cfg, SEED + 1)
model = copy.deepcopy(base)
course_config.seed_everything(SEED)
_, final = ch12.train(model, tokenizer, cfg, SEED, "aepo_dapo", base_stats["monitor_mi"])

seeds = recorded.seed_numbers(recorded.load("ch12"))
print("method     held-out success               held-out MI  s/iteration")
for row in ch12.table_rows(seeds, ("grpo", "aepo", "aepo_snr")):
    print(f"{row['arm']:9}  {row['success']:.3f} (range {row['low']:.3f}-{row['high']:.3f}, "
          f"{len(seeds)} seeds)  {row['mi']:11.2f}  {row['seconds']:.2f}")  # fmt: skip
print(f"aepo_dapo  {final['success']:.3f} (seed {SEED}, this run)        {final['mi']:11.2f}  "
      f"{final['seconds_per_iteration']:.2f}")  # fmt: skip

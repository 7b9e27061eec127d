"""Chapter 10, exercise 2: the published filter. On the same training batches (GRPO with the linear filter, 10
iterations from the base), how many groups of 8 would RAGEN-2's softmax form keep, and how many does the linear one?"""

import copy
import dataclasses

from course_lib import course_config, data
from course_lib.algos.filters import FilterConfig
from course_lib.chapters import ch10_ragen2 as ch10
from course_lib.rl import seams
from course_lib.rl.train import train_grpo

SEED, ITERATIONS = 0, 10
cfg = ch10.preset("cpu")
model, tokenizer = data.load_base(ch10.BASE_NAME, "cpu")
published = FilterConfig(top_p=0.9, mode="softmax", include_zero=True)
counts = []


def both(batch, grpo):
    """Keep what the linear filter keeps (training is chapter 10's `grpo_snr`); count what the softmax form would."""
    keep = seams.snr_top_p(batch, grpo)
    softmax = seams.snr_top_p(batch, dataclasses.replace(grpo, filter=published))
    counts.append((int(keep.sum()) // grpo.group_size, int(softmax.sum()) // grpo.group_size))
    return keep


seams.register("batch_filter", "both", both)
grpo = dataclasses.replace(ch10.arm_config(cfg, "grpo_snr"), batch_filter="both", iterations=ITERATIONS)
course_config.seed_everything(SEED)
train_grpo(copy.deepcopy(model), tokenizer, lambda: ch10.make_env("train"), cfg.sampling, grpo, SEED)
print(f"groups kept of {cfg.grpo.prompts_per_iteration} per batch, {len(counts)} batches, seed {SEED}")
print("linear top-p 0.9, zero-std dropped:", [linear for linear, _ in counts])
print("softmax top-p 0.9, zero-std kept:  ", [softmax for _, softmax in counts])
print(
    f"mean: linear {sum(c[0] for c in counts) / len(counts):.1f}, softmax {sum(c[1] for c in counts) / len(counts):.1f}"
)

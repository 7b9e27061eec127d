"""Chapter 08, exercise 1: does entropy-guided branching (alpha 0, beta 10) make groups vary more than independent
sampling? Both samplers on the base, fresh seeds, more questions per seed than the chapter's 64."""

import dataclasses

import numpy as np

from course_lib import data
from course_lib.chapters import ch08_arpo as ch08
from course_lib.course import recorded

SEEDS = range(5, 9)  # after the recorded seeds 0-4
PROMPTS = 128
cfg = ch08.preset("cpu")
cfg = dataclasses.replace(cfg, variance_prompts=PROMPTS, ablations={"arpo_entropy": cfg.ablations["arpo_entropy"]})
model, tokenizer = data.load_base(ch08.BASE_NAME, "cpu")

rec = recorded.load("ch08")
old = [recorded.recorded_numbers(rec, f"{arm}_varied_share") for arm in ("grpo", "arpo_entropy")]
head = f"recorded seeds {min(rec['seeds'])}-{max(rec['seeds'])} (64 questions): "
print(head + "independent " + " ".join(f"{v:.3f}" for v in old[0]))
print(" " * len(head) + "entropy tree " + " ".join(f"{v:.3f}" for v in old[1]))
differences = []
for seed in SEEDS:
    sampled = ch08.sample_both(model, tokenizer, cfg, seed)
    grpo, tree = sampled["grpo"]["varied_share"], sampled["arpo_entropy"]["varied_share"]
    differences.append(tree - grpo)
    print(
        f"seed {seed} ({PROMPTS} questions): varied groups, independent {grpo:.3f}, "
        f"ARPO tree {sampled['arpo']['varied_share']:.3f}, "
        f"entropy tree {tree:.3f} (refills {sampled['arpo_entropy']['tree_refill_share']:.3f})"
    )
mean = float(np.mean(differences))
print(
    f"entropy tree minus independent: mean {mean:+.3f}, "
    f"ahead on {sum(d > 0 for d in differences)} of {len(differences)} seeds"
)

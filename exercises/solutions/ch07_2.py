"""Chapter 07, exercise 2: how much discount? GiGPO with gamma 0.8 and 0.99 beside the recorded 0.95 and 1."""

import copy
import dataclasses

from course_lib import course_config, data
from course_lib.chapters import ch07_gigpo as ch07
from course_lib.course import recorded

SEEDS = (0, 1, 2)
cfg = ch07.preset("cpu")
model, tokenizer = data.load_base(ch07.BASE_NAME, "cpu")
rec = recorded.load("ch07")
finals = {
    "0.95 (recorded)": recorded.recorded_numbers(rec, "gigpo_success"),
    "1.0 (recorded)": recorded.recorded_numbers(rec, "gigpo_gamma1_success"),
}
for gamma in (0.8, 0.99):
    finals[str(gamma)] = []
    for seed in SEEDS:
        course_config.seed_everything(seed)
        grpo = ch07.arm_config(cfg, "gigpo")
        grpo = dataclasses.replace(grpo, gigpo=dataclasses.replace(grpo.gigpo, gamma=gamma))
        history = ch07.train(copy.deepcopy(model), tokenizer, cfg, seed, grpo)
        finals[str(gamma)].append(history[-1]["eval_success"])

print("held-out success after 20 iterations, seeds " + " ".join(str(s) for s in SEEDS))
for gamma in ("0.8", "0.95 (recorded)", "0.99", "1.0 (recorded)"):
    values = finals[gamma][: len(SEEDS)]
    print(f"gamma {gamma:16} " + "  ".join(f"{v:.3f}" for v in values) + f"   mean {sum(values) / len(values):.3f}")

"""Chapter 08, exercise 3: the released budget, M = 16 trajectories per question with N = 8 global samples (the
chapter runs M = 8, N = 4). GRPO and ARPO for 30 iterations on seed 0."""

import copy
import dataclasses

from course_lib import course_config, data
from course_lib.chapters import ch08_arpo as ch08
from course_lib.course import recorded

SEED = 0
cfg = ch08.preset("cpu")
tree = dataclasses.replace(cfg.grpo.tree, global_samples=8)
cfg = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, group_size=16, tree=tree))
model, tokenizer = data.load_base(ch08.BASE_NAME, "cpu")
rec = recorded.load("ch08")
print(f"held-out success on seed {SEED}, iterations 0 / 10 / 20 / 30; precise first search at the end")
for arm, name in (("grpo", "GRPO"), ("arpo", "ARPO")):
    course_config.seed_everything(SEED)
    history = ch08.train(copy.deepcopy(model), tokenizer, cfg, SEED, arm)
    curve = " / ".join(f"{r['eval_success']:.3f}" for r in history if "eval_success" in r)
    before = recorded.recorded_numbers(rec, f"{arm}_success")[SEED]
    print(
        f"{name} at M = 16: {curve}; precise {history[-1]['eval_precise_first_search']:.3f} "
        f"(M = 8, recorded: {before:.3f})"
    )

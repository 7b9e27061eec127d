"""Chapter 11, exercise 1: make the consecutive-branch penalty bite (slope 0.3 instead of the released 0.05)."""

import dataclasses

from course_lib import course_config, data
from course_lib.chapters import ch11_aepo as ch11
from course_lib.course import recorded

SEED = 0
cfg = ch11.preset("cpu")
model, tokenizer = data.load_base(ch11.BASE_NAME, "cpu")
course_config.seed_everything(SEED)

tree = dataclasses.replace(cfg.grpo.tree, penalty_slope=0.3)
steep = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, tree=tree))
measured = ch11.branch_concentration(model, tokenizer, steep, SEED)
released = recorded.load("ch11")["seeds"][str(SEED)]["numbers"]  # the same questions at slope 0.05, seed 0

print(f"{cfg.sampler_prompts} questions, budget {cfg.sampler_budget} with {cfg.sampler_globals} global samples")
print("tree          slope  branches/question  branch share  top-3 share  uniform  chain depth")
for rule, slope in (("arpo", "-"), ("aepo", 0.05)):
    n = {key: released[f"{rule}_{key}"] for key in measured[rule]}
    print(f"{rule} (rec.)   {slope!s:5}  {n['branches_per_question']:17.2f}  {n['branch_share']:12.3f}  "
          f"{n['top3_share']:11.3f}  {n['uniform_top3_share']:7.3f}  {n['chain_depth']:11.2f}")  # fmt: skip
for rule, slope in (("arpo", "-"), ("aepo", 0.3)):
    n = measured[rule]
    print(f"{rule} (run)    {slope!s:5}  {n['branches_per_question']:17.2f}  {n['branch_share']:12.3f}  "
          f"{n['top3_share']:11.3f}  {n['uniform_top3_share']:7.3f}  {n['chain_depth']:11.2f}")  # fmt: skip

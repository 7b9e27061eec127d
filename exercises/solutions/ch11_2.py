"""Chapter 11, exercise 2: entropy pre-monitoring on the code's scale and in nats, at budgets k = 16 and k = 8."""

import dataclasses

from course_lib import course_config
from course_lib.chapters import ch11_aepo as ch11

SEED = 0
PROMPTS = 16  # the chapter measures 64 questions per kind; 16 keep this under a minute and show the same split
course_config.seed_everything(SEED)

print(f"{PROMPTS} training questions per kind; m = global samples of a budget k (the rest are for branches)")
print("k   kind  H_root   H_tool   m (code's scale)  m (nats)  branch share (code's)  (nats)")
for budget in (16, 8):
    cfg = dataclasses.replace(ch11.preset("cpu"), sampler_budget=budget, sampler_prompts=PROMPTS)
    for kind, row in ch11.budget_split(cfg, SEED).items():
        print(f"{budget:<3} {kind:5} {row['h_root']:.4f}  {row['h_tool']:.4f}  {row['globals']:16.2f}  "
              f"{row['globals_nats']:8.2f}  {row['branch_share']:21.3f}  {row['branch_share_nats']:.3f}")  # fmt: skip

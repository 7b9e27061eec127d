"""Chapter 12, exercise 2: where should the MI stop's line be? AEPO under the collapse inducer with the MI stop
(`aepo_bonus_mi`), the stop at 10%, 20% (the chapter's) and 40% below the base's monitor MI."""

import copy
import dataclasses
import math

from course_lib import course_config, data
from course_lib.chapters import ch12_capstone as ch12

SEED = 0
cfg = ch12.preset("cpu")
base, tokenizer = data.load_base(ch12.BASE_NAME, "cpu")
course_config.seed_everything(SEED)
base_stats = ch12.evaluate(base, tokenizer, cfg, SEED + 1)
print(f"base: held-out success {base_stats['success']:.3f}, monitor MI {base_stats['monitor_mi']:.2f}")
print("gate_drop  line (nats)  stop fired at  updates made  held-out success  held-out MI")
for drop in (0.1, 0.2, 0.4):
    run = dataclasses.replace(cfg, gate_drop=drop)
    model = copy.deepcopy(base)
    course_config.seed_everything(SEED)
    _, final = ch12.train(model, tokenizer, run, SEED, "aepo_bonus_mi", base_stats["monitor_mi"])
    fired = "never" if math.isnan(final["stopped_at"]) else f"iteration {final['stopped_at']:.0f}"
    line = (1 - drop) * base_stats["monitor_mi"]
    print(f"{drop:9}  {line:11.2f}  {fired:>13}  {final['iterations']:12.0f}  {final['success']:16.3f}  "
          f"{final['mi']:11.2f}")  # fmt: skip

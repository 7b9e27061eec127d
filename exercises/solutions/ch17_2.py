"""Chapter 17, exercise 2: IGPO's options. The paper's defaults (probability gain, one pool per group) against the
official example script's (log-probability gain, gains and outcomes normalised apart), on seed 0 of chapter 08's
task, beside GRPO."""

import copy
import dataclasses

from course_lib import course_config, data
from course_lib.chapters import ch17_what_came_next as ch17

SEED = 0
cfg = ch17.preset("cpu")
model, tokenizer = data.load_base(cfg.search.base, "cpu")
arms = {
    "GRPO": ch17.search_arm(cfg, "grpo"),
    "IGPO, prob gain, joint pool (paper)": ch17.search_arm(cfg, "igpo"),
}
igpo = ch17.search_arm(cfg, "igpo")
arms["IGPO, log-prob gain, separate pools"] = dataclasses.replace(
    igpo, igpo=dataclasses.replace(igpo.igpo, gain="log_prob", normalisation="separate")
)
print(f"seed {SEED}: held-out success at iterations 0 / 10 / 20 / 30, and the mean gain per turn in training")
for name, grpo in arms.items():
    course_config.seed_everything(SEED)
    history = ch17.train_search(copy.deepcopy(model), tokenizer, cfg, SEED, grpo)
    curve = " / ".join(f"{r['eval_success']:.3f}" for r in history if "eval_success" in r)
    gains = [r["igpo_mean_gain"] for r in history if "igpo_mean_gain" in r]
    gain = f"   gain {sum(gains) / len(gains):+.3f}" if gains else ""
    print(f"{name:38} {curve}{gain}")

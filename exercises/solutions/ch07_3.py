"""Chapter 07, exercise 3: the weight omega of the step advantage (A = A^E + omega * A^S), on seed 0."""

import copy
import dataclasses

from course_lib import course_config, data
from course_lib.chapters import ch07_gigpo as ch07
from course_lib.course import recorded

SEED = 0
cfg = ch07.preset("cpu")
model, tokenizer = data.load_base(ch07.BASE_NAME, "cpu")
histories = {}
for name, arm, omega in (
    ("GRPO", "grpo", 1.0),
    ("omega 0", "gigpo", 0.0),
    ("omega 1", "gigpo", 1.0),
    ("omega 2", "gigpo", 2.0),
):
    course_config.seed_everything(SEED)
    grpo = ch07.arm_config(cfg, arm)
    grpo = dataclasses.replace(grpo, gigpo=dataclasses.replace(grpo.gigpo, step_weight=omega))
    histories[name] = ch07.train(copy.deepcopy(model), tokenizer, cfg, SEED, grpo)

rec = recorded.load("ch07")
recorded_final = {"GRPO": "grpo_success", "omega 1": "gigpo_success"}
print(f"held-out success on seed {SEED}, iterations 0 / 10 / 20")
for name, history in histories.items():
    curve = " / ".join(f"{r['eval_success']:.3f}" for r in history if "eval_success" in r)
    note = (
        f"   (recorded: {recorded.recorded_numbers(rec, recorded_final[name])[SEED]:.3f})"
        if name in recorded_final
        else ""
    )
    print(f"{name:8} {curve}{note}")
same = ch07.without_times(ch07.strip_step_stats(histories["omega 0"])) == ch07.without_times(histories["GRPO"])
print(f"omega 0 run identical to GRPO's, record for record (timings and step-group statistics aside): {same}")

"""Chapter 10, exercise 1: the regularisers alone. The `entropy` arm with its task advantage zeroed (as RAGEN-2's
`zero_task_advantage` does), 20 iterations from the base, against the recorded `entropy` arm of the same seed."""

import copy
import dataclasses

import torch

from course_lib import data
from course_lib.chapters import ch09_ragen as ch09
from course_lib.chapters import ch10_ragen2 as ch10
from course_lib.course import recorded
from course_lib.rl import seams

SEED, ITERATIONS = 0, 20
cfg = ch10.preset("cpu")
model, tokenizer = data.load_base(ch10.BASE_NAME, "cpu")
seams.register("advantage", "zero", lambda batch, config: (torch.zeros(batch.input_ids.shape[0]), {}))
grpo = dataclasses.replace(cfg.grpo, advantage="zero", iterations=ITERATIONS)
history = ch10.train(copy.deepcopy(model), tokenizer, dataclasses.replace(cfg, grpo=grpo), SEED, "entropy")
print(f"seed {SEED}, held-out at iterations 0/10/20 (128 maps; MI from 64 first reasonings)")
for key, label in (("success", "success"), ("mi", "MI, nats"), ("entropy", "entropy")):
    with_task = dict(recorded.load_curves("ch10", f"entropy/eval_{key}")[SEED])
    alone = dict(ch09.eval_curve(history, key))
    print(f"{label:9} bonus + task advantage (recorded):", " -> ".join(f"{with_task[i]:.3f}" for i in (0, 10, 20)))
    print(f"{label:9} bonus alone:                       ", " -> ".join(f"{alone[i]:.3f}" for i in (0, 10, 20)))
invalid = dict(ch09.eval_curve(history, "invalid_rate"))
print("invalid turns, bonus alone:", " -> ".join(f"{invalid[i]:.3f}" for i in (0, 10, 20)))

"""Chapter 09, exercise 3: what collapse writes. Push StarPO to break (three times the course's learning rate, 20
iterations), then read the held-out turns that broke the format, as RAGEN's issue #52 read its Sokoban outputs."""

import copy
import dataclasses

from course_lib import data
from course_lib.chapters import ch09_ragen as ch09

SEED = 0
cfg = ch09.preset("cpu")
model, tokenizer = data.load_base(ch09.BASE_NAME, "cpu")
grpo = dataclasses.replace(cfg.grpo, learning_rate=1.5e-3, iterations=20, eval_every=20)
policy = copy.deepcopy(model)
ch09.train(policy, tokenizer, dataclasses.replace(cfg, grpo=grpo), SEED, "starpo")
for name, trained in (("base", model), ("StarPO at lr 1.5e-3, 20 iterations", policy)):
    stats = ch09.evaluate(trained, tokenizer, cfg, SEED + 1, keep=True)
    print(f"{name}: success {stats['success']:.3f}, invalid turns {stats['invalid_rate']:.3f}")
    for count, text in ch09.common_broken_turns(stats["trajectories"], tokenizer, count=3):
        print(f"    {count:4d} x  {text[:70]}")

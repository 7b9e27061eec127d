"""Chapter 05, exercise 4: make exact matches rare (every query needs two calls) and compare fine with coarse.

Ten paired seeds take about 10 CPU-minutes; this solution runs three (six arms), evaluates only at the end, and
reports the three-seed interval."""

import dataclasses

from course_lib import course_config, data
from course_lib.chapters import ch05_toolrl as ch05
from course_lib.envs.function_calling import TaskMix

cfg = dataclasses.replace(ch05.preset(), task_mix=TaskMix(0.0, 1.0, 0.0))
cfg = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, eval_every=cfg.grpo.iterations))  # final only
base, tokenizer = data.load_base(ch05.BASE_NAME, course_config.device())
print(f"base on two-call queries: success {ch05.evaluate(base, tokenizer, cfg, 0)['success']:.3f}")
differences = []
print("seed  fine success  coarse success  fine - coarse (points)")
for seed in (0, 1, 2):
    success = {}
    for arm in ("fine", "coarse"):
        model, history = ch05.train_rl_arm(base, tokenizer, arm, cfg, seed)
        success[arm] = [r["eval_success"] for r in history if "eval_success" in r][-1]
    differences.append(success["fine"] - success["coarse"])
    print(f"{seed:4}  {success['fine']:12.3f}  {success['coarse']:14.3f}  {100 * differences[-1]:+22.1f}")
mean, low, high = ch05.paired_interval(differences)
print(f"3 seeds: mean {100 * mean:+.1f} points, 95% interval [{100 * low:+.1f}, {100 * high:+.1f}]")

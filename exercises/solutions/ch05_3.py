"""Chapter 05, exercise 3: the two-stage and equal-max reward schedules against the fixed scale.

Ten paired seeds of three arms take about 17 CPU-minutes; this solution runs two seeds (six arms) and reports what two
seeds can say. ToolRL's fixed scale is the chapter's "fine" arm."""

import torch

from course_lib import course_config, data
from course_lib.chapters import ch05_toolrl as ch05
from course_lib.envs.function_calling import FunctionCallingEnv
from course_lib.envs.toolrl_reward import RewardSpec
from course_lib.rl.train import train_grpo

cfg = ch05.preset()
base, tokenizer = data.load_base(ch05.BASE_NAME, course_config.device())
SPECS = {
    "fixed": RewardSpec(),
    "two_stage": RewardSpec(schedule="two_stage", switch=30),
    "equal_max": RewardSpec(schedule="equal_max"),
}
final: dict[str, list[float]] = {name: [] for name in SPECS}
print("seed  schedule   success at 15/30/45/60  reward std, iterations 25-35")
for seed in (0, 1):
    for name, spec in SPECS.items():
        torch.manual_seed(seed)
        model = ch05.lora(base, cfg)
        history = train_grpo(
            model, tokenizer, lambda spec=spec: FunctionCallingEnv("train", spec, cfg.task_mix), cfg.sampling,
            cfg.grpo, seed, evaluate=lambda m, seed=seed: ch05.evaluate(m, tokenizer, cfg, seed),
        )  # fmt: skip
        evals = [r["eval_success"] for r in history if "eval_success" in r and r["iteration"] > 0]
        spread = [r["reward_std"] for r in history if "reward_std" in r and 25 <= r["iteration"] <= 35]
        final[name].append(evals[-1])
        print(f"{seed:4}  {name:9}  {'/'.join(f'{e:.3f}' for e in evals):>22}  {sum(spread) / len(spread):29.2f}")
for name in ("two_stage", "equal_max"):
    diffs = [100 * (a - b) for a, b in zip(final[name], final["fixed"])]
    print(f"{name} - fixed, final success: {', '.join(f'{d:+.1f}' for d in diffs)} points")

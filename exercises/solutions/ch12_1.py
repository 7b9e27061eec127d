"""Chapter 12, exercise 1: a gate instead of a stop. While the monitor's MI is below the line, the batch filter keeps
no rows (the loop then skips the update); nothing is rolled back. At the chapter's line (20% below the base's) and
at a stricter one (10%)."""

import copy
import dataclasses

import torch

from course_lib import course_config, data
from course_lib.chapters import ch12_capstone as ch12
from course_lib.rl import seams
from course_lib.rl.train import train_grpo

SEED = 0
cfg = ch12.preset("cpu")
base, tokenizer = data.load_base(ch12.BASE_NAME, "cpu")
course_config.seed_everything(SEED)
base_stats = ch12.evaluate(base, tokenizer, cfg, SEED + 1)


class MIGate:
    """Open while the last monitor MI passed the line; `evaluate` (every 5 iterations) updates it."""

    def __init__(self, line: float):
        self.line, self.open = line, True

    def evaluate(self, model):
        stats = ch12.evaluate(model, tokenizer, cfg, SEED + 1)
        self.open = stats["monitor_mi"] >= self.line
        return stats

    def batch_filter(self, batch, grpo):
        return torch.full((batch.input_ids.shape[0],), self.open, dtype=torch.bool)


def gated_run(drop: float) -> tuple[float, list[dict]]:
    """AEPO under the entropy bonus with the gate at (1 - drop) x the base's monitor MI, from the base."""
    gate = MIGate((1 - drop) * base_stats["monitor_mi"])
    seams.register("batch_filter", "mi_gate", gate.batch_filter)
    grpo = dataclasses.replace(ch12.arm_config(cfg, "aepo_bonus"), batch_filter="mi_gate", eval_every=cfg.monitor_every)
    model = copy.deepcopy(base)
    course_config.seed_everything(SEED)
    history = train_grpo(
        model, tokenizer, lambda: ch12.make_env("train", cfg),
        dataclasses.replace(cfg.task.sampling, snapshot_envs=True), grpo, SEED, evaluate=gate.evaluate,
    )  # fmt: skip
    return gate.line, history


runs = {drop: gated_run(drop) for drop in (0.2, 0.1)}
print(f"base: held-out success {base_stats['success']:.3f}, monitor MI {base_stats['monitor_mi']:.2f}")
print("           " + "".join(f"| gate_drop {drop}, line {line:.2f}    " for drop, (line, _) in runs.items()))
print("iteration  " + "| success  monitor MI  gate " * len(runs))
evaluated = {drop: [row for row in history if "eval_success" in row] for drop, (_, history) in runs.items()}
for rows in zip(*evaluated.values(), strict=True):
    cells = []
    for row, (line, _) in zip(rows, runs.values(), strict=True):
        state = "open" if row["eval_monitor_mi"] >= line else "shut"
        cells.append(f"| {row['eval_success']:7.3f}  {row['eval_monitor_mi']:10.2f}  {state} ")
    print(f"{rows[0]['iteration']:9}  " + "".join(cells))
for drop, (_, history) in runs.items():
    skipped = sum(int(row.get("skipped_update", 0)) for row in history)
    print(f"gate_drop {drop}: updates skipped {skipped} of {cfg.grpo.iterations}")

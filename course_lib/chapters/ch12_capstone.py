"""Chapter 12, the capstone: branch where entropy rises, learn only from groups with signal, watch input dependence.

The survey this course follows ("Agentic RL, a survey: tool calling, credit assignment and training stability, from
RAP to AEPO", a blog post in Chinese, 27 June 2026) ends by proposing a combination of the ideas of chapters 07-11;
no public code builds it. Here it is, on one shared environment, chapter 08's two-hop search task and base:

- **Branch at high-entropy steps** (AEPO, chapter 11): the tree sampler with the consecutive-branch penalty, and
  the entropy-balanced clip in the update.
- **Keep only informative groups** (RAGEN-2's SNR filter, chapter 10): linear top-p 0.9 over the groups' reward
  std, zero-std groups dropped.
- **Watch input dependence** (RAGEN-2's mutual information, chapter 10), as an early stop with a rollback. Every
  `eval_every` iterations the policy plays `monitor_prompts` fixed *training* questions once and its first
  actions are cross-scored under every one of them (MI of the first action, `diagnostics.reasoning_mutual_
  information(span="action")`); if MI has fallen more than `gate_drop` (20%) below the base's, training stops
  and the policy rolls back to its last state that passed. Why an early stop and not a per-batch gate: a gate
  that skips updates freezes a drifting policy instead of undoing the drift, and a per-batch estimate over 8
  prompts is too noisy to act on; why training questions: a decision made on held-out questions would leak them
  into training.

`run(seed)` trains, from the same base at the same budget (30 iterations of 8 questions x 8 trajectories, 4
updates per batch), every RL method of the course that runs on this task, plus the ablations of the combination:

| arm | sampler | advantage | filter | loss | MI stop |
|---|---|---|---|---|---|
| `grpo` | groups | GRPO | none | clip | no |
| `gigpo` | groups | GiGPO (anchors: the observations) | none | clip | no |
| `starpo_s` | groups | GRPO | StarPO-S (top 25% by std) | clip-higher 0.28 | no |
| `arpo` | ARPO's tree | GRPO | none | clip | no |
| `aepo` | AEPO's tree | GRPO | none | balanced clip | no |
| `aepo_snr` | AEPO's tree | GRPO | SNR top-p | balanced clip | no |
| `combined` | AEPO's tree | GRPO | SNR top-p | balanced clip | yes |

and the stress test (C12.1): AEPO with RAGEN-2's collapse inducer, an entropy bonus of 0.1 on every policy token
(`aepo_bonus`), then with each part of the combination added (`aepo_bonus_snr`, `aepo_bonus_mi`) and with both
(`combined_bonus`). Each arm's final policy plays the 258 held-out questions once; the held-out MI of its first
actions (64 of them cross-scored under all 258 questions) says whether it collapsed.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from course_lib import course_config, data
from course_lib.algos.filters import FilterConfig
from course_lib.chapters import skeleton
from course_lib.course import leakage, recorded
from course_lib.course.claims import Claim, ClaimSpec, at_least, evaluate_all
from course_lib.diagnostics import MIStop
from course_lib.rl.train import GRPOConfig, train_grpo
from course_lib.tasks import two_hop_search

BASE_NAME = two_hop_search.BASE_NAME


@dataclass
class Chapter12Config:
    """Everything chapter 12 varies, with the cpu preset's values as defaults."""

    task: two_hop_search.SearchConfig = field(default_factory=two_hop_search.SearchConfig)
    """Chapter 08's task, base, sampling and held-out evaluation (all 258 test questions)."""
    grpo: GRPOConfig = field(
        default_factory=lambda: dataclasses.replace(
            two_hop_search.SearchConfig().grpo,
            updates_per_batch=4,  # chapter 11's: four updates per batch
            filter=FilterConfig(top_p=0.9, mode="linear", include_zero=False),
        )
    )
    """Chapter 11's budget (evaluated every 10 iterations; the arms with the MI stop every `monitor_every`)."""
    monitor_every: int = 5
    """How often the arms with the MI stop evaluate, so that it can act within 5 iterations (evaluating does not
    change training: it draws from its own random stream)."""
    monitor_prompts: int = two_hop_search.MONITOR_PROMPTS
    """Training questions the MI monitor plays (one episode each) and cross-scores."""
    gate_drop: float = two_hop_search.GATE_DROP
    """The MI stop fires when the monitor's MI falls below (1 - gate_drop) x the base's."""
    mi_samples: int = 64
    """Held-out first actions cross-scored under all held-out questions for each final policy's MI."""
    bonus: float = 0.1
    """The stress test's entropy bonus (chapter 10's coefficient), on every policy token."""


def preset(scale: str | None = None) -> Chapter12Config:
    """The chapter's configuration for `COURSE_SCALE` (`cpu` or `gpu`)."""
    cpu = Chapter12Config()
    # `task` names chapter 08's gpu recipe: the base this chapter loads under gpu (`ch08_base`) is that one.
    gpu = Chapter12Config(
        task=two_hop_search.preset("gpu"), grpo=dataclasses.replace(cpu.grpo, iterations=100, prompts_per_iteration=16)
    )
    return course_config.by_scale(cpu, gpu, scale)


def make_env(split: str = "train", config: Chapter12Config | None = None):
    return two_hop_search.make_env(split, (config or Chapter12Config()).task)


test_seeds = two_hop_search.test_seeds

AEPO = {"sampler": "tree", "rule": "aepo", "policy_loss": "entropy_balanced"}
ARMS: dict[str, dict] = {
    "grpo": {},
    "gigpo": {"advantage": "gigpo"},
    "starpo_s": {"batch_filter": "starpo_s", "clip_high": 0.28},
    "arpo": {"sampler": "tree"},
    "aepo": AEPO,
    "aepo_snr": {**AEPO, "batch_filter": "snr_top_p"},
    "combined": {**AEPO, "batch_filter": "snr_top_p", "mi_stop": True},
    "aepo_bonus": {**AEPO, "bonus": True},
    "aepo_bonus_snr": {**AEPO, "batch_filter": "snr_top_p", "bonus": True},
    "aepo_bonus_mi": {**AEPO, "mi_stop": True, "bonus": True},
    "combined_bonus": {**AEPO, "batch_filter": "snr_top_p", "mi_stop": True, "bonus": True},
}
"""Every arm's changes to `Chapter12Config.grpo` (module docstring's table), plus `mi_stop` and `bonus`."""
METHODS = ("grpo", "gigpo", "starpo_s", "arpo", "aepo", "combined")
"""The course's RL methods in the chapter's table (the rest are ablations and the stress test)."""


def arm_config(config: Chapter12Config, arm: str) -> GRPOConfig:
    """The loop's configuration of `arm`."""
    settings = dict(ARMS[arm])
    every = config.monitor_every if settings.pop("mi_stop", False) else config.grpo.eval_every
    bonus = config.bonus if settings.pop("bonus", False) else 0.0
    tree = dataclasses.replace(config.grpo.tree, rule=settings.pop("rule", "arpo"))
    return dataclasses.replace(config.grpo, tree=tree, entropy_coef=bonus, eval_every=every, **settings)


def evaluate(model, tokenizer, config: Chapter12Config, seed: int, held_out_mi: bool = False) -> dict[str, float]:
    """Chapter 08's held-out evaluation (success, tool calls, precise first searches, entropies; one episode per
    question) and the monitor's MI on training questions (`monitor_mi`, the only one the MI stop reads); with
    `held_out_mi`, also the held-out MI of the first action (`mi`, `retrieval_accuracy`: `mi_samples` first
    actions scored under every held-out question, the expensive part, so only for final policies)."""
    stats = two_hop_search.evaluate(model, tokenizer, config.task, seed, keep=True)
    trajectories = stats.pop("trajectories")
    if held_out_mi:
        mi = two_hop_search.first_action_mi(model, tokenizer, trajectories, config.mi_samples, seed)
        stats |= {"mi": mi["mi"], "retrieval_accuracy": mi["retrieval_accuracy"], "mi_chance": mi["chance"]}
    return {
        **stats,
        "monitor_mi": two_hop_search.monitor_mi(model, tokenizer, config.task, config.monitor_prompts, seed),
    }


def train(model, tokenizer, config: Chapter12Config, seed: int, arm: str, base_mi: float) -> tuple[list[dict], dict]:
    """RL with `arm` from `model` (changed in place; rolled back after an MI stop). Returns the history and the
    final policy's evaluation, with `stopped_at` (the iteration of the MI stop, NaN if none) and `iterations`
    (the updates it made)."""
    gate = MIStop(base_mi, config.gate_drop) if ARMS[arm].get("mi_stop") else None

    def measure(m):
        stats = evaluate(m, tokenizer, config, seed + 1)
        if gate is not None:
            gate.remember(m, stats["monitor_mi"])
        return stats

    history = train_grpo(
        model, tokenizer, lambda: make_env("train", config),
        dataclasses.replace(config.task.sampling, snapshot_envs=True), arm_config(config, arm), seed,
        evaluate=measure, stop=gate.check if gate is not None else None,
    )  # fmt: skip
    if gate is not None:
        gate.restore(model)  # a no-op unless the MI stop fired
    final = evaluate(model, tokenizer, config, seed + 1, held_out_mi=True)
    stopped = float("nan") if gate is None or gate.stopped_at is None else float(gate.stopped_at)
    steps = [row for row in history if "loss" in row]
    seconds = [row["time_rollout"] + row["time_advantage"] + row["time_update"] for row in steps]
    return history, {**final, "stopped_at": stopped, "iterations": float(len(steps)),
                     "seconds_per_iteration": float(np.mean(seconds)) if seconds else float("nan")}  # fmt: skip


LIVE_ARMS = ("aepo", "combined", "aepo_bonus", "combined_bonus")
"""The arms the notebook trains live (C12.1's three, and AEPO under the inducer): under half of the minutes all
eleven take; the rest are read from the recorded seeds."""


def run(seed: int, config: Chapter12Config | None = None, arms: Sequence[str] | None = None) -> dict:
    """Every arm of `ARMS` (or only `arms`, in `ARMS`' order) from chapter 08's base at the same budget, with the
    base's evaluation. Each arm reseeds before it trains, so its result does not depend on which others ran."""
    config = config or preset()
    if arms is not None and (unknown := set(arms) - set(ARMS)):
        raise ValueError(f"unknown arms {sorted(unknown)}; choose from {list(ARMS)}")
    chosen = list(ARMS) if arms is None else [arm for arm in ARMS if arm in arms]
    start = time.perf_counter()
    course_config.seed_everything(seed)
    base, tokenizer = data.load_base(BASE_NAME, course_config.device())
    results: dict = {
        "base": evaluate(base, tokenizer, config, seed + 1, held_out_mi=True),
        "histories": {},
        "final": {},
    }
    for arm in chosen:
        model = copy.deepcopy(base)
        course_config.seed_everything(seed)
        results["histories"][arm], results["final"][arm] = train(
            model, tokenizer, config, seed, arm, results["base"]["monitor_mi"]
        )
    results["minutes"] = (time.perf_counter() - start) / 60
    results["base_model"], results["tokenizer"] = base, tokenizer
    return results


# Claims -----------------------------------------------------------------------------------------
FINAL_KEYS = ("success", "mi", "retrieval_accuracy", "monitor_mi", "precise_first_search", "stopped_at",
              "iterations", "seconds_per_iteration")  # fmt: skip


def collapsed(n: Mapping[str, float], arm: str) -> bool:
    """Template collapse's sign, as chapter 10 reads it: held-out MI of the first action at most half the base's."""
    return n[f"{arm}_mi"] <= 0.5 * n["base_mi"]


def claim_numbers(results: Mapping) -> dict[str, float]:
    """Every number chapter 12's claims and table use, flat."""
    base = results["base"]
    numbers = {f"base_{key}": base[key] for key in ("success", "mi", "retrieval_accuracy", "monitor_mi")}
    for arm, final in results["final"].items():
        numbers |= {f"{arm}_{key}": final[key] for key in FINAL_KEYS if key in final}
    for arm in ("aepo", "combined", "aepo_bonus", "aepo_bonus_snr", "aepo_bonus_mi", "combined_bonus"):
        if arm in results["final"]:
            numbers[f"{arm}_collapsed"] = float(collapsed(numbers, arm))
    differences = {"combined_minus_aepo": ("combined", "aepo"),
                   "combined_bonus_minus_aepo_bonus": ("combined_bonus", "aepo_bonus")}  # fmt: skip
    for key, (arm, other) in differences.items():  # only between arms this run trained (see `run`'s `arms`)
        if arm in results["final"] and other in results["final"]:
            numbers[key] = numbers[f"{arm}_success"] - numbers[f"{other}_success"]
    if "combined_bonus" in results["final"] and "aepo" in results["final"]:
        numbers |= derived_numbers(numbers)
    return numbers


def derived_numbers(numbers: Mapping[str, float]) -> dict[str, float]:
    """C12.1's comparison, from the recorded final numbers: the combination under the inducer against AEPO's gains
    without it (kept apart so that recorded seeds can be re-derived without a re-run:
    `results.rederive("ch12", CLAIMS, lambda n: n | derived_numbers(n))`)."""
    return {"combined_bonus_minus_aepo": numbers["combined_bonus_success"] - numbers["aepo_success"]}


CLAIMS: tuple[ClaimSpec, ...] = (
    ClaimSpec(
        "C12.1",
        "the combination keeps AEPO's gains: under the collapse inducer (an entropy bonus) its held-out success is at "
        "most 2 points below AEPO's without the inducer, and without the inducer (where the MI stop never fires, so "
        "it is AEPO + SNR filter) at most 2 points below AEPO's (AEPO alone collapsing under the inducer, and the "
        "combination's MI staying above half the base's through its rollback, hold by construction: shown, not "
        "checked; restated after the recorded runs, whose earlier check counted those parts, and decided on the same "
        "recorded numbers)",
        "the survey: branch at high entropy, keep informative groups, watch MI; keeps AEPO's gains without template "
        "collapse",
        "combined_bonus_minus_aepo",
        lambda n: at_least(n["combined_bonus_minus_aepo"], -0.02) and at_least(n["combined_minus_aepo"], -0.02),
        required=False,
        induced=True,
        effects=(("combined_bonus_minus_aepo", -0.02), ("combined_minus_aepo", -0.02)),
    ),
)


CLAIM_ARMS: dict[str, tuple[str, ...]] = {"C12.1": ("aepo", "combined", "combined_bonus")}
"""The arms each claim compares (a run without one of them cannot decide it)."""


def unmeasured_claims(results: Mapping) -> set[str]:
    """Ids of the claims whose arms this run did not train (`run`'s `arms`)."""
    return {claim for claim, arms in CLAIM_ARMS.items() if not set(arms) <= set(results["final"])}


def claims(results: Mapping) -> list[Claim]:
    """C12.1 on `claim_numbers(results)`; no verdict this run when it did not train C12.1's arms."""
    return evaluate_all(CLAIMS, claim_numbers(results), unmeasured_claims(results))


CURVE_KEYS = ("eval_success", "eval_monitor_mi", "entropy")


def curves(results: Mapping) -> dict[str, list[tuple[float, float]]]:
    return recorded.history_curves(results["histories"], CURVE_KEYS)


def summary_lines(results: Mapping) -> list[str]:
    """What the command line prints for a seed, before its claims."""
    b = results["base"]
    lines = [f"{'base':15} success {b['success']:.3f}  MI {b['mi']:.3f} (monitor {b['monitor_mi']:.3f})  "
             f"retrieval {b['retrieval_accuracy']:.3f}"]  # fmt: skip
    for arm, f in results["final"].items():
        stop = "" if np.isnan(f["stopped_at"]) else f"  MI stop at {f['stopped_at']:.0f}"
        lines.append(f"{arm:15} success {f['success']:.3f}  MI {f['mi']:.3f} (monitor {f['monitor_mi']:.3f})  "
                     f"retrieval {f['retrieval_accuracy']:.3f}  {f['seconds_per_iteration']:.2f} s/it"
                     f"{stop}")  # fmt: skip
    return lines


def table_rows(per_seed: Sequence[Mapping[str, float]], arms: Sequence[str] = METHODS) -> list[dict[str, object]]:
    """The course's table from recorded seeds: per arm, mean held-out success (and its range over seeds), mean
    held-out MI and seconds per iteration."""
    rows = []
    for arm in arms:
        success = [n[f"{arm}_success"] for n in per_seed]
        rows.append({
            "arm": arm, "success": float(np.mean(success)), "low": min(success), "high": max(success),
            "mi": float(np.mean([n[f"{arm}_mi"] for n in per_seed])),
            "seconds": float(np.mean([n[f"{arm}_seconds_per_iteration"] for n in per_seed])),
        })  # fmt: skip
    return rows


def table_markdown(rows: Sequence[Mapping[str, object]], seeds: int) -> str:
    """`table_rows` as a Markdown table."""
    lines = [f"| method | held-out success (mean of {seeds} seeds) | range over seeds | held-out MI (nats) | "
             "seconds per iteration |", "|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        lines.append(f"| `{r['arm']}` | {r['success']:.3f} | {r['low']:.3f}-{r['high']:.3f} | {r['mi']:.2f} | "
                     f"{r['seconds']:.2f} |")  # fmt: skip
    return "\n".join(lines)


ARM_NAMES = {"grpo": "GRPO", "gigpo": "GiGPO", "starpo_s": "StarPO-S", "arpo": "ARPO", "aepo": "AEPO",
             "aepo_snr": "AEPO + SNR filter", "combined": "combined", "aepo_bonus": "bonus: AEPO",
             "aepo_bonus_snr": "bonus: AEPO + SNR filter", "aepo_bonus_mi": "bonus: AEPO + MI stop",
             "combined_bonus": "bonus: combined"}  # fmt: skip
"""Readable names of the arms in figures ("bonus:" marks the stress test's entropy bonus)."""


def plot_recorded(results: Mapping | None = None, config: Chapter12Config | None = None):
    """Three panels over every recorded seed (`results/ch12.json`; dots are seeds, bars their mean): each arm's
    held-out success (the base's as a line) and held-out MI relative to the base's, and the MI monitor over training
    for AEPO, AEPO under the bonus and the combination under the bonus, one thin line per seed, with the stop's
    line. With `results` (from `run`), this run's arms are crosses and its monitor dashed."""
    from course_lib.diagnostics.plots import grid, legend_outside

    config = config or preset()
    loaded = recorded.load("ch12")
    seeds = recorded.seed_numbers(loaded)
    fig, (a, b, c) = grid(3, width=6.0, height=3.6)
    arms = list(ARMS)
    x = np.arange(len(arms))
    for ax, key, relative in ((a, "success", False), (b, "mi", True)):
        values = [[n[f"{arm}_{key}"] / (n["base_mi"] if relative else 1) for n in seeds] for arm in arms]
        ax.bar(x, [np.mean(v) for v in values], 0.6, color="C0", alpha=0.5, label="mean of the recorded seeds")
        for position, v in zip(x, values, strict=True):
            ax.scatter(np.full(len(v), position), v, s=12, color="black", zorder=3,
                       label=f"each recorded seed ({len(seeds)})")  # fmt: skip
        if results is not None:
            live = [arm for arm in arms if arm in results["final"]]
            scale = results["base"]["mi"] if relative else 1
            ax.scatter([arms.index(arm) for arm in live], [results["final"][arm][key] / scale for arm in live],
                       marker="x", s=40, color="C3", zorder=4, label="this run")  # fmt: skip
        ax.set_xticks(x, [ARM_NAMES[arm] for arm in arms], rotation=40, ha="right", fontsize=8)
    base = np.mean([n["base_success"] for n in seeds])
    a.axhline(base, color="grey", lw=0.8, ls="--", label="base (mean of the recorded seeds)")
    a.set(ylabel="held-out success", title="final policies: held-out success", ylim=(0, 1))
    b.axhline(0.5, color="grey", lw=0.8, ls=":", label="collapse line (half the base's MI)")
    b.set(ylabel="held-out MI / base's MI", title="final policies: input dependence", ylim=(0, 1.3))
    for colour, arm in zip(("C0", "C1", "C2"), ("aepo", "aepo_bonus", "combined_bonus"), strict=True):
        for points in recorded.load_curves("ch12", f"{arm}/eval_monitor_mi").values():
            c.plot(*zip(*points, strict=True), color=colour, lw=0.9, alpha=0.7, marker="o", ms=2,
                   label=f"{ARM_NAMES[arm]} (each recorded seed)")  # fmt: skip
        if results is not None and arm in results["histories"]:
            rows = [row for row in results["histories"][arm] if "eval_monitor_mi" in row]
            c.plot([r["iteration"] for r in rows], [r["eval_monitor_mi"] for r in rows], color=colour, lw=1.6,
                   ls="--", label=f"{ARM_NAMES[arm]}: this run")  # fmt: skip
    line = (1 - config.gate_drop) * np.mean([n["base_monitor_mi"] for n in seeds])
    c.axhline(line, color="C3", ls="--", lw=0.8, label=f"MI stop line ({1 - config.gate_drop:.1f} x the base's)")
    c.set(xlabel="RL iteration", ylabel="monitor MI (nats, training questions)", title="the MI monitor in training")
    legend_outside(fig, columns=3)
    return fig


# Leakage audit ----------------------------------------------------------------------------------
def held_out_audit() -> list[leakage.SplitAudit]:
    """The test split against every arm's draws, the monitor's questions and chapter 08's demonstrations (its base)."""
    config = preset("cpu")
    split_env = functools.partial(make_env, config=config)
    draws = leakage.grpo_draws("ch12", config.grpo)  # every arm has the same iterations and questions per iteration
    draws += [two_hop_search.MONITOR_SEED + p for p in range(config.monitor_prompts)]
    demo_seeds = two_hop_search.demonstration_seeds(config.task.demonstrations, leakage.base_seed(BASE_NAME))
    demos = leakage.problem_keys(split_env, demo_seeds)
    held_out = test_seeds(config.task.eval_tasks)
    return leakage.held_out_split("ch12", split_env, held_out, draws, demos, leakage.two_hop_overlaps)


CHAPTER = skeleton.Chapter(
    "ch12", "Chapter 12, the capstone", run, claim_numbers, CLAIMS, curves=curves, report=summary_lines,
    audit=held_out_audit, arms=skeleton.arm_table(arm_config, ARMS),
)  # fmt: skip


if __name__ == "__main__":
    CHAPTER.main()

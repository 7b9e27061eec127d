"""Chapter 02: LATS, tree search grounded in real observations (arXiv 2310.04406).

Same Blocksworld problems and the same tiny LM as chapter 01 (its base is loaded, not rebuilt).
Methods compared at equal budgets of environment interactions (one interaction = one `env.step`):
a single greedy ReAct-style episode, retries with a memory of failures (the Reflexion analogue),
best-of-k independent episodes, RAP's imagined search (chapter 01; it interacts only to execute
its plan) and LATS (`search.lats`). Every method's final plan is re-executed in a fresh
environment for the held-out evaluation; nothing the evaluation reads is used inside the search.

    python -m course_lib.chapters.ch02_lats --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

from course_lib import config as course_config
from course_lib import envs
from course_lib.chapters import ch01_rap as ch01
from course_lib.claims import Claim
from course_lib.search.lats import LATSConfig, lats, react, retries

LENGTHS = ch01.LENGTHS


@dataclass
class Chapter02Config:
    """Everything chapter 02 varies, with the cpu preset's values as defaults."""

    tasks_per_length: int = 100
    """Held-out problems per plan length (2, 4, 6): 300 in all."""
    budgets: tuple[int, ...] = (6, 12, 24, 48)
    """Environment-interaction budgets per problem for retries, best-of-k and LATS."""
    lats: LATSConfig = field(default_factory=LATSConfig)
    """LATS: n = 3 children, lambda = 0.5, w = sqrt(2), memory penalty 0.2."""
    rap_iterations: int = 20
    """Budget of RAP's imagined search (chapter 01's RAP(20))."""
    memory_penalty: float = 0.2
    """Retries: factor on a remembered failed action's probability."""
    chapter01: ch01.Chapter01Config = field(default_factory=ch01.Chapter01Config)
    """RAP's settings, for the imagined-search baseline."""


def preset(scale: str | None = None) -> Chapter02Config:
    scale = scale or course_config.scale()
    if scale == "cpu":
        return Chapter02Config()
    return Chapter02Config(tasks_per_length=300, budgets=(6, 12, 24, 48, 96), chapter01=ch01.preset("gpu"))


def make_env():
    return envs.make("blocksworld", max_turns=10_000)


def evaluate_outcome(outcome, init: str, goal: str) -> bool:
    """Held-out evaluation: the plan re-executed in a fresh environment reaches the goal."""
    return ch01.execute(outcome.plan, init, goal)["success"]


def tally(outcomes: list[tuple], budget: int | None = None) -> dict[str, float]:
    """Success rate, the agent's own belief and interactions per problem (per solved problem is
    pooled over plan lengths by `interactions_per_solved`)."""
    solved = sum(ok for _, ok in outcomes)
    used = sum(o.interactions for o, _ in outcomes)
    return {
        "success": solved / len(outcomes),
        "believed": sum(o.believed_solved for o, _ in outcomes) / len(outcomes),
        "interactions": used / len(outcomes),
        "budget": budget,
    }


def grounded_method(name: str, lm, init: str, goal: str, length: int, budget: int, config: Chapter02Config,
                    generator) -> object:  # fmt: skip
    """Run `retries`, `best_of_k` or `lats` on one problem within `budget` interactions."""
    if name == "lats":
        return lats(lm, make_env, init, goal, length, budget, config.lats, generator)
    penalty = config.memory_penalty if name == "retries" else None
    return retries(lm, make_env, init, goal, length, budget, generator, penalty)


def run(seed: int, config: Chapter02Config | None = None) -> dict:
    """Every method on the same held-out problems; returns the numbers the claims use."""
    config = config or preset()
    start = time.perf_counter()
    generator = course_config.seed_everything(seed)
    lm = ch01.load_lm()
    problems = ch01.test_problems(config.tasks_per_length, seed)
    results: dict = {"react": {}, "rap": {}, "retries": {}, "best_of_k": {}, "lats": {}}
    for length, probs in problems.items():
        results["react"][length] = tally(
            [(o, evaluate_outcome(o, i, g)) for i, g in probs for o in [react(lm, make_env, i, g, length)]]
        )
        rap = []
        for init, goal in probs:
            found = ch01.rap_search(lm, init, goal, length, config.rap_iterations, config.chapter01, generator)
            ok = evaluate_outcome(found, init, goal)
            rap.append((_RapOutcome(found.plan, ch01.execute(found.plan, init, goal)["steps"], found.solved), ok))
        results["rap"][length] = tally(rap)
        for name in ("retries", "best_of_k", "lats"):
            results[name][length] = {
                b: tally([(o, evaluate_outcome(o, i, g)) for i, g in probs
                          for o in [grounded_method(name, lm, i, g, length, b, config, generator)]], b)
                for b in config.budgets
            }  # fmt: skip
    results["minutes"] = (time.perf_counter() - start) / 60
    results["lm"] = lm
    return results


@dataclass
class _RapOutcome:
    plan: list[str]
    interactions: int
    believed_solved: bool


def mean_over_lengths(per_length: dict, key: str = "success") -> float:
    return sum(r[key] for r in per_length.values()) / len(per_length)


def at_budget(results: dict, name: str, budget: int, key: str = "success") -> float:
    return sum(results[name][n][budget][key] for n in LENGTHS) / len(LENGTHS)


def claims(results: dict) -> list[Claim]:
    """Chapter 02's claims. C2.1 is marked not reproduced at this scale: chapter 01's world model is
    right on about 96% of held-out transitions, so grounding has little to correct and LATS at the
    largest budget ties with RAP(20) (evidence in the notebook, section 7)."""
    budgets = sorted(results["lats"][LENGTHS[0]])
    top = budgets[-1]
    lats_top = at_budget(results, "lats", top)
    wins = [b for b in budgets if at_budget(results, "lats", b) >= at_budget(results, "retries", b) + 0.05
            and at_budget(results, "lats", b) >= mean_over_lengths(results["react"]) + 0.05]  # fmt: skip
    return [
        Claim("C2.1", "LATS (real observations) solves at least 10 points more held-out problems than RAP's "
                      "search in imagination with the same imperfect model",
              lats_top - mean_over_lengths(results["rap"]) >= 0.10, required=False),
        Claim("C2.2", "at the largest interaction budget LATS beats a single ReAct-style episode and retries "
                      "with a memory of failures by at least 5 points", top in wins),
        Claim("C2.3", "LATS spends more environment interactions per solved problem than a single "
                      "ReAct-style episode and than RAP (which interacts only to execute its plan)",
              interactions_per_solved({n: results["lats"][n][top] for n in LENGTHS})
              > max(interactions_per_solved(results["react"]), interactions_per_solved(results["rap"]))),
    ]  # fmt: skip


def interactions_per_solved(per_length: dict) -> float:
    """Environment interactions per solved problem, pooled over plan lengths (C2.3).

    `per_length` maps a plan length to a `tally` (per-problem `interactions` and `success` rate);
    every length has the same number of problems, so the ratio of the sums is the pooled ratio."""
    used = sum(r["interactions"] for r in per_length.values())
    solved = sum(r["success"] for r in per_length.values())
    return used / solved if solved else float("inf")


def summary_lines(results: dict) -> list[str]:
    lines = ["method".ljust(26) + "".join(f"{n}-step".rjust(10) for n in LENGTHS) + "mean".rjust(8)
             + "interactions/solved".rjust(22)]  # fmt: skip
    for name, label in (("react", "ReAct (1 greedy episode)"), ("rap", "RAP(20) in imagination")):
        per = results[name]
        lines.append(label.ljust(26) + "".join(f"{per[n]['success']:10.2f}" for n in LENGTHS)
                     + f"{mean_over_lengths(per):8.2f}" + f"{interactions_per_solved(per):22.1f}")  # fmt: skip
    for name in ("retries", "best_of_k", "lats"):
        for b in sorted(results[name][LENGTHS[0]]):
            per = {n: results[name][n][b] for n in LENGTHS}
            lines.append(f"{name} (budget {b})".ljust(26) + "".join(f"{per[n]['success']:10.2f}" for n in LENGTHS)
                         + f"{mean_over_lengths(per):8.2f}" + f"{interactions_per_solved(per):22.1f}")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run chapter 02 for several seeds and print its claims.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args(argv)
    for seed in args.seeds:
        results = run(seed)
        print(f"seed {seed} ({results['minutes']:.2f} min)")
        print("\n".join(summary_lines(results)))
        for claim in claims(results):
            print(f"  {claim.id} {claim.status} {claim.name}")


if __name__ == "__main__":
    main()

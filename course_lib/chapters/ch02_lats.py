"""Chapter 02: LATS, tree search grounded in real observations (arXiv 2310.04406).

Same Blocksworld problems and the same tiny LM as chapter 01 (its base is loaded, not rebuilt).
Methods compared at equal budgets of environment interactions (one interaction = one `env.step`):
a single greedy ReAct-style episode, retries with a memory of failures (the Reflexion analogue),
best-of-k independent episodes, RAP's imagined search (chapter 01; it interacts only to execute
its plan) and LATS (`search.lats`). Retries and best-of-k run at every LATS budget of the grid, and
every method's interactions per solved problem are reported at every budget. Every method's final plan
is re-executed in a fresh environment for the held-out evaluation; nothing the evaluation reads is used
inside the search.

    python -m course_lib.chapters.ch02_lats --seeds 0 1 2 [--record]
    python -m course_lib.chapters.ch02_lats --imperfect-world-model --seeds 0 1 2 [--record]  # C1.3/C2.1 designed
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from course_lib import course_config, envs
from course_lib.chapters import command, skeleton
from course_lib.course import leakage, recorded
from course_lib.course.claims import Claim, ClaimSpec, Setting, at_least, effect_at_least, evaluate_all
from course_lib.models import build_model
from course_lib.rl.warm_start import SFTConfig, supervised_warm_start
from course_lib.search.blocks_lm import BlocksLM, SplitRolesLM, build_blocks_tokenizer, examples, world_corpus
from course_lib.search.lats import Budget, LATSConfig, Memory, Outcome, lats, react, retries, rollout
from course_lib.search.mcts import StopSearch
from course_lib.tasks import blocks_planning
from course_lib.tasks.blocks_planning import LENGTHS, BlocksConfig


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
    chapter01: BlocksConfig = field(default_factory=BlocksConfig)
    """RAP's settings, for the imagined-search baseline."""


def preset(scale: str | None = None) -> Chapter02Config:
    """The chapter's configuration for `COURSE_SCALE` (`cpu` or `gpu`)."""
    gpu = Chapter02Config(tasks_per_length=300, budgets=(6, 12, 24, 48, 96), chapter01=blocks_planning.preset("gpu"))
    return course_config.by_scale(Chapter02Config(), gpu, scale)


def make_env():
    return envs.make("blocksworld", max_turns=10_000)


def evaluate_outcome(outcome, init: str, goal: str) -> bool:
    """Held-out evaluation: the plan re-executed in a fresh environment reaches the goal."""
    return blocks_planning.execute(outcome.plan, init, goal)["success"]


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


def retries_at_budgets(lm: BlocksLM, init: str, goal: str, length: int, budgets: Sequence[int],
                       generator: torch.Generator, memory_penalty: float | None) -> dict[int, Outcome]:  # fmt: skip
    """`search.lats.retries` at every budget of `budgets`, from one sequence of episodes.

    Retries with budget b are a prefix of retries with a larger budget: episodes come one after another
    from the same generator, the memory changes only between episodes, and an episode's draws do not
    depend on the budget left, so up to b interactions both runs make the same draws and actions. The
    run with budget b ends at the first episode that sees the goal within b interactions, or with no
    plan after exactly b interactions (`Budget` stops the episode that would need one more). So one run
    at the largest budget gives every smaller budget's outcome, each equal to `retries` started from the
    same generator state (tested), at the cost of the largest budget alone. (LATS's search is not such a
    prefix: its result is the best path of the tree at the moment the budget ends; it runs per budget.)
    With `memory_penalty` None the episodes are independent (best-of-k)."""
    spent, memory = Budget(max(budgets)), Memory() if memory_penalty is not None else None
    episodes: list[tuple[int, list[str] | None]] = []  # (interactions used when it ended, plan if solved)
    while True:
        env = make_env()
        observation, _ = env.reset(options={"init": init, "goal": goal})
        try:
            steps, solved = rollout(lm, env, observation, goal, length, spent, 1.0, generator, memory,
                                    memory_penalty or 1.0)  # fmt: skip
        except StopSearch:
            break
        episodes.append((spent.used, [a for _, a in steps] if solved else None))
        if solved:
            break
        if memory is not None:
            memory.record(steps)
    outcomes = {}
    for budget in budgets:
        outcomes[budget] = Outcome([], budget, False)
        for used, plan in episodes:
            if used > budget:
                break
            if plan is not None:
                outcomes[budget] = Outcome(plan, used, True)
                break
    return outcomes


def run(seed: int, config: Chapter02Config | None = None) -> dict:
    """Every method on the same held-out problems; returns the numbers the claims use."""
    config = config or preset()
    start = time.perf_counter()
    generator = course_config.seed_everything(seed)
    lm = blocks_planning.load_lm()
    problems = blocks_planning.test_problems(config.tasks_per_length, seed)
    results: dict = {"react": {}, "rap": {}, "retries": {}, "best_of_k": {}, "lats": {}}
    for length, probs in problems.items():
        results["react"][length] = tally(
            [(o, evaluate_outcome(o, i, g)) for i, g in probs for o in [react(lm, make_env, i, g, length)]]
        )
        rap = []
        for init, goal in probs:
            found = blocks_planning.rap_search(
                lm, init, goal, length, config.rap_iterations, config.chapter01, generator
            )
            ok = evaluate_outcome(found, init, goal)
            rap.append(
                (_RapOutcome(found.plan, blocks_planning.execute(found.plan, init, goal)["steps"], found.solved), ok)
            )
        results["rap"][length] = tally(rap)
        for name in ("retries", "best_of_k"):
            penalty = config.memory_penalty if name == "retries" else None
            runs = [(i, g, retries_at_budgets(lm, i, g, length, config.budgets, generator, penalty)) for i, g in probs]
            results[name][length] = {
                b: tally([(by_budget[b], evaluate_outcome(by_budget[b], i, g)) for i, g, by_budget in runs], b)
                for b in config.budgets
            }
        results["lats"][length] = {
            b: tally([(o, evaluate_outcome(o, i, g)) for i, g in probs
                      for o in [grounded_method("lats", lm, i, g, length, b, config, generator)]], b)
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


METHODS = ("retries", "best_of_k", "lats")
"""The methods run at every interaction budget of the grid."""
LEAD = 0.05
"""C2.2's margin: LATS's lead over the better budget-matched baseline, in success rate."""


def claim_numbers(results: Mapping) -> dict[str, float]:
    """Every number chapter 02's claims use, flat: success (mean over plan lengths) and interactions per
    solved problem of ReAct and RAP, and of every grounded method at every budget (`lats_b48_success`,
    `best_of_k_b12_interactions_per_solved`, ...); LATS's lead over the better of retries and best-of-k
    at each budget, and the smallest budget with a lead of `LEAD` (0 when there is none)."""
    budgets = sorted(results["lats"][LENGTHS[0]])
    top = budgets[-1]
    numbers: dict[str, float] = {"top_budget": float(top)}
    for name in ("react", "rap"):
        numbers[f"{name}_success"] = mean_over_lengths(results[name])
        numbers[f"{name}_interactions_per_solved"] = interactions_per_solved(results[name])
    for name in METHODS:
        for b in budgets:
            numbers[f"{name}_b{b}_success"] = at_budget(results, name, b)
            numbers[f"{name}_b{b}_interactions"] = at_budget(results, name, b, "interactions")
            numbers[f"{name}_b{b}_interactions_per_solved"] = interactions_per_solved(
                {n: results[name][n][b] for n in LENGTHS}
            )
    for b in budgets:
        best = max(numbers[f"retries_b{b}_success"], numbers[f"best_of_k_b{b}_success"])
        numbers[f"lats_b{b}_lead"] = numbers[f"lats_b{b}_success"] - best
    numbers["lats_top_lead"] = numbers[f"lats_b{top}_lead"]
    numbers["lats_first_lead_budget"] = float(
        min((b for b in budgets if numbers[f"lats_b{b}_lead"] >= LEAD), default=0)
    )
    numbers["lats_top_minus_rap"] = numbers[f"lats_b{top}_success"] - numbers["rap_success"]
    numbers["lats_top_cost_over_react"] = (
        numbers[f"lats_b{top}_interactions_per_solved"] / numbers["react_interactions_per_solved"]
    )
    return numbers


CLAIMS: tuple[ClaimSpec, ...] = (
    effect_at_least(
        "C2.1",
        "LATS (real observations) solves at least 10 points more held-out problems than RAP's search in "
        "imagination with the same imperfect model",
        "LATS paper (GPT-3.5, HotPotQA): LATS 0.71 exact match against about 0.60 for RAP",
        "lats_top_minus_rap",
        0.10,
        required=False,
    ),
    effect_at_least(
        "C2.2",
        "at equal interaction budget B, LATS solves at least 5 points more held-out problems than the better of "
        "retries with a memory of failures and best-of-k, checked at the largest B, on average over the seeds (95% "
        "t-interval above 0; the smallest B with such a lead is reported, not checked)",
        "LATS paper (GPT-3.5, HotPotQA): LATS 0.71 exact match, Reflexion 0.51, ReAct 0.32",
        "lats_top_lead",
        LEAD,
        required=False,
    ),
    ClaimSpec(
        "C2.3",
        "LATS pays for its search: at the largest budget it spends at least twice the environment interactions "
        "per solved problem of a single ReAct-style episode",
        "LATS paper: search needs a revertible environment and many more environment steps than ReAct",
        "lats_top_cost_over_react",
        # The factor 2 was set after seeing 29 to 34 interactions per solved problem for LATS against 11 to 14
        # for ReAct (seeds 0-2, the earlier base), and confirmed on the fresh seeds 3 and 4 (recorded). A cost of the
        # method, not a finding; and at a ratio of about 2.4 with a spread of 0.2, a seed falls under 2 by chance
        # about one time in ten, so it is described, not a required mechanism.
        lambda n: at_least(n["lats_top_cost_over_react"], 2.0),
        required=False,
        kind="description",
    ),
)


def claims(results: Mapping) -> list[Claim]:
    """Chapter 02's claims, evaluated on `claim_numbers(results)`."""
    return evaluate_all(CLAIMS, claim_numbers(results))


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


# A designed attempt at C1.3 and C2.1 (docs/experiments/ch01-02-imperfect-world-model.md) ------------
@dataclass
class ImperfectWorldModelConfig:
    """The pre-registered design: a separate world-model LM, optimistic or clean, under the chapter's policy."""

    arms: tuple[tuple[str, float], ...] = (("optimistic", 0.5), ("control", 0.0))
    """(name, share of `unstack` pairs with the forgotten-hand error) per world model."""
    transitions: int = 12_000
    """World-format texts each world-model LM is trained on (the base's world corpus has as many)."""
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(steps=1000, batch_size=64, learning_rate=3e-3))
    """Training of each world-model LM (the `tiny` preset, seed 0)."""
    chapter01_per_length: int = 70
    """Problems per length of chapter 01's protocol (MCTS at 1, 10, 20 iterations)."""
    chapter02_per_length: int = 100
    """Problems per length of chapter 02's protocol (RAP(20) against LATS)."""
    lats_budget: int = 48
    """LATS's interaction budget (chapter 02's largest)."""
    chapter01: BlocksConfig = field(default_factory=BlocksConfig)
    """RAP's settings (reward, UCT weight chosen on validation)."""
    mcts_iterations: tuple[int, ...] = (1, 10, 20)
    """Chapter 01's MCTS budgets (`Chapter01Config.iterations`)."""
    lats: LATSConfig = field(default_factory=LATSConfig)
    """LATS's settings (chapter 02's)."""


IMPERFECT_WORLD_MODEL = "docs/experiments/ch01-02-imperfect-world-model.md"
"""The pre-registration of the designed setting shared by chapters 01 and 02 (`imperfect_world_model` runs it and
records `results/ch02_imperfect_world_model.json`)."""


DESIGNED_GAP = effect_at_least(
    "C1.3d",
    "with a world model whose errors are optimistic (its own LM, the chapter's policy and self-evaluation): at "
    "MCTS(20) the imagination-reality gap is at least 5 points wider for 6-step than for 2-step problems",
    "RAP: a learned world model's errors cap planning in imagination, more so for longer plans",
    "optimistic_gap_widening",
    0.05,
    required=False,
    induced=True,
)
IMPERFECT_RESULTS = "ch02_imperfect_world_model"
"""`results/ch02_imperfect_world_model.json`: the designed experiment's numbers, per seed."""
DESIGNED_LATS = effect_at_least(
    "C2.1d",
    "with the optimistic world model of C1.3d: LATS at the largest budget solves at least 10 points more held-out "
    "problems than RAP(20)",
    "LATS paper (GPT-3.5, HotPotQA): LATS 0.71 exact match against about 0.60 for RAP",
    "optimistic_lats_minus_rap",
    0.10,
    required=False,
    induced=True,
)
DESIGNED_CLAIMS: tuple[ClaimSpec, ...] = (DESIGNED_GAP, DESIGNED_LATS)
"""The designed setting's claims, C1.3d (chapter 01's) and C2.1d, recorded together per seed."""
SETTINGS = (Setting(IMPERFECT_RESULTS, DESIGNED_CLAIMS, IMPERFECT_WORLD_MODEL),)
"""The designed setting, decided on its own file (`course_lib.lab.verdicts`, which shows each claim in the chapter
its id names: C1.3d in chapter 01)."""


def train_world_model(optimistic_share: float, config: ImperfectWorldModelConfig, seed: int = 0) -> BlocksLM:
    """A `tiny` LM trained on world-format texts alone (`blocks_lm.world_corpus`), for `SplitRolesLM.world`."""
    generator = course_config.seed_everything(seed)
    tokenizer = build_blocks_tokenizer()
    model = build_model(tokenizer, "tiny", max_positions=64).to(course_config.device())
    rows = examples(tokenizer, world_corpus(config.transitions, seed, optimistic_share=optimistic_share))
    supervised_warm_start(model, rows, tokenizer.pad_token_id, config.sft, generator)
    return BlocksLM(model.eval(), tokenizer)


def imperfect_world_model_seed(base: BlocksLM, worlds: dict[str, BlocksLM], seed: int,
                               config: ImperfectWorldModelConfig) -> dict[str, float]:  # fmt: skip
    """One seed of the designed experiment: LATS once (it never calls a world model), then per arm the
    world model's accuracy, chapter 01's MCTS protocol and chapter 02's RAP(20). Fresh caches per seed."""
    chapter01, lats_config = config.chapter01, config.lats
    numbers: dict[str, float] = {}
    generator = course_config.seed_everything(seed)
    policy = BlocksLM(base.model, base.tokenizer)
    problems = blocks_planning.test_problems(config.chapter02_per_length, seed)
    lats_success = {
        n: sum(
            evaluate_outcome(lats(policy, make_env, i, g, n, config.lats_budget, lats_config, generator), i, g)
            for i, g in probs
        ) / len(probs)
        for n, probs in problems.items()
    }  # fmt: skip
    numbers[f"lats_b{config.lats_budget}_success"] = sum(lats_success.values()) / len(LENGTHS)
    for arm, world in worlds.items():
        generator = course_config.seed_everything(seed)
        lm = SplitRolesLM(BlocksLM(base.model, base.tokenizer), BlocksLM(world.model, world.tokenizer))
        numbers[f"{arm}_world_model_accuracy"] = blocks_planning.world_model_accuracy(
            lm, chapter01.world_model_test, seed
        )
        small = blocks_planning.test_problems(config.chapter01_per_length, seed)
        mcts = {
            n: {
                length: blocks_planning.evaluate_search(lm, probs, length, n, chapter01, generator)
                for length, probs in small.items()
            }
            for n in config.mcts_iterations
        }
        for n, per_length in mcts.items():
            numbers[f"{arm}_mcts{n}_real_success"] = blocks_planning.overall(per_length)
            numbers[f"{arm}_mcts{n}_imagined_success"] = sum(r["imagined"] for r in per_length.values()) / len(LENGTHS)
        top = max(config.mcts_iterations)
        gap = blocks_planning.gaps({"mcts": mcts}, top)
        numbers |= {f"{arm}_gap_{length}_step": value for length, value in gap.items()}
        numbers[f"{arm}_gap_widening"] = gap[6] - gap[2]
        rap = {length: blocks_planning.evaluate_search(lm, probs, length, 20, chapter01, generator)
               for length, probs in problems.items()}  # fmt: skip
        numbers[f"{arm}_rap20_success"] = blocks_planning.overall(rap)
        numbers[f"{arm}_rap20_believed"] = sum(r["imagined"] for r in rap.values()) / len(LENGTHS)
        numbers[f"{arm}_lats_minus_rap"] = (
            numbers[f"lats_b{config.lats_budget}_success"] - numbers[f"{arm}_rap20_success"]
        )
    return numbers


def imperfect_world_model(seeds: Sequence[int], config: ImperfectWorldModelConfig | None = None,
                          record: bool = False) -> dict[int, dict[str, float]]:  # fmt: skip
    """Run the pre-registered design once: train each arm's world model, then every seed; print and
    (with `record`) write each seed's numbers to `results/ch02_imperfect_world_model.json`."""
    config = config or ImperfectWorldModelConfig()
    if record:
        recorded.begin()  # stamp the code and machine before anything runs
    start = time.perf_counter()
    base = blocks_planning.load_lm()
    worlds = {arm: train_world_model(share, config) for arm, share in config.arms}
    trained = (time.perf_counter() - start) / 60
    print(f"world models trained in {trained:.1f} min")
    out = {}
    for seed in seeds:
        begin = time.perf_counter()
        numbers = imperfect_world_model_seed(base, worlds, seed, config) | {"world_model_training_minutes": trained}
        minutes = (time.perf_counter() - begin) / 60
        print(f"seed {seed} ({minutes:.1f} min): " + ", ".join(f"{k} {v:.3f}" for k, v in numbers.items()))
        for claim in evaluate_all(DESIGNED_CLAIMS, numbers):
            print(f"  {claim.id} {claim.status} {claim.name}")
        if record:
            recorded.record(IMPERFECT_RESULTS, seed, DESIGNED_CLAIMS, numbers, minutes)
        out[seed] = numbers
    return out


def report(results: Mapping) -> list[str]:
    """What the command line prints for a seed, before its claims: the table and where LATS starts to lead."""
    lead = int(claim_numbers(results)["lats_first_lead_budget"])
    return [
        *summary_lines(results),
        f"smallest budget at which LATS leads both baselines by {LEAD:.2f}: {lead or 'none'}",
    ]


# Leakage audit ----------------------------------------------------------------------------------
def held_out_audit() -> list[leakage.SplitAudit]:
    """The chapter samples its evaluation from chapter 01's test pool (counted again: both chapters evaluate on it)."""
    return [
        leakage.blocks_split("ch02", "test (ch01's pool)", blocks_planning.test_pool(), leakage.blocks_corpus_pairs())
    ]


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--imperfect-world-model", action="store_true",
        help="run the designed C1.3/C2.1 experiment instead (--record writes results/ch02_imperfect_world_model.json)",
    )  # fmt: skip


CHAPTER = skeleton.Chapter(
    "ch02", "Chapter 02, LATS", run, claim_numbers, CLAIMS, report=report, audit=held_out_audit, options=_options,
    configure=command.designed_experiment("imperfect_world_model", imperfect_world_model)
)  # fmt: skip


if __name__ == "__main__":
    CHAPTER.main()

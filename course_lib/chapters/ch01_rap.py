"""Chapter 01: RAP, Monte Carlo tree search over a learned world model (arXiv 2305.14992).

One tiny LM (`search.blocks_lm`) is the policy prior, the world model and the self-evaluator on
Blocksworld (`envs.blocksworld`). We compare, on held-out problems whose optimal plans have 2, 4
and 6 steps: greedy whole-plan decoding (the chain-of-thought analogue), pass@k sampling, and
RAP's MCTS (`search.mcts`, reward from `search.rap`) at 10 and 20 iterations. Every plan is executed
in the real environment, so success *in imagination* (the search believes it reached the goal) and
success *in reality* are reported side by side.

    python -m course_lib.data build ch01                 # tasks and the base LM (about 8 minutes)
    python -m course_lib.chapters.ch01_rap --seeds 0 1 2
    python -m course_lib.chapters.ch01_rap --tune-w 0.25 0.5 1 2 4   # the UCT weight, on validation
"""

from __future__ import annotations

import argparse
import functools
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from course_lib import course_config, data, envs
from course_lib.chapters import skeleton
from course_lib.course import leakage
from course_lib.course.claims import Claim, ClaimSpec, Setting, at_least, evaluate_all
from course_lib.envs.blocksworld import draw_problem, render_goal, render_state
from course_lib.rl.warm_start import SFTConfig, warm_start_and_save
from course_lib.search.blocks_lm import BlocksLM, CorpusConfig, build_blocks_tokenizer, corpus, examples
from course_lib.search.blocks_lm import held_out_transitions as world_model_test_set
from course_lib.search.mcts import MCTS, MCTSConfig
from course_lib.search.rap import ImaginedBlocksworld, RewardConfig
from course_lib.tasks import bases

TASKS_NAME = "ch01_tasks"
VALIDATION_PER_LENGTH = 60
"""Validation problems per length: held out from the LM like the test split, disjoint from it."""
TEST_PER_LENGTH = 300
"""Distinct test problems per length in the task set: every evaluation samples from them."""
BASE_NAME = "ch01_base"
LENGTHS = (2, 4, 6)
ABLATIONS = {
    "no heuristic": ("likelihood", "confidence", "self_eval"),
    "heuristic only": ("heuristic",),
    "no self-evaluation": ("likelihood", "confidence", "heuristic"),
}


@dataclass
class Chapter01Config:
    """Everything chapter 01 varies, with the cpu preset's values as defaults."""

    model_preset: str = "tiny"
    """Model size, a key of `models.MODEL_PRESETS`."""
    corpus: CorpusConfig = field(default_factory=lambda: CorpusConfig(held_out=held_out_problems))
    """What the LM is trained on (plans, labelled steps, world-model transitions). No plan or step
    demonstration contains a validation or test problem or any (state, goal) pair on one of their
    optimal paths (`held_out_problems`); world-model transitions carry no goal and stay in."""
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(steps=3000, batch_size=64, learning_rate=3e-3))
    """Training of the base LM (built once by `python -m course_lib.data build ch01`, about 8 minutes).
    At 1000 steps the policy prior and self-evaluation had not learnt to read the goal: one step
    from it, they preferred `put-down` (the usual answer for a random goal) 95% of the time."""
    tasks_per_length: int = 70
    """Distinct held-out problems per plan length (2, 4, 6) in each evaluation: 210 in all, sampled
    from the task set's 300 distinct test problems per length."""
    pass_k: int = 10
    """Samples of pass@k (CoT pass@10 in the paper)."""
    iterations: tuple[int, ...] = (1, 10, 20)
    """MCTS budgets compared (RAP(10), RAP(20); 1 is a single greedy rollout in imagination)."""
    mcts: MCTSConfig = field(default_factory=lambda: MCTSConfig(w_exp=0.5))
    """Max-of-mean backup, as RAP; the depth limit is set to the plan length. UCT weight w = 0.5,
    where RAP uses 1: chosen from 0.25, 0.5, 1, 2, 4 by `tune_uct_weight` (`--tune-w`) on the
    180 validation problems, where MCTS(20) real success was 0.606, 0.628, 0.567, 0.567, 0.561
    with the leak-free base (0.811, 0.833, 0.750, 0.722, 0.722 with the earlier base, whose step
    corpus held sub-problems of validation problems)."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """RAP's reward: the four terms and alpha = 0.5."""
    ablation_iterations: int = 10
    """MCTS budget of the reward-component ablation (one of `iterations`: the full reward is reused)."""
    world_model_test: int = 1000
    """Held-out transitions on which the world model's one-step accuracy is measured."""


def preset(scale: str | None = None) -> Chapter01Config:
    """The chapter's configuration for `COURSE_SCALE` (`cpu` or `gpu`)."""
    gpu = Chapter01Config(
        model_preset="small",
        corpus=CorpusConfig(plans=40_000, steps=40_000, transitions=40_000, held_out=held_out_problems),
        sft=SFTConfig(steps=3000, batch_size=128, learning_rate=2e-3),
        tasks_per_length=300,
        iterations=(1, 10, 20, 50),
    )
    return course_config.by_scale(Chapter01Config(), gpu, scale)


# Data -----------------------------------------------------------------------------------------
def task_rows(split: str, per_length: int) -> dict[str, list]:
    """The first `per_length` draws of `split` per plan length (repeats included: only the
    uninspected `train` split is built this way)."""
    rows = {"seed": [], "length": [], "init": [], "goal": []}
    for length in LENGTHS:
        for seed in range(per_length):
            init, goal = draw_problem(seed, split, length)
            rows["seed"].append(seed)
            rows["length"].append(length)
            rows["init"].append(render_state(init))
            rows["goal"].append(render_goal(goal))
    return rows


def distinct_test_rows(per_length: int, exclude: dict[str, list], max_draws: int = 5000) -> dict[str, list]:
    """The first `per_length` *distinct* test-split problems per plan length that are not in
    `exclude` (the validation rows). Test draws repeat problems (300 draws give 112 different
    2-step ones), so taking draws as they come would weigh some problems two or three times.
    Raises ValueError when the first `max_draws` draws do not give `per_length` of them."""
    rows = {"seed": [], "length": [], "init": [], "goal": []}
    for length in LENGTHS:
        seen = {(i, g) for i, g, n in zip(exclude["init"], exclude["goal"], exclude["length"], strict=True)
                if n == length}  # fmt: skip
        found = _take_distinct(rows, length, range(max_draws), seen, per_length)
        if found < per_length:
            raise ValueError(f"only {found} distinct {length}-step test problems in {max_draws} draws; ask for fewer")
    return rows


def validation_rows(
    per_length: int = VALIDATION_PER_LENGTH, test_draws: int = 300, max_draws: int = 5000
) -> dict[str, list]:
    """Distinct held-out-split problems that are not among the first `test_draws` draws of each
    length: where the chapter's settings (the UCT weight) are chosen, so that no choice sees test.
    (The test rows, `distinct_test_rows`, then skip every validation problem; drawing validation first,
    from seed `test_draws` on, keeps the problems the UCT weight was tuned on.)
    Raises ValueError when `max_draws` further draws do not give `per_length` new problems."""
    rows = {"seed": [], "length": [], "init": [], "goal": []}
    for length in LENGTHS:
        seen = {_problem_texts(seed, length) for seed in range(test_draws)}
        found = _take_distinct(rows, length, range(test_draws, test_draws + max_draws), seen, per_length)
        if found < per_length:
            raise ValueError(f"only {found} new {length}-step problems in {max_draws} draws; ask for fewer")
    return rows


def _take_distinct(rows: dict[str, list], length: int, seeds: range, seen: set, per_length: int) -> int:
    """Append to `rows` the problems of `seeds` (in order) not in `seen`, until `per_length` were taken;
    `seen` grows with each. Returns how many were taken."""
    found = 0
    for seed in seeds:
        if found == per_length:
            break
        init, goal = _problem_texts(seed, length)
        if (init, goal) not in seen:
            seen.add((init, goal))
            found += 1
            for key, value in zip(rows, (seed, length, init, goal), strict=True):
                rows[key].append(value)
    return found


@functools.cache
def _problem_texts(seed: int, length: int) -> tuple[str, str]:
    init, goal = draw_problem(seed, "test", length)
    return render_state(init), render_goal(goal)


@functools.lru_cache(maxsize=1)
def held_out_problems() -> tuple[tuple[str, str], ...]:
    """`(init text, goal text)` of every validation and test problem of the task set (the rows
    `build_tasks` writes, recomputed once per process): the base LM's plan and step corpora leave out these
    problems and every (state, goal) pair on their optimal paths (`blocks_lm.held_out_pairs`)."""
    validation = validation_rows()
    test = distinct_test_rows(TEST_PER_LENGTH, validation)
    return tuple(
        (init, goal) for rows in (validation, test) for init, goal in zip(rows["init"], rows["goal"], strict=True)
    )


def build_base(
    out_dir: str | Path,
    seed: int = 0,
    progress: bool = True,
    config: Chapter01Config | None = None,
    scale: str = "cpu",
):
    """Train the LM of `preset(scale)` on the three formats (plans, labelled steps, transitions) and save it."""
    config = config or preset(scale)
    tokenizer = build_blocks_tokenizer()

    def rows():
        texts = corpus(config.corpus, seed)
        return [row for kind in ("plan", "step", "world") for row in examples(tokenizer, texts[kind])]

    return warm_start_and_save(out_dir, tokenizer, config.model_preset, 64, rows, config.sft, seed, progress)


def build_data(data_dir: Path, seed: int = 0, progress: bool = True, scale: str = "cpu") -> None:
    """`python -m course_lib.data build ch01 [--scale gpu]`: the task sets and the base LM of `preset(scale)`
    (shared with chapter 02)."""
    build_tasks(data_dir, seed, scale)
    bases.write_base(BASE_NAME, build_base, data_dir, seed, progress, scale)


def build_tasks(data_dir: Path, seed: int = 0, scale: str = "cpu") -> None:
    """The task set alone (the base LM never reads it): 200 train draws, 300 distinct test problems
    and 60 validation problems per plan length."""
    validation = validation_rows()
    splits = {
        "train": task_rows("train", 200),
        "test": distinct_test_rows(TEST_PER_LENGTH, validation),
        "validation": validation,
    }
    data.write_task_set(TASKS_NAME, splits, seed, data_dir, scale)


def load_lm(device=None) -> BlocksLM:
    model, tokenizer = data.load_base(BASE_NAME, device or course_config.device())
    return BlocksLM(model, tokenizer)


def _problems_by_length(split: str) -> dict[int, list[tuple[str, str]]]:
    """`{length: [(init text, goal text)]}`: every problem of a split of the task set."""
    tasks = data.load_tasks(TASKS_NAME)
    if split not in tasks:
        raise FileNotFoundError(f"{TASKS_NAME} has no {split} split; run `python -m course_lib.data build ch01`")
    rows = tasks[split]
    return {n: [(r["init"], r["goal"]) for r in rows if r["length"] == n] for n in LENGTHS}


def test_problems(per_length: int, seed: int) -> dict[int, list[tuple[str, str]]]:
    """`{length: [(init text, goal text)]}`: `per_length` different held-out problems per length,
    a sample of the test rows that depends on `seed` (so seeds differ in problems as well as in
    sampling). Raises ValueError when the task set has fewer."""
    problems = _problems_by_length("test")
    for length, rows in problems.items():
        if len(set(rows)) < per_length:
            raise ValueError(
                f"{TASKS_NAME} has {len(set(rows))} distinct {length}-step test problems, not {per_length}"
            )
    return {
        length: random.Random(seed * 1000 + length).sample(list(dict.fromkeys(rows)), per_length)
        for length, rows in problems.items()
    }


def test_pool() -> dict[int, list[tuple[str, str]]]:
    """`{length: [(init text, goal text)]}`: every problem of the test split, the pool evaluations sample from."""
    return _problems_by_length("test")


def validation_problems() -> dict[int, list[tuple[str, str]]]:
    """`{length: [(init text, goal text)]}`: every problem of the validation split."""
    return _problems_by_length("validation")


# Execution in the real environment -------------------------------------------------------------
def execute(plan: list[str], init: str, goal: str) -> dict:
    """Run `plan` in a fresh real environment: `{"success", "steps", "invalid"}` (stops at the goal
    or at the first invalid action)."""
    env = envs.make("blocksworld", max_turns=max(len(plan), 1))
    env.reset(options={"init": init, "goal": goal})
    steps = 0
    for action in plan:
        _, reward, terminated, truncated, info = env.step(action)
        steps += 1
        if not info["valid"]:
            return {"success": False, "steps": steps, "invalid": True}
        if terminated:
            return {"success": reward > 0, "steps": steps, "invalid": False}
        if truncated:
            break
    return {"success": False, "steps": steps, "invalid": False}


# Methods --------------------------------------------------------------------------------------
def greedy_plans(lm: BlocksLM, problems: list[tuple[str, str]]) -> list[list[str]]:
    """The chain-of-thought analogue: the whole plan decoded greedily, no intermediate states."""
    return lm.plans([(goal, init) for init, goal in problems])


def pass_at_k(lm: BlocksLM, problems: list[tuple[str, str]], k: int, generator: torch.Generator) -> list[bool]:
    """Whether any of k plans sampled at temperature 1 succeeds *when executed* (an oracle picks)."""
    plans = lm.plans([(goal, init) for init, goal in problems for _ in range(k)], 1.0, generator)
    return [
        any(execute(plans[i * k + j], init, goal)["success"] for j in range(k))
        for i, (init, goal) in enumerate(problems)
    ]


def rap_search(
    lm: BlocksLM, init: str, goal: str, length: int, iterations: int, config: Chapter01Config,
    generator: torch.Generator, components: tuple[str, ...] | None = None,
):  # fmt: skip
    """RAP's MCTS from `init` in imagination; returns the `SearchResult`."""
    reward = config.reward if components is None else replace(config.reward, components=components)
    expand = ImaginedBlocksworld(lm, goal, reward, generator)
    return MCTS(expand, replace(config.mcts, iterations=iterations, depth_limit=length)).search(init)


def evaluate_search(lm, problems, length, iterations, config, generator, components=None) -> dict[str, float]:
    """Success in imagination and in reality of RAP's output plans on `problems`."""
    imagined = real = 0
    for init, goal in problems:
        result = rap_search(lm, init, goal, length, iterations, config, generator, components)
        imagined += result.solved
        real += execute(result.plan, init, goal)["success"]
    return {"imagined": imagined / len(problems), "real": real / len(problems)}


def world_model_accuracy(lm: BlocksLM, count: int, seed: int) -> float:
    """Exact-match accuracy of the greedy next state on held-out (state, action) pairs."""
    triples = world_model_test_set()
    random.Random(seed).shuffle(triples)
    triples = triples[:count]
    predictions = lm.predict([(s, a) for s, a, _ in triples])
    return sum(p == n for p, (_, _, n) in zip(predictions, triples, strict=True)) / len(triples)


def run(seed: int, config: Chapter01Config | None = None, ablation: bool = True) -> dict:
    """The whole chapter for one seed; returns every number the claims use."""
    config = config or preset()
    start = time.perf_counter()
    generator = course_config.seed_everything(seed)
    lm = load_lm()
    problems = test_problems(config.tasks_per_length, seed)
    results: dict = {"world_model_accuracy": world_model_accuracy(lm, config.world_model_test, seed)}
    results["greedy"] = {
        length: sum(execute(p, *pr)["success"] for p, pr in zip(greedy_plans(lm, probs), probs, strict=True))
        / len(probs)
        for length, probs in problems.items()
    }
    results["pass_k"] = {
        length: sum(pass_at_k(lm, probs, config.pass_k, generator)) / len(probs) for length, probs in problems.items()
    }
    results["mcts"] = {
        n: {length: evaluate_search(lm, probs, length, n, config, generator) for length, probs in problems.items()}
        for n in config.iterations
    }
    if ablation:
        results["ablation"] = {"all four terms": results["mcts"][config.ablation_iterations]}
        results["ablation"] |= {
            name: {
                length: evaluate_search(lm, probs, length, config.ablation_iterations, config, generator, parts)
                for length, probs in problems.items()
            }
            for name, parts in ABLATIONS.items()
        }
    results["minutes"] = (time.perf_counter() - start) / 60
    results["lm"] = lm
    return results


def tune_uct_weight(
    weights: tuple[float, ...], iterations: int = 20, config: Chapter01Config | None = None, seed: int = 0
) -> dict[float, float]:
    """Mean real success of MCTS(`iterations`) over the validation split's lengths, per UCT weight."""
    config = config or preset()
    lm, problems = load_lm(), validation_problems()
    scores = {}
    for weight in weights:
        generator = course_config.seed_everything(seed)
        trial = replace(config, mcts=replace(config.mcts, w_exp=weight))
        per_length = {n: evaluate_search(lm, probs, n, iterations, trial, generator) for n, probs in problems.items()}
        scores[weight] = overall(per_length)
    return scores


def overall(per_length: dict) -> float:
    """Mean over plan lengths (each length has the same number of problems)."""
    values = [v["real"] if isinstance(v, dict) else v for v in per_length.values()]
    return sum(values) / len(values)


def gaps(results: dict, iterations: int) -> dict[int, float]:
    """Success in imagination minus success in reality, per plan length."""
    return {length: r["imagined"] - r["real"] for length, r in results["mcts"][iterations].items()}


def claim_numbers(results: Mapping) -> dict[str, float]:
    """Every number chapter 01's claims use, flat: real success (mean over plan lengths) of greedy
    decoding, pass@k and MCTS at each budget (`mcts10_real_success`), MCTS's success in imagination,
    the gains C1.1 and C1.2 check, and the imagination-reality gap per plan length at the largest budget."""
    budgets = sorted(results["mcts"])
    top, low = budgets[-1], budgets[0]
    numbers = {"greedy_success": overall(results["greedy"])}
    # context for the tables, when measured (the claims do not read them)
    if "world_model_accuracy" in results:
        numbers["world_model_accuracy"] = results["world_model_accuracy"]
    if "pass_k" in results:
        numbers["pass_k_success"] = overall(results["pass_k"])
    for budget in budgets:
        per_length = results["mcts"][budget]
        numbers[f"mcts{budget}_real_success"] = overall(per_length)
        numbers[f"mcts{budget}_imagined_success"] = sum(r["imagined"] for r in per_length.values()) / len(per_length)
    numbers["mcts_gain_over_greedy"] = numbers[f"mcts{top}_real_success"] - numbers["greedy_success"]
    numbers["mcts_gain_over_single_rollout"] = numbers[f"mcts{top}_real_success"] - numbers[f"mcts{low}_real_success"]
    gap = gaps(results, top)
    numbers |= {f"gap_{length}_step": value for length, value in gap.items()}
    numbers["gap_widening"] = gap[6] - gap[2]
    return numbers


def _mcts_budgets(numbers: Mapping[str, float]) -> list[int]:
    """The MCTS budgets present in `claim_numbers`' keys, ascending."""
    return sorted(int(k[4:].split("_")[0]) for k in numbers if k.startswith("mcts") and k.endswith("_real_success"))


def _budget_monotone(numbers: Mapping[str, float]) -> bool:
    """No larger MCTS budget does worse than the next smaller one by over 2 points (C1.2)."""
    real = [numbers[f"mcts{b}_real_success"] for b in _mcts_budgets(numbers)]
    return all(b >= a - 0.02 for a, b in zip(real, real[1:], strict=False))


CLAIMS: tuple[ClaimSpec, ...] = (
    ClaimSpec(
        "C1.1",
        "MCTS over the model's own world model solves at least 15 points more held-out problems than greedy "
        "whole-plan decoding (mean over 2, 4, 6 steps)",
        "RAP (LLaMA-33B, Blocksworld): RAP(20) about 0.64 success over all plan lengths against 0.00-0.17 for CoT",
        "mcts_gain_over_greedy",
        lambda n: at_least(n["mcts_gain_over_greedy"], 0.15),
        effects=(("mcts_gain_over_greedy", 0.15),),
    ),
    ClaimSpec(
        "C1.2",
        "success grows with the search budget: the largest budget beats a single rollout by at least 5 points, "
        "and no larger budget does worse than a smaller one by over 2 points",
        "RAP (Blocksworld, 6-step): RAP(10) 0.26, RAP(20) 0.42",
        "mcts_gain_over_single_rollout",
        lambda n: at_least(n["mcts_gain_over_single_rollout"], 0.05) and _budget_monotone(n),
        effects=(("mcts_gain_over_single_rollout", 0.05),),
    ),
    ClaimSpec(
        "C1.3",
        "plans solved in imagination fail in reality, and this gap is at least 5 points wider for 6-step than "
        "for 2-step problems",
        "RAP: a learned world model's errors cap planning in imagination, more so for longer plans",
        "gap_widening",
        lambda n: at_least(n["gap_widening"], 0.05),
        # On the chapter's base the world model is accurate enough on the states the search visits that imagined and
        # real success nearly coincide (notebook, section 7); C1.3d below gives the search a world model that errs.
        required=False,
        effects=(("gap_widening", 0.05),),
    ),
)

IMPERFECT_WORLD_MODEL = "docs/experiments/ch01-02-imperfect-world-model.md"
"""The pre-registration of the designed setting shared with chapter 02 (`ch02_lats.imperfect_world_model` runs it
and records `results/ch02_imperfect_world_model.json`)."""
DESIGNED_GAP = ClaimSpec(
    "C1.3d",
    "with a world model whose errors are optimistic (its own LM, the chapter's policy and self-evaluation): at "
    "MCTS(20) the imagination-reality gap is at least 5 points wider for 6-step than for 2-step problems",
    "RAP: a learned world model's errors cap planning in imagination, more so for longer plans",
    "optimistic_gap_widening",
    lambda n: at_least(n["optimistic_gap_widening"], 0.05),
    required=False,
    induced=True,  # the optimistic errors are planted by training the world model on them
    effects=(("optimistic_gap_widening", 0.05),),
)
SETTINGS = (Setting("ch02_imperfect_world_model", (DESIGNED_GAP,), IMPERFECT_WORLD_MODEL),)
"""Chapter 01's designed setting, decided on its own file (`course_lib.course.verdicts`)."""


def claims(results: Mapping) -> list[Claim]:
    """Chapter 01's claims, evaluated on `claim_numbers(results)`."""
    return evaluate_all(CLAIMS, claim_numbers(results))


def summary_lines(results: dict) -> list[str]:
    lines = [f"world model one-step accuracy on held-out transitions: {results['world_model_accuracy']:.3f}"]
    head = "method".ljust(22) + "".join(f"{length}-step".rjust(18) for length in LENGTHS) + "mean".rjust(8)
    lines.append(head)
    lines.append("greedy (CoT)".ljust(22) + "".join(f"{results['greedy'][n]:18.2f}" for n in LENGTHS)
                 + f"{overall(results['greedy']):8.2f}")  # fmt: skip
    lines.append("pass@k (oracle)".ljust(22) + "".join(f"{results['pass_k'][n]:18.2f}" for n in LENGTHS)
                 + f"{overall(results['pass_k']):8.2f}")  # fmt: skip
    for name, table in [*((f"MCTS({i})", results["mcts"][i]) for i in results["mcts"]),
                        *((f"ablation: {k}", v) for k, v in results.get("ablation", {}).items())]:  # fmt: skip
        cells = "".join(f"{table[n]['imagined']:8.2f} → {table[n]['real']:.2f}".rjust(18) for n in LENGTHS)
        lines.append(name.ljust(22) + cells + f"{overall(table):8.2f}")
    return lines


def report(results: Mapping) -> list[str]:
    """What the command line prints for a seed, before its claims: the table and the gap per plan length."""
    gap = {k: round(v, 3) for k, v in gaps(results, max(results["mcts"])).items()}
    return ["MCTS cells: imagined → real success", *summary_lines(results), f"gap imagined - real by length: {gap}"]


# Leakage audit ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def corpus_pairs() -> tuple[frozenset, frozenset]:
    """(plan-prompt pairs, step-prompt pairs) `(state, goal)` of the committed base LM's corpus: what the audit
    holds held-out problems and their sub-problems against (`leakage.blocks_split`)."""
    from course_lib.search.blocks_lm import corpus

    texts = corpus(preset("cpu").corpus, leakage.base_seed(BASE_NAME))
    return frozenset(leakage.corpus_pairs(texts["plan"], "plan")), frozenset(leakage.corpus_pairs(texts["step"], "act"))


def held_out_audit() -> list[leakage.SplitAudit]:
    """The stored pools every evaluation samples from (`test`) and tunes on (`validation`)."""
    return [
        leakage.blocks_split("ch01", "test (pool)", test_pool(), corpus_pairs()),
        leakage.blocks_split("ch01", "validation", validation_problems(), corpus_pairs()),
    ]


def golden_cases() -> dict:
    """The world model's predictions, samples, plans and step scores on fixed test problems."""

    def world_model():
        lm = load_lm()
        problems = test_problems(8, 0)
        actions = ["pick-up a", "unstack b a", "stack a b"]
        pairs = [(init, action) for init, _ in problems[4] for action in actions]
        generator = torch.Generator().manual_seed(0)
        plans = lm.plans([(goal, init) for init, goal in problems[6]], 1.0, generator)
        scores = [lm.step_scores(goal, init, actions) for init, goal in problems[2]]
        return lm.predict(pairs), lm.sample_next(pairs[:8], 4, generator), plans, scores

    return {"ch01 world model (predict, sample, plans, step scores)": world_model}


CHAPTER = skeleton.Chapter(
    "ch01",
    "Chapter 01, RAP",
    run,
    claim_numbers,
    CLAIMS,
    report=report,
    audit=held_out_audit, golden=golden_cases,
)  # fmt: skip


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-ablation", action="store_true")
    parser.add_argument("--tune-w", type=float, nargs="+", metavar="W", help="score UCT weights on validation instead")


def _configure(args: argparse.Namespace, parser: argparse.ArgumentParser) -> skeleton.Chapter | None:
    """`--tune-w`: score UCT weights instead (None: done); else the chapter, with `--no-ablation` applied."""
    if args.tune_w:
        for weight, score in tune_uct_weight(tuple(args.tune_w)).items():
            print(f"w = {weight:g}: MCTS(20) real success {score:.3f} on the validation split")
        return None
    return replace(CHAPTER, run=functools.partial(run, ablation=not args.no_ablation))


def main(argv: list[str] | None = None) -> None:
    skeleton.main(CHAPTER, argv, arguments=_options, configure=_configure)


if __name__ == "__main__":
    main()

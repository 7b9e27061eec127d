"""Chapter 01's task, Blocksworld planning (`envs.blocksworld`) with one tiny LM (`search.blocks_lm`) as the policy
prior, the world model and the self-evaluator: its settings (`BlocksConfig`), the task set's splits (validation and
test problems held out from the LM's corpus, sub-problems included), the base LM, execution of a plan in the real
environment and RAP's search over the LM's imagination. Chapter 02 searches the same problems with LATS.

    python -m course_lib.data build ch01                 # tasks and the base LM (about 8 minutes)
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import torch

from course_lib import course_config, data, envs
from course_lib.envs.blocksworld import draw_problem, render_goal, render_state
from course_lib.rl.warm_start import SFTConfig, warm_start_and_save
from course_lib.search.blocks_lm import BlocksLM, CorpusConfig, build_blocks_tokenizer, corpus, examples
from course_lib.search.blocks_lm import held_out_transitions as world_model_test_set
from course_lib.search.mcts import MCTS, MCTSConfig
from course_lib.search.rap import ImaginedBlocksworld, RewardConfig

TASKS_NAME = "ch01_tasks"
VALIDATION_PER_LENGTH = 60
"""Validation problems per length: held out from the LM like the test split, disjoint from it."""
TEST_PER_LENGTH = 300
"""Distinct test problems per length in the task set: every evaluation samples from them."""
BASE_NAME = "ch01_base"
LENGTHS = (2, 4, 6)


@dataclass
class BlocksConfig:
    """Blocksworld planning with one tiny LM as policy prior, world model and self-evaluator, searched by RAP's
    MCTS (the cpu preset's values as defaults): chapter 01's setting, which chapter 02 shares."""

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
    mcts: MCTSConfig = field(default_factory=lambda: MCTSConfig(w_exp=0.5))
    """Max-of-mean backup, as RAP; the depth limit is set to the plan length. UCT weight w = 0.5,
    where RAP uses 1: chosen from 0.25, 0.5, 1, 2, 4 by chapter 01's `tune_uct_weight` (`--tune-w`) on the
    180 validation problems, where MCTS(20) real success was 0.606, 0.628, 0.567, 0.567, 0.561
    with the leak-free base (0.811, 0.833, 0.750, 0.722, 0.722 with the earlier base, whose step
    corpus held sub-problems of validation problems)."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """RAP's reward: the four terms and alpha = 0.5."""
    world_model_test: int = 1000
    """Held-out transitions on which the world model's one-step accuracy is measured."""


Config = TypeVar("Config", bound=BlocksConfig)


def preset(scale: str | None = None, kind: type[Config] = BlocksConfig, **gpu_changes) -> Config:
    """The task's configuration for `COURSE_SCALE` (`cpu` or `gpu`), as a `kind` (a chapter's subclass of
    `BlocksConfig`, whose own fields take `gpu_changes` under the gpu preset and their defaults otherwise)."""
    gpu = kind(
        model_preset="small",
        corpus=CorpusConfig(plans=40_000, steps=40_000, transitions=40_000, held_out=held_out_problems),
        sft=SFTConfig(steps=3000, batch_size=128, learning_rate=2e-3),
        **gpu_changes,
    )
    return course_config.by_scale(kind(), gpu, scale)


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
    config: BlocksConfig | None = None,
    scale: str = "cpu",
):
    """Train the LM of `preset(scale)` on the three formats (plans, labelled steps, transitions) and save it."""
    config = config or preset(scale)
    tokenizer = build_blocks_tokenizer()

    def rows():
        texts = corpus(config.corpus, seed)
        return [row for kind in ("plan", "step", "world") for row in examples(tokenizer, texts[kind])]

    return warm_start_and_save(out_dir, tokenizer, config.model_preset, 64, rows, config.sft, seed, progress)


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


def rap_search(
    lm: BlocksLM, init: str, goal: str, length: int, iterations: int, config: BlocksConfig,
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


def overall(per_length: dict) -> float:
    """Mean over plan lengths (each length has the same number of problems)."""
    values = [v["real"] if isinstance(v, dict) else v for v in per_length.values()]
    return sum(values) / len(values)


def gaps(results: dict, iterations: int) -> dict[int, float]:
    """Success in imagination minus success in reality, per plan length."""
    return {length: r["imagined"] - r["real"] for length, r in results["mcts"][iterations].items()}

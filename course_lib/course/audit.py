"""Leakage audit: are the held-out problems of every chapter distinct, and unseen in training?

For each chapter (00 to 13) and each evaluation split, at the cpu preset, this prints

- `N`, the number of problems one evaluation asks, and how many of them are distinct (a split is a
  space of problems drawn *with replacement* by seed, so the first N seeds can repeat problems);
- how many of those problems the policy also meets in RL training (the problems `train.train_grpo`
  and each chapter's other training batches draw, for every run seed recorded in the chapter's
  `results/<chapter>*.json`, confirmations and experiments included, or 0-2 if none: `run_seeds`;
  chapter 05's SFT arm's traces too);
- how many occur in the warm-start demonstrations the committed base was built from (regenerated
  with the chapter's own generator and the seed recorded in `data/MANIFEST.json`);
- where a task decomposes into steps, how many of its sub-problems occur in that data: for
  Blocksworld (chapters 01 and 02), the (state, goal) pairs on the optimal paths of each held-out
  problem, against the labelled-step and plan corpora of the base LM; for function calling (chapter
  05), the held-out (tool, parameter, value) triples of the `novel` split, against the calls written
  in the noisy demonstrations (whose value and key noise can land on a held-out pair); for the grid
  world (chapter 07) and FrozenLake (chapters 09 and 10), the observation of every state a held-out
  problem can show, against the observations of the warm-start demonstrations and every observation
  the RL draws' problems can show; for FrozenLake also the held-out first prompts and layouts (goal
  and holes: the observation leaves the start out, so a layout shared with training shares states);
  for two-hop questions (chapters 08, 11, 12), their hop lookups, both forms of hop 1 and both
  candidates' hop 2, against those of the training and demonstration questions.

Overlaps that remain are labelled (inherent to the task, or pending a base rebuild), not hidden.
The last line is `audit: chapters=K duplicates=D overlaps=O leaked_states=S (chNN=s ...)`, with D
the repeated problems summed over evaluation splits, O every overlap count (problems and
sub-problems) summed and S the held-out state observations found in training data, per chapter
with states. A split that cannot be audited (chapter 13 without `trl`) is printed as skipped and
named at the end of that line.

    python -m course_lib.course.audit        # about 40 s on one core; no model is loaded
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import sys
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

RUN_SEEDS = (0, 1, 2)
"""The seeds each chapter's `main` runs by default (`--seeds 0 1 2`): the run seeds audited where none is recorded."""
STATES = "observations of held-out states (sub-problems)"
"""The unit of the state-level overlaps (chapters 07, 09, 10): a held-out problem's states are its sub-problems."""


@dataclass
class Overlap:
    """How many of `total` held-out items (problems or sub-problems) also occur in `against`."""

    against: str
    unit: str
    count: int
    total: int
    note: str = ""


@dataclass
class SplitAudit:
    """One evaluation split of one chapter."""

    chapter: str
    split: str
    size: int
    """N: problems one evaluation asks (with repeats, if any)."""
    distinct: int
    overlaps: list[Overlap] = field(default_factory=list)
    skipped: str = ""
    """Why the split could not be audited (an optional library missing), or empty."""

    @property
    def duplicates(self) -> int:
        return self.size - self.distinct

    def lines(self) -> list[str]:
        if self.skipped:
            return [f"{self.chapter} {self.split}: skipped ({self.skipped})"]
        head = f"{self.chapter} {self.split}: N={self.size} distinct={self.distinct} duplicates={self.duplicates}"
        body = [
            f"    vs {o.against}: {o.count} of {o.total} {o.unit}" + (f"  [{o.note}]" if o.note else "")
            for o in self.overlaps
        ]
        return [head, *body]


# Generic pieces ----------------------------------------------------------------------------------
def problem_keys(make_env: Callable, seeds: Iterable[int]) -> list[Hashable]:
    """The `problem_key` of every seed's problem, in order (one environment, reset per seed)."""
    env = make_env()
    keys = []
    for seed in seeds:
        env.reset(seed=seed)
        keys.append(env.problem_key())
    return keys


def count_overlap(held_out: Iterable[Hashable], reference: Iterable[Hashable]) -> int:
    """How many *distinct* held-out items occur in `reference` (a repeated held-out item counts once)."""
    reference = reference if isinstance(reference, set | frozenset) else set(reference)
    return sum(item in reference for item in set(held_out))


def run_seeds(chapter: str) -> tuple[int, ...]:
    """The run seeds whose training draws are audited for `chapter`: every seed recorded in its results files
    (`results/<chapter>*.json`: its runs, confirmations and experiments, beyond the default three), else
    `RUN_SEEDS`. A seed that was run must be audited, or its draws could hold a held-out problem unseen."""
    from course_lib.course import results

    seeds: set[int] = set()
    for file in results.RESULTS_DIR.glob(f"{chapter}*.json"):
        seeds |= {int(seed) for seed in results.load(file.stem)["seeds"]}
    return tuple(sorted(seeds)) or RUN_SEEDS


def grpo_task_seeds(iterations: int, prompts_per_iteration: int, run_seeds: Sequence[int]) -> list[int]:
    """The task seeds `train.train_grpo` resets its training environments with, for each run seed:
    `seed * 1_000_003 + iteration * prompts + p` (`train.policy_iteration`; a test checks the two agree)."""
    return [
        seed * 1_000_003 + iteration * prompts_per_iteration + p
        for seed in run_seeds
        for iteration in range(iterations)
        for p in range(prompts_per_iteration)
    ]


def base_seed(name: str) -> int:
    """The seed the committed base checkpoint `name` was built with (recorded in the manifest)."""
    from course_lib import data

    return int(data.read_manifest()["artifacts"][name]["seed"])


def _split(chapter: str, split: str, keys: list[Hashable], overlaps: list[Overlap]) -> SplitAudit:
    return SplitAudit(chapter, split, len(keys), len(set(keys)), overlaps)


def _problem_overlaps(keys: list[Hashable], training: set, demos: set, training_note: str = "", demo_note: str = ""):
    distinct = len(set(keys))
    return [
        Overlap("RL training draws", "problems", count_overlap(keys, training), distinct, training_note),
        Overlap("warm-start demonstrations", "problems", count_overlap(keys, demos), distinct, demo_note),
    ]


def _prompts(texts: Iterable[tuple[str, str]]) -> set[str]:
    return {prompt for prompt, _ in texts}


def state_overlaps(held_out: set[str], training: set[str], demos: set[str]) -> list[Overlap]:
    """The observations of held-out problems' states against every observation the RL draws' problems can show
    (a policy can wander into any state) and the observations the warm-start demonstrations hold."""
    return [
        Overlap("RL training draws", STATES, count_overlap(held_out, training), len(held_out)),
        Overlap("warm-start demonstrations", STATES, count_overlap(held_out, demos), len(held_out)),
    ]


# Chapters with one test split and GRPO on the train split ----------------------------------------
def audit_ch00() -> list[SplitAudit]:
    from course_lib.chapters import ch00_tool_agent as ch

    config = ch.preset("cpu")
    keys = problem_keys(lambda: ch.make_env("test"), ch.test_seeds(config.eval_tasks))
    training = set(
        problem_keys(
            ch.make_env, grpo_task_seeds(config.grpo.iterations, config.grpo.prompts_per_iteration, run_seeds("ch00"))
        )
    )
    demos = _prompts(
        ch.demonstration_texts(config.demonstrations, base_seed(ch.BASE_NAME), config.tool_share, config.direct_correct)
    )
    return [_split("ch00", "test", keys, _problem_overlaps(keys, training, demos))]


def audit_ch03() -> list[SplitAudit]:
    from course_lib.chapters import ch03_planner_r1 as ch

    config = ch.preset("cpu")
    seeds = ch.test_seeds(config.eval_tasks, config.max_slack, config.constrain_share)
    keys = problem_keys(lambda: ch.make_env("test", config), seeds)
    # Every reward arm and both sizes train from the same task seeds; the stage does not change the query.
    training_seeds = grpo_task_seeds(config.grpo.iterations, config.grpo.prompts_per_iteration, run_seeds("ch03"))
    training = set(problem_keys(lambda: ch.make_env("train", config), training_seeds))
    demos = _prompts(ch.demonstration_texts(config.demonstrations, base_seed(ch.BASE_NAMES["small"]), config))
    if base_seed(ch.BASE_NAMES["large"]) != base_seed(ch.BASE_NAMES["small"]):
        demos |= _prompts(ch.demonstration_texts(config.demonstrations, base_seed(ch.BASE_NAMES["large"]), config))
    return [_split("ch03", "test", keys, _problem_overlaps(keys, training, demos))]


def audit_ch04() -> list[SplitAudit]:
    from course_lib.chapters import ch04_torl as ch

    config = ch.preset("cpu")
    keys = problem_keys(lambda: ch.make_env("test"), ch.test_seeds(config.eval_tasks))
    # Every variant (`VARIANTS`) changes masking, penalty or C, never the GRPO sizes: the same task seeds.
    training_seeds = grpo_task_seeds(config.grpo.iterations, config.grpo.prompts_per_iteration, run_seeds("ch04"))
    training = set(problem_keys(ch.make_env, training_seeds))
    demos = _prompts(
        ch.demonstration_texts(config.demonstrations, base_seed(ch.BASE_NAME), config.tool_share, config.direct_correct)
    )
    return [_split("ch04", "test", keys, _problem_overlaps(keys, training, demos))]


def audit_ch06() -> list[SplitAudit]:
    from course_lib.chapters import ch06_artist as ch

    config = ch.preset("cpu")
    keys = problem_keys(lambda: ch.make_env("test", config), ch.test_seeds(config.eval_tasks))
    # ARTIST's reward and the ablation without the tool term train on the same task seeds.
    training_seeds = grpo_task_seeds(config.grpo.iterations, config.grpo.prompts_per_iteration, run_seeds("ch06"))
    training = set(problem_keys(lambda: ch.make_env("train", config), training_seeds))
    demos = _prompts(
        ch.demonstration_texts(config.demonstrations, base_seed(ch.BASE_NAME), config.failure_rate, config.retry_share)
    )
    return [_split("ch06", "test", keys, _problem_overlaps(keys, training, demos))]


# Chapter 05: chit-chat queries in every split, and held-out (tool, parameter, value) triples ------
CHITCHAT_NOTE = "inherent: the five chit-chat queries (no tool fits) occur in every split"
TRIPLE_NOTE = "pending base rebuild: value/key noise of the demonstrations writes held-out pairs"


def ch05_demonstrations(count: int, seed: int, noise, mix) -> list[tuple[str, str]]:
    """`(question, response)` texts of chapter 05's warm start: the same loop and random stream as
    `ch05_toolrl.demonstration_examples` (which tokenises them), without the tokenizer."""
    import random

    from course_lib.chapters import ch05_toolrl as ch

    rng = random.Random(seed)
    texts = []
    for index in range(count):
        task = mix.draw(seed * 10_000_019 + index, "train")
        texts.append((task.question, ch.noisy_answer(task, rng, noise)))
    return texts


def call_triples(calls: Iterable) -> set[tuple[str, str, str]]:
    """`{(tool, parameter, value)}` of parsed or true calls `[(name, ((key, value), ...))]`."""
    return {(name, key, value) for name, args in calls for key, value in args}


def audit_ch05() -> list[SplitAudit]:
    from course_lib.chapters import ch05_toolrl as ch
    from course_lib.envs.function_calling import CHITCHAT, FunctionCallingEnv, held_out
    from course_lib.envs.toolrl_reward import parse_calls

    config = ch.preset("cpu")
    seed = base_seed(ch.BASE_NAME)
    demos = ch05_demonstrations(config.demonstrations, seed, config.noise, config.demo_mix)
    demo_questions = {question for question, _ in demos}
    demo_triples: set[tuple[str, str, str]] = set()
    for _, response in demos:
        demo_triples |= call_triples(parse_calls(response) or [])
    grpo, seeds = config.grpo, run_seeds("ch05")
    training = set(
        problem_keys(
            lambda: FunctionCallingEnv("train", mix=config.task_mix),
            grpo_task_seeds(grpo.iterations, grpo.prompts_per_iteration, seeds),
        )
    )
    # The SFT arm imitates correct traces of train queries (`ch05_toolrl.correct_examples`: task
    # `seed * 7_000_003 + index + 1`, as many as RL samples sequences); it is training too.
    traces = config.sft_traces or grpo.iterations * grpo.prompts_per_iteration * grpo.group_size
    training |= {
        config.task_mix.draw(run * 7_000_003 + index + 1, "train").question for run in seeds for index in range(traces)
    }
    out = []
    for split in ("test", "novel"):
        env = FunctionCallingEnv(split, mix=config.task_mix)
        keys, triples = [], set()
        for s in ch.test_seeds(config.eval_tasks, split, config.task_mix):
            env.reset(seed=s)
            keys.append(env.problem_key())
            triples |= {t for t in call_triples(env.task.calls) if held_out(*t)}
        overlaps = _problem_overlaps(keys, training, demo_questions)
        chitchat = {f"<question> {c} </question>" for c in CHITCHAT}
        for overlap, seen in zip(overlaps, (training, demo_questions), strict=True):
            # Only chit-chat may be shared; any other shared query is a real leak, and says so.
            leaked_tools = (set(keys) & seen) - chitchat
            if leaked_tools:
                overlap.note = f"LEAK: {len(leaked_tools)} tool queries"
            elif overlap.count:
                overlap.note = CHITCHAT_NOTE
        if split == "novel":
            leaked = count_overlap(triples, demo_triples)
            writers = sum(bool(call_triples(parse_calls(r) or []) & triples) for _, r in demos)
            note = f"{TRIPLE_NOTE}; {writers} of {len(demos)} demonstrations write one" if leaked else ""
            overlaps.append(
                Overlap("warm-start demonstrations", "held-out (tool, parameter, value) triples", leaked, len(triples),
                        note)
            )  # fmt: skip
        out.append(_split("ch05", split, keys, overlaps))
    return out


# Chapters 01 and 02: Blocksworld problems and the (state, goal) sub-problems on their paths ------
STEP_NOTE = "pending base rebuild: step prompts on held-out problems' optimal paths (the corpus must exclude them)"
PLAN_NOTE = "pending base rebuild: plan demonstrations from mid-path states of held-out problems"


def path_subproblems(init_text: str, goal_text: str) -> set[tuple[str, str]]:
    """`{(state text, goal text)}` for every state strictly between start and goal on *some* optimal
    plan of the problem: the later steps a search or a policy faces after the first action."""
    from course_lib.envs.blocksworld import distances_to, parse_goal, parse_state, render_state

    init, goal = parse_state(init_text), parse_goal(goal_text)
    to_goal, from_init = distances_to(goal), distances_to(init)  # every action has an inverse
    length = to_goal[init]
    return {
        (render_state(s), goal_text) for s, d in from_init.items() if 0 < d < length and to_goal.get(s) == length - d
    }


def _corpus_pairs(rows: Iterable[tuple[str, str]], word: str) -> set[tuple[str, str]]:
    """`{(state, goal)}` of corpus prompts `goal G state S <word>`."""
    pairs = set()
    for prompt, _ in rows:
        goal, _, rest = prompt.removeprefix("goal ").partition(" state ")
        pairs.add((rest.removesuffix(f" {word}"), goal))
    return pairs


@functools.lru_cache(maxsize=1)
def _blocks_corpus() -> tuple[frozenset, frozenset]:
    """(plan-prompt pairs, step-prompt pairs) of the committed chapter 01 base LM's corpus."""
    from course_lib.chapters import ch01_rap as ch01
    from course_lib.search.blocks_lm import corpus

    texts = corpus(ch01.preset("cpu").corpus, base_seed(ch01.BASE_NAME))
    return frozenset(_corpus_pairs(texts["plan"], "plan")), frozenset(_corpus_pairs(texts["step"], "act"))


def _blocks_split(chapter: str, split: str, by_length: dict[int, list[tuple[str, str]]]) -> SplitAudit:
    plans, steps = _blocks_corpus()
    keys = [problem for rows in by_length.values() for problem in rows]
    demos = plans | steps  # a problem counts as seen if its start appears in either kind of prompt
    subproblems = set().union(*(path_subproblems(i, g) for i, g in set(keys)))
    overlaps = _problem_overlaps(keys, set(), demos, "no RL training in this chapter")
    overlaps += [
        Overlap("step corpus", "(state, goal) sub-problems on optimal paths", count_overlap(subproblems, steps),
                len(subproblems), STEP_NOTE),
        Overlap("plan corpus", "(state, goal) sub-problems on optimal paths", count_overlap(subproblems, plans),
                len(subproblems), PLAN_NOTE),
    ]  # fmt: skip
    for o in overlaps:
        if not o.count and o.note.startswith("pending"):
            o.note = ""
    return _split(chapter, split, keys, overlaps)


def audit_ch01() -> list[SplitAudit]:
    """The stored pools every chapter 01 evaluation samples from (`test`) and tunes on (`validation`)."""
    from course_lib.chapters import ch01_rap as ch01

    return [
        _blocks_split("ch01", "test (pool)", ch01._problems_by_length("test")),
        _blocks_split("ch01", "validation", ch01.validation_problems()),
    ]


def audit_ch02() -> list[SplitAudit]:
    """Chapter 02 samples its evaluation from chapter 01's test pool (counted again: both chapters evaluate on it)."""
    from course_lib.chapters import ch01_rap as ch01

    return [_blocks_split("ch02", "test (ch01's pool)", ch01._problems_by_length("test"))]


# Chapter 07: key-and-door tasks, and the observations of every state a held-out task can reach ------
def task_observations(tasks: Iterable, size: int) -> set[str]:
    """The full-view observation of every true state (agent cell, key held or not, door open or not) of
    each task: what a step-mode policy can be shown on it, so its sub-problems."""
    from course_lib.envs.key_door import KeyDoorEnv

    env, seen = KeyDoorEnv(size=size), set()
    for task in tasks:
        env.task = task
        for row in range(size):
            for col in range(size):
                for has_key in (False, True):
                    for door_open in (False, True):
                        env.state = (row, col, has_key, door_open)
                        seen.add(env._observe())
    return seen


def audit_ch07() -> list[SplitAudit]:
    from course_lib.chapters import ch07_gigpo as ch

    config = ch.preset("cpu")
    keys = problem_keys(ch.EnvFactory("test", config), ch.test_seeds(config.eval_tasks, config))
    grpo = config.grpo
    training_seeds = grpo_task_seeds(grpo.iterations, grpo.prompts_per_iteration, run_seeds("ch07"))
    training = set(problem_keys(ch.EnvFactory("train", config), training_seeds))
    demos = ch.demonstration_texts(config.demonstrations, base_seed(ch.BASE_NAME), config)
    demo_tasks = set(
        problem_keys(
            ch.EnvFactory("train", config), ch.demonstration_seeds(config.demonstrations, base_seed(ch.BASE_NAME))
        )
    )
    overlaps = _problem_overlaps(keys, training, demo_tasks)
    # step mode: each demonstration prompt is one state's observation
    overlaps += state_overlaps(
        task_observations(set(keys), config.size), task_observations(training, config.size), _prompts(demos)
    )
    return [_split("ch07", "test", keys, overlaps)]


def question_lookups(questions: Iterable) -> set[tuple[str, str]]:
    """Both hops of each `two_hop_qa` question, as `(entity, relation)` lookups: its sub-problems. Hop 1 counts in
    both forms, precise and imprecise, and for an ambiguous question the wrong candidate's hop 2 is a lookup a
    policy may make, so it counts too."""
    lookups = set()
    for question in questions:
        (company, role), (bridge, attribute) = question.hop_lookups()
        lookups.add((company, role))  # the precise hop 1, `NAME in CITY ROLE`
        lookups.add((question.name, role))  # the imprecise one, `NAME ROLE` (`naive_actions` makes it)
        lookups.update((person, attribute) for person in question.candidates)
        lookups.add((bridge, attribute))
    return lookups


def two_hop_overlaps(keys: Sequence, training: Sequence, demos: Sequence) -> list[Overlap]:
    """The audit of a `two_hop_qa` chapter (08, 11, 12): held-out questions against the RL draws and the
    demonstrations, and their hop lookups (sub-problems) against those made there."""
    held_out_lookups = question_lookups(set(keys))
    overlaps = _problem_overlaps(keys, set(training), set(demos))
    return overlaps + [
        Overlap("RL training draws", "hop lookups of held-out questions (sub-problems)",
                count_overlap(held_out_lookups, question_lookups(set(training))), len(held_out_lookups)),
        Overlap("warm-start demonstrations", "hop lookups of held-out questions (sub-problems)",
                count_overlap(held_out_lookups, question_lookups(set(demos))), len(held_out_lookups)),
    ]  # fmt: skip


def audit_ch08() -> list[SplitAudit]:
    from course_lib.chapters import ch08_arpo as ch

    config = ch.preset("cpu")
    keys = problem_keys(lambda: ch.make_env("test", config), ch.test_seeds(config.eval_tasks))
    grpo, seeds = config.grpo, run_seeds("ch08")
    training_seeds = grpo_task_seeds(grpo.iterations, grpo.prompts_per_iteration, seeds)
    variance = range(config.variance_prompts)
    training_seeds += [ch.VARIANCE_SEED + seed * 1_000 + p for seed in seeds for p in variance]
    training = problem_keys(lambda: ch.make_env("train", config), training_seeds)
    demos = problem_keys(
        lambda: ch.make_env("train", config), ch.demonstration_seeds(config.demonstrations, base_seed(ch.BASE_NAME))
    )
    return [_split("ch08", "test", keys, two_hop_overlaps(keys, training, demos))]


# Chapters 09 and 10: FrozenLake maps, their layouts and the observations of their states ------------
LAYOUTS = "layouts (goal, holes) of held-out maps"
FIRST_PROMPTS = "first prompts of held-out maps"


def lake_observations(lakes: Iterable) -> set[str]:
    """The observation of every state of each map (the agent on any cell but a hole or the goal): what an episode
    on it can show, so its sub-problems. The start is not in it: maps that differ only by it show the same states."""
    from course_lib.envs.frozen_lake import SIZE, layout, observation_text

    cells, seen = [(row, col) for row in range(SIZE) for col in range(SIZE)], set()
    for lake in lakes:
        goal, holes = layout(lake)
        seen |= {observation_text(lake, cell) for cell in cells if cell != goal and cell not in holes}
    return seen


def episode_observations(texts: Iterable[tuple[str, str]]) -> set[str]:
    """Every observation of chapter 09's `(prompt, completion)` episodes: the prompt, and the text between one
    turn's `</answer>` and the next turn's `<think>` (the last turn's outcome is not in the completion)."""
    observations = set()
    for prompt, completion in texts:
        after_turns = (text.partition("<think>")[0].strip() for text in completion.split("</answer>")[1:])
        observations |= {prompt, *filter(None, after_turns)}
    return observations


@functools.lru_cache(maxsize=1)
def _lake_demonstrations() -> tuple[frozenset, frozenset]:
    """(maps, observations) of the warm-start demonstrations of chapter 09's committed base (chapter 10's too)."""
    from course_lib.chapters import ch09_ragen as ch

    config, seed = ch.preset("cpu"), base_seed(ch.BASE_NAME)
    lakes = problem_keys(lambda: ch.make_env("train"), ch.demonstration_seeds(config.demonstrations, seed))
    texts = ch.demonstration_texts(config.demonstrations, seed, config)
    return frozenset(lakes), frozenset(episode_observations(texts))


def _lake_split(chapter: str, keys: list, training: set) -> SplitAudit:
    """Held-out maps against the RL draws and the demonstrations: as maps, as layouts (the goal and holes an
    observation shows: a training map of the same layout shows the same states), by their first prompt, and by
    the observations of their states."""
    from course_lib.envs.frozen_lake import layout, observation_text

    demo_lakes, demo_observations = _lake_demonstrations()
    held_out = set(keys)
    layouts = {layout(lake) for lake in held_out}
    first = {observation_text(lake, lake[0]) for lake in held_out}
    overlaps = _problem_overlaps(keys, training, demo_lakes)
    overlaps += [
        Overlap("RL training draws", LAYOUTS, count_overlap(layouts, map(layout, training)), len(layouts)),
        Overlap("warm-start demonstrations", LAYOUTS, count_overlap(layouts, map(layout, demo_lakes)), len(layouts)),
        Overlap("warm-start demonstrations", FIRST_PROMPTS, count_overlap(first, demo_observations), len(first)),
        *state_overlaps(lake_observations(held_out), lake_observations(training), demo_observations),
    ]
    return _split(chapter, "test", keys, overlaps)


def audit_ch09() -> list[SplitAudit]:
    from course_lib.chapters import ch09_ragen as ch

    config = ch.preset("cpu")
    keys = problem_keys(lambda: ch.make_env("test"), ch.test_seeds(config.eval_tasks))
    # every arm draws seed * 1_000_003 + iteration * prompts + p: the longest arms cover the others' draws
    arms = [ch.arm_config(config, arm) for arm in [*ch.ARMS, *ch.budget_arms(config)]]
    draws = max(grpo.iterations * grpo.prompts_per_iteration for grpo in arms)
    training = set(problem_keys(lambda: ch.make_env("train"), grpo_task_seeds(1, draws, run_seeds("ch09"))))
    return [_lake_split("ch09", keys, training)]


def audit_ch10() -> list[SplitAudit]:
    from course_lib.chapters import ch10_ragen2 as ch

    config = ch.preset("cpu")
    keys = problem_keys(lambda: ch.make_env("test"), ch.test_seeds(config.eval_tasks))
    grpo, seeds = config.grpo, run_seeds("ch10")  # every arm has the same iterations and maps per iteration
    draws = grpo_task_seeds(grpo.iterations, grpo.prompts_per_iteration, seeds)
    draws += [ch.BUCKET_SEED_OFFSET + seed * 10_000 + m for seed in seeds for m in range(config.bucket_maps)]
    training = set(problem_keys(lambda: ch.make_env("train"), draws))
    return [_lake_split("ch10", keys, training)]  # chapter 09's base, so its demonstrations


def audit_ch11() -> list[SplitAudit]:
    from course_lib.chapters import ch08_arpo as ch08
    from course_lib.chapters import ch11_aepo as ch

    config = ch.preset("cpu")
    keys = problem_keys(lambda: ch.make_env("test", config), ch.test_seeds(config.task.eval_tasks))
    grpo, seeds = config.grpo, run_seeds("ch11")
    tool_seeds = grpo_task_seeds(grpo.iterations, grpo.prompts_per_iteration, seeds)
    for offset, count in ((ch.CONCENTRATION_SEED, config.sampler_prompts), (ch.CHECK_SEED, config.check_prompts)):
        tool_seeds += [offset + seed * 1_000 + p for seed in seeds for p in range(count)]
    split = [ch.SPLIT_SEED + seed * 1_000 + p for seed in seeds for p in range(config.sampler_prompts)]
    training = problem_keys(lambda: ch.make_env("train", config), tool_seeds)
    for share in (0.0, 1.0):  # C11.4's two kinds of question
        training += problem_keys(lambda share=share: ch.make_env("train", config, share), split)
    root_config = ch.root_task(config)
    demos = problem_keys(
        lambda: ch.make_env("train", config),
        ch08.demonstration_seeds(config.task.demonstrations, base_seed(ch.BASE_NAME)),
    )
    demos += problem_keys(
        lambda: ch08.make_env("train", root_config),
        ch08.demonstration_seeds(root_config.demonstrations, base_seed(ch.ROOT_BASE_NAME)),
    )
    return [_split("ch11", "test", keys, two_hop_overlaps(keys, training, demos))]


def audit_ch12() -> list[SplitAudit]:
    from course_lib.chapters import ch08_arpo as ch08
    from course_lib.chapters import ch12_capstone as ch

    config = ch.preset("cpu")
    keys = problem_keys(lambda: ch.make_env("test", config), ch.test_seeds(config.task.eval_tasks))
    grpo = config.grpo  # every arm has the same iterations and questions per iteration
    draws = grpo_task_seeds(grpo.iterations, grpo.prompts_per_iteration, run_seeds("ch12"))
    draws += [ch.MONITOR_SEED + p for p in range(config.monitor_prompts)]
    training = problem_keys(lambda: ch.make_env("train", config), draws)
    demos = problem_keys(
        lambda: ch.make_env("train", config),
        ch08.demonstration_seeds(config.task.demonstrations, base_seed(ch.BASE_NAME)),
    )
    return [_split("ch12", "test", keys, two_hop_overlaps(keys, training, demos))]


def audit_ch13() -> list[SplitAudit]:
    """Chapter 00's held-out problems against what the appendix trains on: TRL's prompts (its whole dataset, and the
    check batch, its first prompts) and chapter 00's loop at the same budget. Skipped without `trl` (an optional
    extra), which the appendix and its prompts need."""
    if importlib.util.find_spec("trl") is None:
        return [SplitAudit("ch13", "test", 0, 0, skipped="trl is not installed: pip install -e .[trl]")]
    from course_lib.chapters import ch00_tool_agent as ch00
    from course_lib.chapters import ch13_scale_out as ch
    from course_lib.integrations.trl import chapter_task, dataset_prompts, training_prompts

    config = ch.preset("cpu")
    keys = problem_keys(lambda: ch00.make_env("test"), ch00.test_seeds(config.chapter00.eval_tasks))
    trl = config.trl
    task = chapter_task(ch.CHAPTER)
    prompt_seeds = {**dataset_prompts(task, trl), **training_prompts(task, config.check_prompts)}
    draws = [*prompt_seeds.values(), *grpo_task_seeds(trl.steps, trl.prompts, run_seeds("ch13"))]
    training = set(problem_keys(ch00.make_env, draws))
    chapter00 = config.chapter00
    demos = _prompts(
        ch00.demonstration_texts(
            chapter00.demonstrations, base_seed(ch00.BASE_NAME), chapter00.tool_share, chapter00.direct_correct
        )
    )
    return [_split("ch13", "test", keys, _problem_overlaps(keys, training, demos))]


def audit_ch14() -> list[SplitAudit]:
    """Chapter 00's held-out problems against what the appendix's stand-in learns from: the BPE tokenizer's training
    text (chapter 00's demonstrator episodes on train problems), the warm start's demonstrations (drawn with seed 0,
    as `skeleton.base_for` draws them for a checkpoint) and GRPO's task draws under the appendix's run seeds."""
    from course_lib.chapters import ch00_tool_agent as ch00
    from course_lib.chapters import ch14_own_model as ch
    from course_lib.course import standins

    config = ch.preset("cpu").chapter00
    keys = problem_keys(lambda: ch00.make_env("test"), ch00.test_seeds(config.eval_tasks))
    draws = grpo_task_seeds(config.grpo.iterations, config.grpo.prompts_per_iteration, run_seeds("ch14"))
    text_episodes = -(-standins.TOKENIZER_TEXTS // len(standins.EPISODE_SOURCES))  # per chapter (`environment_texts`)
    tokenizer_draws = [ch.TOKENIZER_TEXT_SEED * 10_000_019 + i for i in range(text_episodes)]
    training = set(problem_keys(ch00.make_env, [*draws, *tokenizer_draws]))
    demos = _prompts(ch00.demonstration_texts(config.demonstrations, 0, config.tool_share, config.direct_correct))
    return [_split("ch14", "test", keys, _problem_overlaps(keys, training, demos))]


def audit_ch15() -> list[SplitAudit]:
    """The pitfalls lab evaluates no held-out problem (its batches are train-split draws, measured for their
    symptoms, not for success), so there is no split to audit: reported as skipped."""
    return [SplitAudit("ch15", "test", 0, 0, skipped="the pitfalls lab evaluates no held-out problem")]


def audit_ch16() -> list[SplitAudit]:
    """The real-model appendix measures an untrained pretrained model: nothing of the course's trains it, so no
    training data can hold its held-out problems (its own pretraining corpus is not the course's to audit);
    reported as skipped. Chapter 00 on that model (`ch00_smollm2`) is inside chapter 00's audit: its 64 evaluation
    problems are the first of chapter 00's and its 512 demonstrations the first of chapter 00's."""
    return [SplitAudit("ch16", "test", 0, 0, skipped="inference only: nothing of the course's trains the model")]


AUDITS: dict[str, Callable[[], list[SplitAudit]]] = {
    "ch00": audit_ch00,
    "ch01": audit_ch01,
    "ch02": audit_ch02,
    "ch03": audit_ch03,
    "ch04": audit_ch04,
    "ch05": audit_ch05,
    "ch06": audit_ch06,
    "ch07": audit_ch07,
    "ch08": audit_ch08,
    "ch09": audit_ch09,
    "ch10": audit_ch10,
    "ch11": audit_ch11,
    "ch12": audit_ch12,
    "ch13": audit_ch13,
    "ch14": audit_ch14,
    "ch15": audit_ch15,
    "ch16": audit_ch16,
}


def totals(audits: Sequence[SplitAudit]) -> tuple[int, int, int]:
    """`(chapters, duplicates, overlaps)` over every audited split (a skipped one is not audited)."""
    audited = [a for a in audits if not a.skipped]
    chapters = len({a.chapter for a in audited})
    return chapters, sum(a.duplicates for a in audited), sum(o.count for a in audited for o in a.overlaps)


def leaked_states(audits: Sequence[SplitAudit]) -> dict[str, int]:
    """Per chapter with state-level counts (`STATES`), the held-out state observations found in its training data:
    the leak a per-problem count cannot see, apart in the summary so that inherent overlaps do not hide it."""
    leaked: dict[str, int] = {}
    for a in audits:
        for o in a.overlaps:
            if o.unit == STATES:
                leaked[a.chapter] = leaked.get(a.chapter, 0) + o.count
    return leaked


def summary(audits: Sequence[SplitAudit]) -> str:
    """The last line: `audit: chapters=K duplicates=D overlaps=O`, then the leaked held-out states (summed, and per
    chapter) where any chapter counts them, and the skipped splits where any is."""
    chapters, duplicates, overlaps = totals(audits)
    line = f"audit: chapters={chapters} duplicates={duplicates} overlaps={overlaps}"
    states = leaked_states(audits)
    if states:
        line += f" leaked_states={sum(states.values())} (" + " ".join(f"{c}={n}" for c, n in states.items()) + ")"
    skipped = [f"{a.chapter} {a.split}" for a in audits if a.skipped]
    return line + (f" skipped={', '.join(skipped)}" if skipped else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.course.audit", description=__doc__.splitlines()[0])
    parser.add_argument(
        "chapters", nargs="*", metavar="chNN", help=f"chapters to audit, of {sorted(AUDITS)} (default: all)"
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.chapters) - set(AUDITS))
    if unknown:
        parser.error(f"unknown chapters {unknown}; choose from {sorted(AUDITS)}")
    import torch

    torch.set_num_threads(1)  # nothing here is a tensor workload; stay off the other cores
    start = time.perf_counter()
    audits = []
    for name in args.chapters or AUDITS:
        for audit in AUDITS[name]():
            print("\n".join(audit.lines()), flush=True)
            audits.append(audit)
    print(f"({time.perf_counter() - start:.0f} s)")
    print(summary(audits))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The leakage audit's helpers: what a chapter's audit of its held-out splits (`Chapter.audit`) is written with:
`problem_keys`, `grpo_task_seeds`, `run_seeds`, `base_seed`, `problem_overlaps`, and the task families' sub-problem
counts: `blocks_split`, `state_overlaps`, `two_hop_overlaps`, `lake_split`. The command that runs every chapter's
audit and what it prints is `course_lib.lab.audit`.
"""

from __future__ import annotations

import dataclasses
import functools
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
    from course_lib.course import recorded

    seeds: set[int] = set()
    for file in recorded.RESULTS_DIR.glob(f"{chapter}*.json"):
        seeds |= {int(seed) for seed in recorded.load(file.stem)["seeds"]}
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


def split_audit(chapter: str, split: str, keys: list[Hashable], overlaps: list[Overlap]) -> SplitAudit:
    return SplitAudit(chapter, split, len(keys), len(set(keys)), overlaps)


def problem_overlaps(keys: list[Hashable], training: set, demos: set, training_note: str = "", demo_note: str = ""):
    distinct = len(set(keys))
    return [
        Overlap("RL training draws", "problems", count_overlap(keys, training), distinct, training_note),
        Overlap("warm-start demonstrations", "problems", count_overlap(keys, demos), distinct, demo_note),
    ]


def grpo_draws(chapter: str, grpo) -> list[int]:
    """The task seeds a chapter's loop configuration `grpo` (`GRPOConfig`) draws under every run seed the chapter
    recorded (`grpo_task_seeds`, `run_seeds`)."""
    return grpo_task_seeds(grpo.iterations, grpo.prompts_per_iteration, run_seeds(chapter))


def held_out_split(
    chapter: str,
    make_env: Callable[[str], object],
    held_out: Iterable[int],
    draws: Iterable[int],
    demos: Iterable[Hashable],
    overlaps: Callable[..., list[Overlap]] = problem_overlaps,
) -> list[SplitAudit]:
    """A chapter's audit of its one held-out split, `test` (`make_env(split)`): the problems of the `held_out` seeds
    against those the RL `draws` pose on the training split and against the demonstrations `demos`, compared by
    `overlaps` (`problem_overlaps`: problems or prompts; `two_hop_overlaps` adds the hop lookups)."""
    keys = problem_keys(lambda: make_env("test"), held_out)
    training = problem_keys(lambda: make_env("train"), draws)
    return [split_audit(chapter, "test", keys, overlaps(keys, training, demos))]


def prompts_of(texts: Iterable[tuple[str, str]]) -> set[str]:
    return {prompt for prompt, _ in texts}


def state_overlaps(held_out: set[str], training: set[str], demos: set[str]) -> list[Overlap]:
    """The observations of held-out problems' states against every observation the RL draws' problems can show
    (a policy can wander into any state) and the observations the warm-start demonstrations hold."""
    return [
        Overlap("RL training draws", STATES, count_overlap(held_out, training), len(held_out)),
        Overlap("warm-start demonstrations", STATES, count_overlap(held_out, demos), len(held_out)),
    ]


# Blocksworld (chapters 01 and 02): problems and the (state, goal) sub-problems on their paths ----------
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


def corpus_pairs(rows: Iterable[tuple[str, str]], word: str) -> set[tuple[str, str]]:
    """`{(state, goal)}` of a Blocksworld corpus's prompts `goal G state S <word>`."""
    pairs = set()
    for prompt, _ in rows:
        goal, _, rest = prompt.removeprefix("goal ").partition(" state ")
        pairs.add((rest.removesuffix(f" {word}"), goal))
    return pairs


@functools.lru_cache(maxsize=1)
def blocks_corpus_pairs() -> tuple[frozenset, frozenset]:
    """(plan-prompt pairs, step-prompt pairs) `(state, goal)` of the committed Blocksworld base LM's corpus (chapters
    01 and 02: `tasks.blocks_planning`): what the audit holds held-out problems and their sub-problems against
    (`blocks_split`)."""
    from course_lib.search.blocks_lm import corpus
    from course_lib.tasks import blocks_planning

    texts = corpus(blocks_planning.preset("cpu").corpus, base_seed(blocks_planning.BASE_NAME))
    return frozenset(corpus_pairs(texts["plan"], "plan")), frozenset(corpus_pairs(texts["step"], "act"))


def blocks_split(
    chapter: str, split: str, by_length: dict[int, list[tuple[str, str]]], corpus: tuple[frozenset, frozenset]
) -> SplitAudit:
    """Blocksworld problems (`{length: [(init, goal)]}`) against a base LM's corpus, `(plan-prompt pairs,
    step-prompt pairs)` (`corpus_pairs`): as problems, and by the (state, goal) sub-problems on their optimal paths."""
    plans, steps = corpus
    keys = [problem for rows in by_length.values() for problem in rows]
    demos = plans | steps  # a problem counts as seen if its start appears in either kind of prompt
    subproblems = set().union(*(path_subproblems(i, g) for i, g in set(keys)))
    overlaps = problem_overlaps(keys, set(), demos, "no RL training in this chapter")
    overlaps += [
        Overlap("step corpus", "(state, goal) sub-problems on optimal paths", count_overlap(subproblems, steps),
                len(subproblems), STEP_NOTE),
        Overlap("plan corpus", "(state, goal) sub-problems on optimal paths", count_overlap(subproblems, plans),
                len(subproblems), PLAN_NOTE),
    ]  # fmt: skip
    for o in overlaps:
        if not o.count and o.note.startswith("pending"):
            o.note = ""
    return split_audit(chapter, split, keys, overlaps)


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
    overlaps = problem_overlaps(keys, set(training), set(demos))
    return overlaps + [
        Overlap("RL training draws", "hop lookups of held-out questions (sub-problems)",
                count_overlap(held_out_lookups, question_lookups(set(training))), len(held_out_lookups)),
        Overlap("warm-start demonstrations", "hop lookups of held-out questions (sub-problems)",
                count_overlap(held_out_lookups, question_lookups(set(demos))), len(held_out_lookups)),
    ]  # fmt: skip


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
def demonstrated_lakes() -> tuple[frozenset, frozenset]:
    """(maps, observations) of the committed lake base's warm-start demonstrations (chapters 09 and 10 train from it:
    `tasks.lake_reasoning`)."""
    from course_lib.tasks import lake_reasoning

    config, seed = lake_reasoning.preset("cpu"), base_seed(lake_reasoning.BASE_NAME)
    seeds = lake_reasoning.demonstration_seeds(config.demonstrations, seed)
    lakes = problem_keys(lambda: lake_reasoning.make_env("train"), seeds)
    texts = lake_reasoning.demonstration_texts(config.demonstrations, seed, config)
    return frozenset(lakes), frozenset(episode_observations(texts))


def lake_split(chapter: str, keys: list, training: set, demonstrations: tuple[frozenset, frozenset]) -> SplitAudit:
    """Held-out maps against the RL draws and the demonstrations: as maps, as layouts (the goal and holes an
    observation shows: a training map of the same layout shows the same states), by their first prompt, and by
    the observations of their states."""
    from course_lib.envs.frozen_lake import layout, observation_text

    demo_lakes, demo_observations = demonstrations
    held_out = set(keys)
    layouts = {layout(lake) for lake in held_out}
    first = {observation_text(lake, lake[0]) for lake in held_out}
    overlaps = problem_overlaps(keys, training, demo_lakes)
    overlaps += [
        Overlap("RL training draws", LAYOUTS, count_overlap(layouts, map(layout, training)), len(layouts)),
        Overlap("warm-start demonstrations", LAYOUTS, count_overlap(layouts, map(layout, demo_lakes)), len(layouts)),
        Overlap("warm-start demonstrations", FIRST_PROMPTS, count_overlap(first, demo_observations), len(first)),
        *state_overlaps(lake_observations(held_out), lake_observations(training), demo_observations),
    ]
    return split_audit(chapter, "test", keys, overlaps)


# Chapter 16's survey on a real model: the survey's tasks, trained on SmolLM2 ------------------------------
def survey_split(chapter: str, name: str) -> SplitAudit:
    """One survey task's held-out problems (`tasks.real_model.TASKS[name]`, as its warm start evaluates them)
    against the problems of every RL draw a recorded seed of `chapter` (16) makes on it (its comparisons' shapes;
    chapter 00's for the arithmetic of C16.8d) and every recorded seed's demonstrations, with the sub-problems the
    task's own chapter counts: every state of a held-out grid (07), the hop lookups of a held-out question (08), a
    held-out map's layout and states (10). The word problems' key is their question, also their demonstration's
    prompt."""
    from course_lib.tasks import key_door_grid, lake_reasoning, real_model, two_hop_search

    demonstrated = {"key_door": key_door_grid, "two_hop": two_hop_search, "lake": lake_reasoning}
    task, settings = real_model.TASKS[name], real_model.WARM_STARTS[name]
    config = task.config()
    keys = problem_keys(task.test_env(config), task.held_out(config, settings.eval_tasks))
    seeds = run_seeds(chapter)  # every seed of every file of the chapter's: a superset of the survey's
    shapes = [real_model.RL_SHAPES[c] for c, (on, _) in real_model.COMPARISONS.items() if on == name]
    shapes += [vars(real_model.SMOLLM2.grpo)] if name == "arithmetic" else []
    draws = [d for shape in shapes for d in
             grpo_task_seeds(shape["iterations"], shape["prompts_per_iteration"], seeds)]  # fmt: skip
    training = problem_keys(task.train_env(config), draws)
    texts = [text for seed in seeds for text in task.demonstrations(config, settings.demonstrations, seed)]
    if name not in demonstrated:  # a word problem's key is its question, its demonstration's prompt
        overlaps = problem_overlaps(keys, set(training), prompts_of(texts))
        return split_audit(chapter, f"test ({name})", keys, overlaps)
    # the other demonstrators play training problems drawn by seeds
    demo_seeds = [d for seed in seeds for d in demonstrated[name].demonstration_seeds(settings.demonstrations, seed)]
    demos = problem_keys(task.train_env(config), demo_seeds)
    if name == "lake":
        shown = (frozenset(demos), frozenset(episode_observations(texts)))
        return dataclasses.replace(lake_split(chapter, keys, set(training), shown), split="test (lake)")
    if name == "two_hop":
        return split_audit(chapter, "test (two_hop)", keys, two_hop_overlaps(keys, training, demos))
    states = state_overlaps(
        task_observations(set(keys), config.size),
        task_observations(set(training), config.size),
        prompts_of(texts),
    )
    return split_audit(chapter, f"test ({name})", keys, problem_overlaps(keys, set(training), set(demos)) + states)

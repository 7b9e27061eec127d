"""Chapter 11's designed setting: runs of uncertain tool calls, where AEPO's consecutive-branch penalty can act
(AEPO, arXiv 2510.14545, Sec. 3.2 and its released rollout `vllm_rollout_with_tools.py`; pre-registered in
`docs/experiments/ch11-design.md`).

Chapter 11's own C11.1 samples chapter 08's base, whose trajectories make at most three searches: one or two branch
points each, so a prompt gains rollouts in one or two rounds and the penalty max(0, 1 - 0.05 l) never grows (l at
most 1 or 2); and with the released alpha 0.5 and beta 0.2 on entropies divided by log |V| every branch point is
a fair coin. AEPO's diagnosis is about *runs* of high-entropy tool calls (56.5% of its high-entropy tool-call turns
are consecutive) that make ARPO re-branch the same few trajectories (93.4% of branches on 1-3 of them). This module
builds a setting where such runs exist and the branch rule reads them:

- **Task**: chapter 08's `two_hop_qa`, with up to `max_tool_calls` = 7 searches. The number of searches is the
  policy's choice.
- **Base** (`research_base`): chapter 08's recipe (imperfect demonstrator, 5% precise first searches, same warm
  start), except that after a two-candidate response the demonstrator repeats the same imprecise search with
  probability `research_share` = 0.5 (at most `max_researches` = 5 times) before it picks a candidate at random. So
  the base is uncertain (re-search, candidate A or candidate B) at every turn that follows a two-candidate response,
  and such turns come in runs: half of them are followed by another. A run is a trajectory's own, so within a group
  some trajectories have several uncertain branch points in a row and others one.
- **Branch rule** (`calibrated`): the tree branches on the entropy rise alone, P = clip(beta dH, 0, 1) (alpha 0,
  as chapter 08's `arpo_entropy` arm) with beta = 6: about 0.34 after a two-candidate response, about 0.02
  elsewhere (entropies divided by log |V|, where the rise is about 0.056). AEPO's rule is written with the
  code's threshold, P = clip(1 - alpha / f + beta dH, 0, 1), f = 1 - 0.05 l, so ARPO's alpha a is AEPO's 1 - a
  (the two conventions agree only at 0.5): ARPO alpha 0 against AEPO alpha 1, the same P at l = 0. The released
  setting (alpha 0.5, beta 0.2 in both) is kept as an arm.

The measurement is C11.1's (`ch11_aepo.branch_concentration`): the same training questions (ambiguous ones only:
an unambiguous question has no uncertain step and never branches), 16 per question with 8 global samples, ARPO's
tree and AEPO's on the same random stream; per rule the top-3 branch share and the share expected if each branch's
root were drawn uniformly over the group's global samples. The penalty also cuts the number of branches, and with
fewer branches the top-3 share rises by arithmetic alone (3 branches: 1.0), so the finding is decided on the share
*in excess of* the uniform reference: ARPO's excess above 0 and AEPO's excess below ARPO's.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from course_lib import course_config, envs
from course_lib.algos import aepo
from course_lib.chapters import ch11_aepo as ch11
from course_lib.course.claims import positive_effects
from course_lib.course.designs import Design
from course_lib.engine.rollout import RolloutEngine, SamplingConfig
from course_lib.engine.tree_rollout import TreeConfig, sample_trees
from course_lib.envs.two_hop_qa import TOOL, Question, expert_actions, vocabulary
from course_lib.rl.train import evaluate_policy
from course_lib.rl.warm_start import SFTConfig
from course_lib.tasks import bases, two_hop_search
from course_lib.tools.knowledge_base import KB

BASE_NAME = "ch11_research_base"
MAX_POSITIONS = 256
"""Position table of the base: an episode of seven imprecise searches and an answer is about 170 tokens."""
BASE_SHA256 = "2b211cc2ad92b2631ca80ba7f1f9527601f759e3cbd0d5af29e160cad90c934b"
"""sha256 of the base's `model.safetensors` as built on the course machine before the pilot (recorded per seed as
`base_matches`: 1 when the cached base is that one)."""
DESIGN_SEED = 33_000_000
"""The designed setting's training questions for seed s are `DESIGN_SEED + 1000 s + p`."""


@dataclass
class DesignConfig:
    """The designed setting (defaults: the pre-registered values)."""

    max_tool_calls: int = 7
    """Searches allowed: hop 1, up to `max_researches` repeats of it, hop 2."""
    max_turns: int = 8
    research_share: float = 0.5
    """The demonstrator's probability of repeating an imprecise search after a two-candidate response, each time."""
    max_researches: int = 5
    precise_share: float = 0.05
    """Chapter 08's demonstrator share of precise first searches."""
    demonstrations: int = 8000
    sft: SFTConfig = field(default_factory=lambda: SFTConfig(steps=1000, batch_size=64, learning_rate=3e-3))
    """Chapter 08's warm start."""
    sampling: SamplingConfig = field(
        default_factory=lambda: SamplingConfig(
            temperature=1.0, max_turn_tokens=10, max_total_tokens=200, stop_tags=("</tool_call>", "</answer>"),
            snapshot_envs=True,
        )
    )  # fmt: skip
    budget: int = 16
    """Trajectories per question (the released 7B script's k = 16)."""
    global_samples: int = 8
    """Global samples (the 7B script's 8)."""
    prompts: int = 256
    """Ambiguous training questions sampled per seed by the calibrated rules (the deciding comparison)."""
    released_prompts: int = 128
    """Ambiguous training questions sampled per seed by the released rules (shown beside it)."""
    entropy_tokens: int = 4
    """Tokens of a turn its entropy averages (chapter 08's)."""
    beta: float = 6.0
    """The calibrated rule's weight of the entropy rise: P about 0.3 after a two-candidate response (see the
    pre-registration for the values explored)."""
    eval_tasks: int = 258
    """Held-out questions of the base's success check (the whole test split)."""


def make_env(split: str, config: DesignConfig, ambiguous_share: float = 0.5) -> envs.TextEnv:
    return envs.make(
        two_hop_search.ENV_NAME, split=split, ambiguous_share=ambiguous_share, max_tool_calls=config.max_tool_calls,
        max_turns=config.max_turns,
    )  # fmt: skip


# The base ---------------------------------------------------------------------------------------
def demonstrator_actions(
    question: Question, rng: random.Random, precise_share: float, research_share: float, max_researches: int
) -> list[str]:
    """The re-searching demonstrator on `question`: with probability `precise_share` `expert_actions`; else the
    imprecise `search NAME ROLE`, repeated while a draw falls below `research_share` (at most `max_researches`
    times) if it lists two candidates, then hop 2 on a uniformly drawn candidate and that search's answer."""
    if rng.random() < precise_share:
        return expert_actions(question)
    first = f"<tool_call> {TOOL} {question.name} {question.role} </tool_call>"
    repeats = 0
    if question.ambiguous:
        while repeats < max_researches and rng.random() < research_share:
            repeats += 1
    person = rng.choice(question.candidates)
    hop2 = f"<tool_call> {TOOL} {person} {question.attribute} </tool_call>"
    return [first] * (1 + repeats) + [hop2, f"<answer> {KB.people[person][question.attribute]} </answer>"]


def demonstration_texts(count: int, seed: int, config: DesignConfig) -> list[tuple[str, str]]:
    """`(prompt, completion)` demonstrations played in the environment (chapter 08's `demonstration_texts` with the
    re-searching demonstrator), on chapter 08's demonstration questions."""
    rng = random.Random(seed)
    return two_hop_search.played_demonstrations(
        make_env("train", config),
        two_hop_search.demonstration_seeds(count, seed),
        lambda question: demonstrator_actions(
            question, rng, config.precise_share, config.research_share, config.max_researches
        ),
    )


def cache_dir() -> Path:
    """Where the base is built once: `COURSE_DESIGN_CACHE` or `~/.cache/course_lib/course/designs`."""
    return Path(os.environ.get("COURSE_DESIGN_CACHE", Path.home() / ".cache" / "course_lib" / "designs"))


@functools.lru_cache(maxsize=1)
def research_base(seed: int = 0):
    """`(model, tokenizer)` of the re-searching base, warm-started once (deterministic) and cached on disk."""
    from course_lib.models import load

    config = DesignConfig()
    folder = cache_dir() / f"{BASE_NAME}_seed{seed}"
    if not (folder / "model.safetensors").exists():
        texts = functools.partial(demonstration_texts, config.demonstrations, seed, config)
        partial = folder.with_name(folder.name + ".partial")
        bases.warm_start_base(partial, vocabulary(), "tiny", MAX_POSITIONS, texts, config.sft, seed, False)
        partial.rename(folder)
    return load(folder, course_config.device())


# The measurement --------------------------------------------------------------------------------
def trees(config: DesignConfig) -> dict[str, dict[str, TreeConfig]]:
    """Per setting, ARPO's and AEPO's tree (AEPO's alpha is the code's threshold: ARPO's a is its 1 - a)."""
    common = dict(global_samples=config.global_samples, entropy_tokens=config.entropy_tokens)
    return {
        "calibrated": {
            "arpo": TreeConfig(alpha=0.0, beta=config.beta, rule="arpo", **common),
            "aepo": TreeConfig(alpha=1.0, beta=config.beta, rule="aepo", **common),
        },
        "released": {
            "arpo": TreeConfig(alpha=0.5, beta=0.2, rule="arpo", **common),
            "aepo": TreeConfig(alpha=0.5, beta=0.2, rule="aepo", **common),
        },
    }


def concentration(
    model, tokenizer, config: DesignConfig, tree: TreeConfig, seed: int, prompts: int
) -> dict[str, float]:
    """One rule on the seed's first `prompts` ambiguous training questions: top-3 branch share, its uniform
    reference and the excess over it, branches per question, chain depth (forks between a branch and its global
    sample), mean branch probability over the branch points considered, and searches per trajectory."""
    engine = RolloutEngine(model, tokenizer, config.sampling)
    seeds = [DESIGN_SEED + 1_000 * seed + p for p in range(prompts)]
    made = [make_env("train", config, 1.0) for _ in range(len(seeds) * config.budget)]
    rows, stats = sample_trees(engine, made, seeds, config.budget, tree, torch.Generator().manual_seed(seed + 5))
    groups = range(len(seeds))
    branches = [sum(p is not None and g == q for p, g in zip(stats.parents, stats.group_ids)) for q in groups]
    roots = [sum(p is None and g == q for p, g in zip(stats.parents, stats.group_ids)) for q in groups]
    depth = [ch11._chain_depth(stats.parents, i) for i, p in enumerate(stats.parents) if p is not None]
    counts = stats.counts(config.budget, len(seeds))
    top3 = counts["tree_top3_branch_share"]
    uniform = aepo.uniform_top_share(branches, roots, 3, seed)
    return {
        "top3_share": top3,
        "uniform_top3_share": uniform,
        "excess": top3 - uniform,
        "branches_per_question": float(np.mean(branches)),
        "chain_depth": float(np.mean(depth)) if depth else float("nan"),
        "branch_probability": float(np.mean([n.probability for n in stats.nodes])) if stats.nodes else float("nan"),
        "searches": float(np.mean([sum("tool_result" in i for i in t.infos) for t in rows])),
    }


def run_seed(seed: int, config: DesignConfig | None = None) -> dict[str, float]:
    """Every number of one seed: per setting and rule the `concentration` numbers (keys `<setting>_<rule>_<key>`),
    the effect keys, and the base's held-out success."""
    config = config or DesignConfig()
    model, tokenizer = research_base()
    numbers: dict[str, float] = {}
    for setting, rules in trees(config).items():
        prompts = config.prompts if setting == "calibrated" else config.released_prompts
        for rule, tree in rules.items():
            row = concentration(model, tokenizer, config, tree, seed, prompts)
            numbers |= {f"{setting}_{rule}_{key}": value for key, value in row.items()}
        numbers[f"{setting}_arpo_excess_minus_aepo"] = (
            numbers[f"{setting}_arpo_excess"] - numbers[f"{setting}_aepo_excess"]
        )
    numbers |= raw_numbers(numbers)
    stats, _ = evaluate_policy(
        model, tokenizer, lambda: make_env("test", config), two_hop_search.test_seeds(config.eval_tasks),
        dataclasses.replace(config.sampling, snapshot_envs=False), seed + 1,
    )  # fmt: skip
    numbers["base_success"] = stats["success"]
    numbers["base_matches"] = float(base_digest() == BASE_SHA256)
    return numbers


def raw_numbers(numbers: Mapping[str, float]) -> dict[str, float]:
    """What C11.1d's effect is made of, shown beside it: the raw top-3 shares' difference, ARPO's minus AEPO's
    (without the uniform reference), and how many fewer branches per question AEPO grows than ARPO. The excess
    corrects each share by
    the uniform share of its own tree, and that reference falls as a tree branches less: a penalty that only cuts
    branches lowers the excess without spreading them."""
    return {
        f"{setting}_arpo_minus_aepo_top3_share": numbers[f"{setting}_arpo_top3_share"]
        - numbers[f"{setting}_aepo_top3_share"]
        for setting in ("calibrated", "released")
    } | {
        f"{setting}_arpo_minus_aepo_branches": numbers[f"{setting}_arpo_branches_per_question"]
        - numbers[f"{setting}_aepo_branches_per_question"]
        for setting in ("calibrated", "released")
    }


def base_digest(seed: int = 0) -> str:
    """sha256 of the cached base's weights (`research_base` builds it first if needed)."""
    from course_lib.data import sha256

    research_base(seed)
    return sha256(cache_dir() / f"{BASE_NAME}_seed{seed}" / "model.safetensors")


# The pre-registered finding ---------------------------------------------------------------------
CLAIM = positive_effects(
    "C11.1d",
    "with runs of uncertain searches and an entropy-calibrated branch rule (beta 6), ARPO's tree puts more of a "
    "question's branches on its three most-branched global samples than uniformly drawn roots would (excess above "
    "0), and AEPO's consecutive-branch penalty lowers that excess (re-searching base, 256 ambiguous training "
    "questions, 16 per question with 8 global samples; paired over seeds)",
    "AEPO: 93.4% of ARPO's branches concentrate on 1-3 trajectories; the consecutive-branch penalty spreads them",
    "calibrated_arpo_excess_minus_aepo",
    "calibrated_arpo_excess",
    required=False,
    # induced: the base is built to repeat an ambiguous search, so uncertain turns come in runs for the penalty
    induced=True,
    shown=(
        ("calibrated_arpo_minus_aepo_top3_share", "raw top-3 share, ARPO minus AEPO (no uniform reference)"),
        ("calibrated_arpo_minus_aepo_branches", "branches per question, ARPO minus AEPO"),
    ),
)

DESIGN = Design(
    chapter="ch11",
    claim=CLAIM,
    scaled_effect=0.02,
    run=run_seed,
    arms=(
        ("calibrated_arpo_excess", "ARPO, calibrated"),
        ("calibrated_aepo_excess", "AEPO, calibrated"),
        ("released_arpo_excess", "ARPO, released"),
        ("released_aepo_excess", "AEPO, released"),
    ),
    arms_measure="top-3 branch share minus uniform",
)
"""C11.1d: the penalty's effect on ARPO's excess concentration, planned for 80% power at half of ARPO's excess
(0.02; `docs/experiments/ch11-design.md`)."""

"""Chapter 17: what came next. GraphGPO, Tree-GRPO and IGPO on the course's seams, and when step credit helps.

Three successors of the course's papers, each one function at a seam the course already has (`course_lib.algos`):

- **GraphGPO** (arXiv 2605.26684, from GiGPO's authors) merges a group's episodes into one graph of states and
  rewards a step by the shortest distance to success from where it led, so progress inside a failed episode is
  credited. On chapter 07's grid (`key_door`, step mode, its base and budget) the graph is exact: anchors are the
  full-view observations. omega = GiGPO's gamma (0.95), so that only the return differs between the two.
- **Tree-GRPO** (arXiv 2509.21240) grows trees of whole turns and adds a leaf's z-score within its tree to its
  z-score within its prompt. On chapter 08's search task (`two_hop_qa`) it runs over chapter 08's tree sampler with
  branches at random tool responses (ARPO's rule with beta 0: a fixed probability, not entropy) at about a quarter
  of GRPO's rollout budget, the paper's headline; chains at that budget are the control.
- **IGPO** (arXiv 2510.14967) rewards each tool call by the rise of the policy's own probability of the gold
  answer after it, against groups whose outcomes are all equal. Same task and budget as GRPO.

`run(seed)` trains every arm from the committed bases of chapters 07 and 08 (`python -m course_lib.data build ch07
ch08`) and measures the mechanism checks on the bases' batches. `--sweep` runs the controlled study of when step
credit helps (`SWEEP`, pre-registered in docs/experiments/ch17-what-came-next.md): on chapter 07's task, the share of
a group's episodes whose states can be matched, the discount and the horizon, with GRPO, GiGPO and GraphGPO.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from course_lib import course_config
from course_lib.algos.gigpo import GiGPOConfig, gigpo_advantages
from course_lib.algos.graphgpo import GraphGPOConfig, graphgpo_advantages
from course_lib.algos.step_rows import episode_rows
from course_lib.chapters import skeleton
from course_lib.course import chance, leakage, recorded
from course_lib.course.claims import (
    Claim,
    ClaimSpec,
    Setting,
    at_least,
    effect_at_least,
    evaluate_all,
    hypothesis,
    positive_effects,
)
from course_lib.diagnostics.stats import interval
from course_lib.engine.rollout import RolloutEngine, collate
from course_lib.engine.tree_rollout import TreeConfig, sample_trees
from course_lib.envs.key_door import ACTIONS, KeyDoorEnv, expert_action
from course_lib.rl import seams
from course_lib.rl.info_gain import gold_mean_logprobs, gold_tokens, prefix_lengths
from course_lib.rl.train import GRPOConfig, train_grpo
from course_lib.tasks import bases, key_door_grid, two_hop_search

PREREGISTRATION = "docs/experiments/ch17-what-came-next.md"


@dataclass
class Chapter17Config:
    """Everything chapter 17 varies, with the cpu preset's values as defaults."""

    grid: key_door_grid.KeyDoorConfig = field(default_factory=lambda: key_door_grid.preset("cpu"))
    """Chapter 07's setting (task, base, budget): GRPO, GiGPO and GraphGPO train in it."""
    search: two_hop_search.SearchConfig = field(default_factory=lambda: two_hop_search.preset("cpu"))
    """Chapter 08's setting (task, base, budget of 8 trajectories per question): GRPO, Tree-GRPO and IGPO."""
    omega: float = 0.95
    """GraphGPO's omega, set to GiGPO's gamma so that the two differ only in their step return (the recipe's: 0.1
    on ALFWorld, 0.2 on WebShop, 0.8 on Sokoban)."""
    tree_leaves: int = 3
    """Tree-GRPO's leaves per question: one chain and its branches."""
    tree_chains: int = 1
    """Tree-GRPO's chains (trees) per question, M."""
    tree_branch_probability: float = 0.5
    """Probability that a chain forks after a tool response (random expansion: the entropy does not enter)."""
    quarter_chains: int = 2
    """Chains per question of the control at a quarter of GRPO's budget (2 of 8)."""
    identity_iterations: int = 3
    """Iterations of the exact check that Tree-GRPO over unbranched chains trains as GRPO does."""
    budget_questions: int = 64
    """Training questions sampled once by each sampler from the base to measure policy tokens (the budget)."""


def preset(scale: str | None = None) -> Chapter17Config:
    """The chapter's configuration for `COURSE_SCALE` (`cpu` or `gpu`): chapters 07's and 08's presets."""
    return Chapter17Config(grid=key_door_grid.preset(scale), search=two_hop_search.preset(scale))


# Chapter 07's task: GRPO, GiGPO, GraphGPO ---------------------------------------------------------------------------
def grid_arm(config: Chapter17Config, arm: str) -> GRPOConfig:
    """`grpo`, `gigpo` (chapter 07's arms) or `graphgpo` (GiGPO's configuration with the graph's step return)."""
    grpo = config.grid.grpo
    if arm == "graphgpo":
        return dataclasses.replace(grpo, advantage="graphgpo", graphgpo=like_gigpo(grpo.gigpo, config.omega))
    return dataclasses.replace(grpo, advantage=arm)


def like_gigpo(gigpo: GiGPOConfig, omega: float) -> GraphGPOConfig:
    """GraphGPO's settings matched to GiGPO's: omega in place of gamma, the same step weight and episode baseline,
    so that the two differ only in their step return."""
    return GraphGPOConfig(omega=omega, step_weight=gigpo.step_weight, episode_baseline=gigpo.episode_baseline)


GRID_ARMS = ("grpo", "gigpo", "graphgpo")


def step_table(model, tokenizer, config: Chapter17Config, seed: int) -> dict[str, list]:
    """One training-shaped batch of the grid played by `model` (4 tasks x 8 episodes, step mode, observation
    anchors), as GiGPO's six columns."""
    g, grpo = config.grid, config.grid.grpo
    factory = key_door_grid.EnvFactory("train", g)
    made = [factory() for _ in range(grpo.prompts_per_iteration * grpo.group_size)]
    task_seeds = [30_000_000 + seed * 1_000 + p for p in range(grpo.prompts_per_iteration)]
    engine = RolloutEngine(model, tokenizer, g.sampling)
    generator = course_config.seed_everything(seed + 5)
    rows = seams.independent_groups(engine, made, task_seeds, grpo, generator).rows
    return seams.step_columns(collate(rows, tokenizer.pad_token_id))


def demonstrated_table(config: Chapter17Config, seed: int, noise: float = 0.3) -> dict[str, list]:
    """A batch of the same shape played by the demonstrators instead of a policy: in each group, half the episodes
    the expert's (shortest plans: a shortest path of any graph of the task's states) and half the noisy expert's
    (`expert_noise` 0.3, the warm start's), as GiGPO's six columns with observation anchors. The identity check
    needs shortest-path successes, which a policy's batch seldom holds (0 to 19 of about 700 steps on the base)."""
    g, grpo = config.grid, config.grid.grpo
    rng = random.Random(seed)
    table: dict[str, list] = {key: [] for key in ("rewards", "valid", "anchors", "group_ids", "traj_ids", "step_index")}
    factory = key_door_grid.EnvFactory("train", g)
    for group in range(grpo.prompts_per_iteration):
        task = 60_000_000 + seed * 1_000 + group
        for member in range(grpo.group_size):
            env = factory()
            observation, _ = env.reset(seed=task)
            step = 0
            while not env.done:
                noisy = member >= grpo.group_size // 2 and rng.random() < noise
                action = rng.choice(ACTIONS) if noisy else expert_action(env)
                table["anchors"].append(observation)
                observation, reward, _, _, info = env.step(action)
                table["rewards"].append(float(reward))
                table["valid"].append(bool(info.get("valid", True)))
                table["group_ids"].append(group)
                table["traj_ids"].append(group * grpo.group_size + member)
                table["step_index"].append(step)
                step += 1
    return table


def graph_numbers(table: Mapping[str, list], omega: float, invalid_penalty: float) -> dict[str, float]:
    """On one batch: the share of steps of failed episodes that brought the agent closer to success in their group's
    graph (the paper's 22% on ALFWorld), the share of successful episodes' steps that did not (its 65.3%), and the
    identity behind "GraphGPO reduces to GiGPO": on every step of a successful episode that is a shortest path of its
    group's graph (as many steps as its start state's distance), GraphGPO's step return equals GiGPO's discounted
    return with gamma = omega (the largest gap, and how many steps it was checked on); where episodes merge or loop,
    the two differ (the share of steps whose step advantages differ in sign)."""
    graph = graphgpo_advantages(**table, omega=omega, invalid_penalty=invalid_penalty)
    gigpo = gigpo_advantages(**table, gamma=omega, invalid_penalty=invalid_penalty)
    succeeded = [r for r, ok in enumerate(graph.success) if ok]
    closer = [graph.distance_before[r] > graph.distance[r] for r in range(len(graph.success))]
    shortest = []
    for rows in episode_rows(table["traj_ids"], table["step_index"], table["group_ids"]).values():
        if graph.success[rows[0]] and graph.distance_before[rows[0]] == len(rows):
            shortest += rows
    gaps = [abs(graph.graph_returns[r] - gigpo.returns[r]) for r in shortest]
    flipped = [r for r in range(len(closer)) if graph.step[r] * gigpo.step[r] < 0]
    return {
        "failed_progress_share": graph.failed_progress_share,
        "success_idle_share": sum(not closer[r] for r in succeeded) / len(succeeded) if succeeded else float("nan"),
        "identity_steps": float(len(shortest)),
        "identity_gap": max(gaps) if gaps else float("nan"),
        "advantage_sign_flips": len(flipped) / max(len(closer), 1),
    }


def run_grid(seed: int, config: Chapter17Config) -> dict:
    """Chapter 07's base evaluated, its batch's graph numbers, and GRPO, GiGPO and GraphGPO trained from it."""
    g = config.grid
    course_config.seed_everything(seed)
    texts = functools.partial(key_door_grid.demonstration_texts, g.demonstrations, 0, g)
    base, tokenizer, g = bases.base_for(g.base, g, texts, demonstrated=(key_door_grid.ENV_NAME, g.env_name))
    config = dataclasses.replace(config, grid=g)
    out: dict = {"base": key_door_grid.evaluate(base, tokenizer, g, seed + 1), "histories": {}, "final": {}}
    out["graph"] = graph_numbers(step_table(base, tokenizer, config, seed), config.omega, g.grpo.invalid_penalty)
    identity = graph_numbers(demonstrated_table(config, seed), config.omega, g.grpo.invalid_penalty)
    out["graph"] |= {"identity_steps": identity["identity_steps"], "identity_gap": identity["identity_gap"],
                     "demonstrated_sign_flips": identity["advantage_sign_flips"]}  # fmt: skip
    for arm in GRID_ARMS:
        model = copy.deepcopy(base)
        out["histories"][arm] = key_door_grid.train(model, tokenizer, g, seed, grid_arm(config, arm))
        out["final"][arm] = out["histories"][arm][-1]
    return out


# Chapter 08's task: GRPO, Tree-GRPO, chains at a quarter of the budget, IGPO ---------------------------------------
SEARCH_ARMS = ("grpo", "tree_grpo", "grpo_quarter", "igpo")


def tree_config(config: Chapter17Config) -> TreeConfig:
    """Chapter 08's tree sampler as Tree-GRPO's random expansion: `tree_chains` chains, each forking after a tool
    response with a fixed probability (beta 0: the entropy does not enter)."""
    return TreeConfig(
        global_samples=config.tree_chains, alpha=config.tree_branch_probability, beta=0.0,
        entropy_tokens=config.search.grpo.tree.entropy_tokens,
    )  # fmt: skip


def search_arm(config: Chapter17Config, arm: str) -> GRPOConfig:
    """The loop's configuration of `arm` on chapter 08's task (a key of `SEARCH_ARMS`)."""
    base = dataclasses.replace(config.search.grpo, sampler="groups")
    if arm == "tree_grpo":
        return dataclasses.replace(
            base, sampler="tree", advantage="tree_grpo", group_size=config.tree_leaves, tree=tree_config(config)
        )
    if arm == "grpo_quarter":
        return dataclasses.replace(base, group_size=config.quarter_chains)
    if arm == "igpo":
        return dataclasses.replace(base, sampler="igpo", advantage="igpo")
    if arm != "grpo":
        raise KeyError(f"unknown arm {arm!r}; choose from {SEARCH_ARMS}")
    return base


def train_search(model, tokenizer, config: Chapter17Config, seed: int, grpo: GRPOConfig, evaluate: bool = True):
    """RL with `grpo` on chapter 08's training questions (model trained in place), evaluated on its held-out ones."""
    s = config.search
    measure = (lambda m: two_hop_search.evaluate(m, tokenizer, s, seed + 1)) if evaluate else None
    sampling = dataclasses.replace(s.sampling, snapshot_envs=True)
    return train_grpo(model, tokenizer, lambda: two_hop_search.make_env("train", s), sampling, grpo, seed, measure)


def policy_tokens(model, tokenizer, config: Chapter17Config, seed: int) -> dict[str, float]:
    """The rollout budget each sampler spends on `budget_questions` training questions from `model`: policy tokens
    written (a branch re-uses its source's prefix and pays only for what it samples anew)."""
    s = config.search
    engine = two_hop_search.tree_engine(model, tokenizer, s)
    questions = [40_000_000 + seed * 1_000 + p for p in range(config.budget_questions)]
    out = {}
    for arm in ("grpo", "tree_grpo", "grpo_quarter"):
        grpo = search_arm(config, arm)
        made = [two_hop_search.make_env("train", s) for _ in range(len(questions) * grpo.group_size)]
        generator = torch.Generator().manual_seed(seed + 7)
        if arm == "tree_grpo":
            rows, _ = sample_trees(engine, made, questions, grpo.group_size, grpo.tree, generator)
        else:
            rows = seams.independent_groups(engine, made, questions, grpo, generator).rows
        out[arm] = float(sum(sum(t.loss_mask[t.branch_position or 0 :]) for t in rows))
    return out


def information_numbers(model, tokenizer, config: Chapter17Config, seed: int) -> dict[str, float]:
    """On one training batch of the base (8 questions x 8 episodes): the share of groups whose outcomes are all
    equal (GRPO's advantage is 0 on every token there), the share in which IGPO's turn advantages are all 0, and
    the telescoping check: each episode's gains sum to p_last - p_0, with p_0 and p_last recomputed one sequence at a
    time (not in the batched pass the gains came from): the largest gap."""
    s, grpo = config.search, search_arm(config, "igpo")
    made = [two_hop_search.make_env("train", s) for _ in range(grpo.prompts_per_iteration * grpo.group_size)]
    questions = [50_000_000 + seed * 1_000 + p for p in range(grpo.prompts_per_iteration)]
    engine = RolloutEngine(model, tokenizer, s.sampling)
    generator = course_config.seed_everything(seed + 9)
    rollouts = seams.information_gain_groups(engine, made, questions, grpo, generator)
    batch = collate(rollouts.rows, tokenizer.pad_token_id, rollouts.step_extras)
    _, stats = seams.igpo(batch, grpo)
    gaps = []
    for t in rollouts.rows[:16]:
        if len(t.rewards) < 2:
            continue
        gains = [info["turn_reward"] for info in t.infos[: len(t.rewards) - 1]]
        lengths = prefix_lengths(t)
        first, last = lengths[0], lengths[-1]
        gold = gold_tokens(tokenizer, grpo.igpo.answer_template, str(t.infos[0][grpo.igpo.answer_key]))
        alone = [gold_mean_logprobs(model, tokenizer, [t.token_ids[:n]], [gold])[0] for n in (first, last)]
        gaps.append(abs(sum(gains) - (math.exp(alone[1]) - math.exp(alone[0]))))
    return {
        "equal_outcome_share": rollouts.stats["igpo_equal_outcome_share"],
        "igpo_silent_share": stats["igpo_silent_group_share"],
        "telescoping_gap": max(gaps) if gaps else float("nan"),
        "telescoping_episodes": float(len(gaps)),
        "mean_gain": rollouts.stats["igpo_mean_gain"],
    }


def chain_identity(base, tokenizer, config: Chapter17Config, seed: int) -> float:
    """1.0 when Tree-GRPO's estimator over unbranched chains (GRPO's sampler) trains, for `identity_iterations`, to
    records identical to GRPO's, record for record (times aside): a one-leaf tree adds nothing; else 0.0."""
    histories = []
    for advantage in ("grpo", "tree_grpo"):
        grpo = dataclasses.replace(search_arm(config, "grpo"), advantage=advantage,
                                   iterations=config.identity_iterations)  # fmt: skip
        course_config.seed_everything(seed)
        history = train_search(copy.deepcopy(base), tokenizer, config, seed, grpo, evaluate=False)
        histories.append([{k: v for k, v in r.items() if not k.startswith(("time_", "tree_"))} for r in history])
    return float(histories[0] == histories[1])


def run_search(seed: int, config: Chapter17Config) -> dict:
    """Chapter 08's base evaluated, its budgets and IGPO numbers, the chain identity, every `SEARCH_ARMS` arm."""
    s = config.search
    course_config.seed_everything(seed)
    texts = functools.partial(two_hop_search.demonstration_texts, s.demonstrations, 0, s)
    base, tokenizer, s = bases.base_for(s.base, s, texts, demonstrated=(two_hop_search.ENV_NAME, s.env_name))
    config = dataclasses.replace(config, search=s)
    out: dict = {"base": two_hop_search.evaluate(base, tokenizer, s, seed + 1), "histories": {}, "final": {}}
    out["budget"] = policy_tokens(base, tokenizer, config, seed)
    out["information"] = information_numbers(base, tokenizer, config, seed)
    out["chain_identity"] = chain_identity(base, tokenizer, config, seed)
    for arm in SEARCH_ARMS:
        model = copy.deepcopy(base)
        course_config.seed_everything(seed)
        out["histories"][arm] = train_search(model, tokenizer, config, seed, search_arm(config, arm))
        out["final"][arm] = out["histories"][arm][-1]
    return out


def run(seed: int, config: Chapter17Config | None = None) -> dict:
    """The whole chapter for one seed: chapter 07's task (`run_grid`), then chapter 08's (`run_search`)."""
    config = config or preset()
    start = time.perf_counter()
    results = {"grid": run_grid(seed, config), "search": run_search(seed, config)}
    results["minutes"] = (time.perf_counter() - start) / 60
    return results


def claim_numbers(results: Mapping) -> dict[str, float]:
    """Every number chapter 17's claims use, flat."""
    g, s = results["grid"], results["search"]
    grid_final = {arm: g["final"][arm]["eval_success"] for arm in GRID_ARMS}
    search_final = {arm: s["final"][arm]["eval_success"] for arm in SEARCH_ARMS}
    budget = s["budget"]
    return {
        "grid_base_success": g["base"]["success"],
        **{f"grid_{arm}_success": value for arm, value in grid_final.items()},
        "graphgpo_minus_gigpo": grid_final["graphgpo"] - grid_final["gigpo"],
        "graphgpo_minus_grpo": grid_final["graphgpo"] - grid_final["grpo"],
        "gigpo_minus_grpo": grid_final["gigpo"] - grid_final["grpo"],
        **{f"graph_{key}": value for key, value in g["graph"].items()},
        "search_base_success": s["base"]["success"],
        **{f"search_{arm}_success": value for arm, value in search_final.items()},
        "tree_minus_grpo": search_final["tree_grpo"] - search_final["grpo"],
        "tree_minus_quarter_chains": search_final["tree_grpo"] - search_final["grpo_quarter"],
        "igpo_minus_grpo": search_final["igpo"] - search_final["grpo"],
        "tree_budget_share": budget["tree_grpo"] / budget["grpo"],
        "quarter_budget_share": budget["grpo_quarter"] / budget["grpo"],
        **{f"info_{key}": value for key, value in s["information"].items()},
        "chain_identity": s["chain_identity"],
    }


CLAIMS: tuple[ClaimSpec, ...] = (
    positive_effects(
        "C17.1",
        "GraphGPO (omega = gamma = 0.95) ends above GiGPO in held-out success on chapter 07's task at the same budget, "
        "paired over seeds",
        "GraphGPO over GiGPO: +1.8 (ALFWorld, Qwen2.5-1.5B), +4.8 (WebShop), +10.1 (Sokoban 6x6, Qwen2.5-VL-3B)",
        "graphgpo_minus_gigpo",
        required=False,
    ),
    effect_at_least(
        "C17.2",
        "GraphGPO ends at least 5 points above GRPO in held-out success at the same budget (C7.1's margin), on "
        "average over paired seeds (95% t-interval above 0)",
        "GraphGPO over GRPO: +14.9 (ALFWorld, Qwen2.5-1.5B), +7.3 (WebShop), +19.9 (Sokoban)",
        "graphgpo_minus_grpo",
        0.05,
        required=False,
    ),
    ClaimSpec(
        "C17.3",
        "at least 10% of the steps of the base's failed episodes bring it closer to success in its group's graph",
        "GraphGPO, Fig. 1: 22.0% of the steps of ALFWorld's failed trajectories make progress",
        "graph_failed_progress_share",
        lambda n: at_least(n["graph_failed_progress_share"], 0.10),
        required=False,
        kind="design",  # a property of the grid the chapter built (0.34 to 0.60 on every seed), not of a method
    ),
    ClaimSpec(
        "C17.4",
        "on every step of a successful episode that is a shortest path of its group's graph, GraphGPO's step return "
        "equals GiGPO's discounted return (omega = gamma; gap under 1e-12; on a batch of expert and noisy-expert "
        "episodes, where such successes exist)",
        "GraphGPO's R^G = r omega^d(s') and GiGPO's gamma^(T-1-t) r agree where no episode merges into or loops",
        "graph_identity_gap",
        lambda n: n["graph_identity_steps"] >= 1 and n["graph_identity_gap"] < 1e-12,
        kind="mechanism",
        chance=chance.exact("an identity of the two returns on the steps it applies to, computed exactly"),
    ),
    positive_effects(
        "C17.5",
        "Tree-GRPO at about a quarter of GRPO's rollout budget (one chain of 8 and two branches per question) ends "
        "above GRPO at the full budget in held-out success on chapter 08's task, paired over seeds",
        "Tree-GRPO: better than chain-based GRPO with a quarter of the rollout budget (Qwen2.5-3B, multi-hop QA)",
        "tree_minus_grpo",
        required=False,
    ),
    positive_effects(
        "C17.6",
        "at the same quarter budget, Tree-GRPO ends above independent chains (2 per question) in held-out success, "
        "paired over seeds",
        "Tree-GRPO at about 2 trajectories per prompt: 31.6 against chain GRPO's 14.9 (multi-hop average, 3B)",
        "tree_minus_quarter_chains",
        required=False,
    ),
    ClaimSpec(
        "C17.7",
        "the tree's rollout budget, measured in policy tokens written on the base, is at most 0.3 of GRPO's",
        "Tree-GRPO counts a branch as the part it samples anew (about half a trajectory)",
        "tree_budget_share",
        lambda n: n["tree_budget_share"] <= 0.3,
        kind="design",
    ),
    ClaimSpec(
        "C17.8",
        "over unbranched chains Tree-GRPO's estimator trains exactly as GRPO's (identical records for 3 iterations)",
        "Tree-GRPO: a one-leaf tree's intra-tree term is 0, so chains give GRPO's advantage (the official code adds "
        "the raw reward there instead)",
        "chain_identity",
        lambda n: n["chain_identity"] == 1.0,
        kind="mechanism",
        chance=chance.exact("the two runs are compared record for record, with the same seeds and samples"),
    ),
    positive_effects(
        "C17.9",
        "IGPO ends above GRPO in held-out success on chapter 08's task at the same budget, paired over seeds",
        "IGPO: 60.2 average F1 over seven QA benchmarks against 53.9 for the best baseline (Qwen2.5-7B)",
        "igpo_minus_grpo",
        required=False,
    ),
    ClaimSpec(
        "C17.10",
        "on the base's batch, fewer of IGPO's groups than GRPO's have no learning signal (every advantage 0)",
        "IGPO: turn rewards give groups whose outcomes are all equal a signal (advantage collapse)",
        "info_igpo_silent_share",
        lambda n: n["info_igpo_silent_share"] < n["info_equal_outcome_share"],
        kind="design",
    ),
    ClaimSpec(
        "C17.11",
        "each episode's information gains sum to p_last - p_0 with both recomputed one sequence at a time (gap under "
        "1e-5): the batched teacher-forced pass reads each context as a single one would",
        "IGPO: IG_t = p_t - p_{t-1}, read from the policy with the gold answer teacher-forced after each turn",
        "info_telescoping_gap",
        lambda n: n["info_telescoping_episodes"] >= 1 and n["info_telescoping_gap"] < 1e-5,
        kind="mechanism",
        chance=chance.exact("an identity up to float rounding between batched and single forward passes"),
    ),
)


def claims(results: Mapping) -> list[Claim]:
    """Chapter 17's claims, evaluated on `claim_numbers(results)`."""
    return evaluate_all(CLAIMS, claim_numbers(results))


CURVE_KEYS = ("success", "eval_success")


def curves(results: Mapping) -> dict[str, list[tuple[float, float]]]:
    histories = {f"grid_{arm}": results["grid"]["histories"][arm] for arm in GRID_ARMS}
    histories |= {f"search_{arm}": results["search"]["histories"][arm] for arm in SEARCH_ARMS}
    return recorded.history_curves(histories, CURVE_KEYS)


def summary_lines(results: Mapping) -> list[str]:
    """What the command line prints for a seed: held-out success per arm, budgets and the graph's numbers."""
    n = claim_numbers(results)
    lines = [f"grid   base {n['grid_base_success']:.3f}  " + "  ".join(
        f"{arm} {n[f'grid_{arm}_success']:.3f}" for arm in GRID_ARMS)]  # fmt: skip
    lines.append(f"search base {n['search_base_success']:.3f}  " + "  ".join(
        f"{arm} {n[f'search_{arm}_success']:.3f}" for arm in SEARCH_ARMS))  # fmt: skip
    lines.append(f"budget share: tree {n['tree_budget_share']:.2f}, quarter chains {n['quarter_budget_share']:.2f}; "
                 f"failed-episode progress {n['graph_failed_progress_share']:.2f}")  # fmt: skip
    return lines


# When does step credit help? --------------------------------------------------------------------------------------
class PartlyMatched(KeyDoorEnv):
    """key_door whose step anchors (the true state) match across a group only in its matched episodes: an unmatched
    episode's anchors carry its environment's index and the step, so no step group or graph node of another episode
    ever holds them. The policy sees the same observations either way: only the credit changes."""

    def __init__(self, matched: bool, index: int, **kwargs):
        super().__init__(**kwargs)
        self.matched, self.index = matched, index

    def anchor(self):
        state = super().anchor()
        return state if self.matched else (state, "unmatched", self.index, self._emitted)


@dataclass(frozen=True)
class Cell:
    """One setting of the sweep: the share of a group's episodes whose states match, the discount (GiGPO's gamma,
    GraphGPO's omega) and the horizon (`max_steps`)."""

    matched: float = 1.0
    gamma: float = 0.95
    horizon: int = 22

    @property
    def name(self) -> str:
        return f"q{self.matched:g}_g{self.gamma:g}_t{self.horizon}"


SWEEP_CELLS = (Cell(0.25), Cell(0.5), Cell(1.0), Cell(1.0, gamma=1.0), Cell(1.0, horizon=30))
"""The pre-registered cells: recurrence 1/4, 1/2 and all at gamma 0.95 and 22 steps; gamma 1; 30 steps."""


class PartlyMatchedFactory:
    """Training environments of one run: environment i of the pool is matched when i mod `group_size` < `matched`
    x `group_size` (the sampler fills each group from consecutive environments, so each group has that share)."""

    def __init__(self, config: key_door_grid.KeyDoorConfig, cell: Cell, group_size: int):
        self.config, self.cell, self.group_size, self.made = config, cell, group_size, 0

    def __call__(self) -> PartlyMatched:
        index, self.made = self.made, self.made + 1
        matched = index % self.group_size < round(self.cell.matched * self.group_size)
        return PartlyMatched(matched, index, split="train", size=self.config.size, max_steps=self.cell.horizon)


def sweep_arm(config: key_door_grid.KeyDoorConfig, method: str, cell: Cell) -> GRPOConfig:
    """`method` (grpo, gigpo, graphgpo) in `cell`: true-state anchors (`PartlyMatched`), the cell's discount; one
    evaluation at the end."""
    if method not in GRID_ARMS:
        raise KeyError(f"unknown method {method!r}; choose from {GRID_ARMS}")
    grpo = config.grpo
    gigpo = dataclasses.replace(grpo.gigpo, gamma=cell.gamma)
    return dataclasses.replace(
        grpo, advantage=method, anchor_source="state", eval_every=grpo.iterations, gigpo=gigpo,
        graphgpo=like_gigpo(gigpo, cell.gamma),
    )  # fmt: skip


def sweep_seed(seed: int, config: Chapter17Config | None = None) -> dict[str, float]:
    """One seed of the sweep: GRPO at each horizon, GiGPO and GraphGPO in every cell of `SWEEP_CELLS`, all from
    chapter 07's base with its budget; held-out success at the cell's horizon, and each method's lead over GRPO."""
    config = config or preset()
    g = config.grid
    texts = functools.partial(key_door_grid.demonstration_texts, g.demonstrations, 0, g)
    base, tokenizer, g = bases.base_for(g.base, g, texts, demonstrated=(key_door_grid.ENV_NAME, g.env_name))
    start = time.perf_counter()
    success: dict[str, float] = {}
    horizons = sorted({cell.horizon for cell in SWEEP_CELLS})
    runs = [("grpo", Cell(1.0, horizon=h)) for h in horizons]
    runs += [(method, cell) for cell in SWEEP_CELLS for method in ("gigpo", "graphgpo")]
    for method, cell in runs:
        at = dataclasses.replace(g, max_steps=cell.horizon)
        grpo = sweep_arm(at, method, cell)
        course_config.seed_everything(seed)
        model = copy.deepcopy(base)
        history = train_grpo(
            model, tokenizer, PartlyMatchedFactory(at, cell, grpo.group_size), at.sampling, grpo, seed,
            evaluate=lambda m, at=at: key_door_grid.evaluate(m, tokenizer, at, seed + 1),
        )  # fmt: skip
        key = f"grpo_t{cell.horizon}" if method == "grpo" else f"{method}_{cell.name}"
        success[key] = history[-1]["eval_success"]
    numbers = {f"{key}_success": value for key, value in success.items()}
    for cell in SWEEP_CELLS:
        for method in ("gigpo", "graphgpo"):
            numbers[f"{method}_lead_{cell.name}"] = success[f"{method}_{cell.name}"] - success[f"grpo_t{cell.horizon}"]
    low, high = SWEEP_CELLS[0].name, SWEEP_CELLS[2].name
    for method in ("gigpo", "graphgpo"):
        numbers[f"{method}_recurrence_effect"] = numbers[f"{method}_lead_{high}"] - numbers[f"{method}_lead_{low}"]
        numbers[f"{method}_behind_at_low"] = -numbers[f"{method}_lead_{low}"]
    numbers["minutes"] = (time.perf_counter() - start) / 60
    return numbers


SWEEP_LABELS = {
    SWEEP_CELLS[0].name: "recurrence 1/4",
    SWEEP_CELLS[1].name: "recurrence 1/2",
    SWEEP_CELLS[2].name: "recurrence 1",
    SWEEP_CELLS[3].name: "gamma 1",
    SWEEP_CELLS[4].name: "30 steps",
}
"""How the figure and the table name each cell (the last two at full recurrence)."""


def sweep_leads(per_seed: Sequence[Mapping[str, float]]) -> dict[str, dict[str, tuple[float, float, float]]]:
    """Method -> cell name -> (mean, low, high): each method's lead over GRPO in each cell, with the 95% t-interval
    over the seeds (paired: the lead is computed within a seed)."""
    return {
        method: {
            cell.name: interval([n[f"{method}_lead_{cell.name}"] for n in per_seed], "t95") for cell in SWEEP_CELLS
        }
        for method in ("gigpo", "graphgpo")
    }


def plot_sweep(per_seed: Sequence[Mapping[str, float]], ax=None, title: str = ""):
    """Each method's lead over GRPO (held-out success, paired by seed) in each cell, the mean with its 95%
    t-interval, the seeds as dots, and 0: where step credit helps and where it does not."""
    import matplotlib.pyplot as plt

    ax = ax if ax is not None else plt.subplots(figsize=(7.5, 3.6))[1]
    leads = sweep_leads(per_seed)
    for offset, (method, colour) in zip((-0.12, 0.12), (("gigpo", "tab:blue"), ("graphgpo", "tab:orange"))):
        for x, cell in enumerate(SWEEP_CELLS):
            mean, low, high = leads[method][cell.name]
            label = {"gigpo": "GiGPO - GRPO", "graphgpo": "GraphGPO - GRPO"}[method] if x == 0 else None
            ax.errorbar(x + offset, mean, yerr=[[mean - low], [high - mean]], fmt="o", color=colour, capsize=4,
                        label=label)  # fmt: skip
            dots = [n[f"{method}_lead_{cell.name}"] for n in per_seed]
            ax.scatter([x + offset + 0.05] * len(dots), dots, s=8, color=colour, alpha=0.35)
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.axvline(2.5, color="grey", linewidth=0.6, linestyle=":")
    ax.set_xticks(range(len(SWEEP_CELLS)), [SWEEP_LABELS[cell.name] for cell in SWEEP_CELLS])
    ax.set_ylabel("held-out success minus GRPO's")
    ax.set_title(title or f"lead over GRPO, paired by seed ({len(per_seed)} seeds), 95% t-intervals")
    ax.legend(loc="best", fontsize=8)
    return ax


SWEEP_RESULTS = "ch17_sweep"
SWEEP_CLAIMS: tuple[ClaimSpec, ...] = (
    hypothesis(
        "C17.12d",
        "GiGPO's lead over GRPO is larger when every episode's states can be matched than when a quarter can "
        "(gamma 0.95, 22 steps), paired over seeds",
        "GiGPO: step credit needs repeated states (with none it is GRPO); the counter-evidence (arXiv 2605.27881) "
        "finds outcome-only rewards competitive in most settings",
        "gigpo_recurrence_effect",
    ),
    hypothesis(
        "C17.13d",
        "GraphGPO's lead over GRPO is larger when every episode's states can be matched than when a quarter can, "
        "paired over seeds",
        "GraphGPO: a graph needs merged states to carry progress across episodes",
        "graphgpo_recurrence_effect",
    ),
    hypothesis(
        "C17.14d",
        "the sign changes: where only a quarter of the episodes' states can be matched, GiGPO ends below GRPO "
        "(step credit from groups of one or two over-corrects), paired over seeds",
        "What matters in training search agents (arXiv 2605.27881): process-level credit can over-correct; "
        "outcome-only rewards are competitive or better in most settings",
        "gigpo_behind_at_low",
    ),
)
SETTINGS = (Setting(SWEEP_RESULTS, SWEEP_CLAIMS, PREREGISTRATION),)


def sweep(seeds: Sequence[int], record: bool = False, pilot: bool = False) -> list[dict[str, float]]:
    """The pre-registered sweep on `seeds` (`sweep_seed`), printing each seed's leads; with `record`, into
    `results/ch17_sweep.json` (`results/ch17_sweep_pilot.json` for `pilot` seeds)."""
    if record:
        recorded.begin()
    out = []
    for seed in seeds:
        numbers = sweep_seed(seed)
        out.append(numbers)
        leads = "  ".join(f"{cell.name}: gigpo {numbers[f'gigpo_lead_{cell.name}']:+.3f} graphgpo "
                          f"{numbers[f'graphgpo_lead_{cell.name}']:+.3f}" for cell in SWEEP_CELLS)  # fmt: skip
        print(f"seed {seed} ({numbers['minutes']:.1f} min): {leads}", flush=True)
        if record:
            name = "ch17_sweep_pilot" if pilot else SWEEP_RESULTS
            recorded.record(name, seed, SWEEP_CLAIMS, numbers, numbers["minutes"])
    return out


# Leakage audit ----------------------------------------------------------------------------------------------------
def held_out_audit() -> list[leakage.SplitAudit]:
    """Both held-out splits (chapter 07's grid tasks, chapter 08's questions) against everything this chapter's
    seeds trained on or played (its runs, pilots and sweep) and the bases' demonstrations; the grid's also by the
    observation of every state a held-out task can show."""
    config = preset("cpu")
    g, s, seeds = config.grid, config.search, leakage.run_seeds("ch17")
    grid_keys = leakage.problem_keys(key_door_grid.EnvFactory("test", g), key_door_grid.test_seeds(g.eval_tasks, g))
    draws = leakage.grpo_task_seeds(g.grpo.iterations, g.grpo.prompts_per_iteration, seeds)
    draws += [base + seed * 1_000 + p for base in (30_000_000, 60_000_000) for seed in seeds
              for p in range(g.grpo.prompts_per_iteration)]  # fmt: skip
    training = set(leakage.problem_keys(key_door_grid.EnvFactory("train", g), draws))
    demo_seed = leakage.base_seed(key_door_grid.BASE_NAME)
    demo_tasks = set(leakage.problem_keys(key_door_grid.EnvFactory("train", g),
                                          key_door_grid.demonstration_seeds(g.demonstrations, demo_seed)))  # fmt: skip
    overlaps = leakage.problem_overlaps(grid_keys, training, demo_tasks)
    overlaps += leakage.state_overlaps(
        leakage.task_observations(set(grid_keys), g.size),
        leakage.task_observations(training, g.size),
        leakage.prompts_of(key_door_grid.demonstration_texts(g.demonstrations, demo_seed, g)),
    )
    search_keys = leakage.problem_keys(
        lambda: two_hop_search.make_env("test", s), two_hop_search.test_seeds(s.eval_tasks)
    )
    asked = leakage.grpo_task_seeds(s.grpo.iterations, s.grpo.prompts_per_iteration, seeds)
    asked += [base + seed * 1_000 + p for base in (40_000_000, 50_000_000) for seed in seeds
              for p in range(config.budget_questions)]  # fmt: skip
    questions = leakage.problem_keys(lambda: two_hop_search.make_env("train", s), asked)
    demos = leakage.problem_keys(
        lambda: two_hop_search.make_env("train", s),
        two_hop_search.demonstration_seeds(s.demonstrations, leakage.base_seed(two_hop_search.BASE_NAME)),
    )
    return [
        leakage.split_audit("ch17", "test (grid)", grid_keys, overlaps),
        leakage.split_audit("ch17", "test (search)", search_keys, leakage.two_hop_overlaps(search_keys, questions,
                                                                                            demos)),
    ]  # fmt: skip


# Pre-registration: pilot seeds, power, deciding seeds ---------------------------------------------------------------
PILOT_RESULTS, SWEEP_PILOT_RESULTS = "ch17_pilot", "ch17_sweep_pilot"
SCALED_EFFECTS: dict[str, float] = {
    "graphgpo_minus_gigpo": 0.03,
    "graphgpo_minus_grpo": 0.08,
    "tree_minus_grpo": 0.03,
    "tree_minus_quarter_chains": 0.08,
    "igpo_minus_grpo": 0.05,
    "gigpo_recurrence_effect": 0.06,
    "graphgpo_recurrence_effect": 0.06,
    "gigpo_behind_at_low": 0.03,
}
"""The effect each paired difference is powered for (docs/experiments/ch17-what-came-next.md says why)."""
MIN_SEEDS, MAX_SEEDS = 6, 10
"""Deciding seeds: at least 6; at most 10, what two cores allow in this chapter's time (the power reached then is
printed)."""


def plan(pilot: str, specs: Sequence[ClaimSpec]) -> tuple[int, list[str]]:
    """Deciding seeds for the claims `specs` from the pilot file `pilot`: for each paired difference, its pilot
    spread and the seeds for 80% power at its scaled effect (`designs.seeds_needed`), and the largest of them,
    clipped to [`MIN_SEEDS`, `MAX_SEEDS`]; with one line per difference."""
    from course_lib.course import designs

    seeds, lines = MIN_SEEDS, []
    for spec in specs:
        for key, margin in spec.effects:
            pilot_seeds, values = designs.differences(pilot, key)
            effect = SCALED_EFFECTS[key]
            p = designs.plan_from(pilot_seeds, values, effect, margin, MIN_SEEDS, MAX_SEEDS)
            seeds = max(seeds, p.seeds)
            capped = f", capped at {MAX_SEEDS} (power {p.power:.2f})" if p.uncapped > p.seeds else ""
            lines.append(f"{spec.id} {key}: pilot mean {p.pilot_mean:+.3f}, sd {p.sd:.3f} over {len(values)} seeds; "
                         f"80% power at {effect:+.3f} needs {p.uncapped} seeds{capped}")  # fmt: skip
    return seeds, lines


def pilot(seeds: Sequence[int], record: bool = False) -> None:
    """The chapter's pilot seeds (`run`), recorded into `results/ch17_pilot.json` with `record`."""
    if record:
        recorded.begin()
    for seed in seeds:
        results = run(seed)
        print(f"seed {seed} ({results['minutes']:.1f} min)")
        for line in summary_lines(results):
            print(f"  {line}", flush=True)
        if record:
            recorded.record(PILOT_RESULTS, seed, CLAIMS, claim_numbers(results), results["minutes"])


def _options(parser) -> None:
    parser.add_argument(
        "--sweep", action="store_true",
        help=f"run the pre-registered sweep of when step credit helps (--record: results/{SWEEP_RESULTS}.json)",
    )  # fmt: skip
    parser.add_argument("--pilot", action="store_true", help="run pilot seeds (with --sweep, the sweep's)")
    parser.add_argument("--plan", action="store_true", help="print the deciding seeds the recorded pilots ask for")


def _configure(
    chapter: skeleton.Chapter, args: argparse.Namespace, parser: argparse.ArgumentParser
) -> skeleton.Chapter | None:
    """`--plan`, `--sweep` and `--pilot` do their own work (None); else the chapter."""
    if args.plan:
        for name, specs in ((PILOT_RESULTS, CLAIMS), (SWEEP_PILOT_RESULTS, SWEEP_CLAIMS)):
            seeds, lines = plan(name, [spec for spec in specs if spec.effects])
            print(f"{name}: {seeds} deciding seeds (0-{seeds - 1})", *(f"  {line}" for line in lines), sep="\n")
        return None
    if args.sweep:
        sweep(args.seeds, record=args.record, pilot=args.pilot)
        return None
    if args.pilot:
        pilot(args.seeds, record=args.record)
        return None
    return chapter


CHAPTER = skeleton.Chapter(
    "ch17", "Chapter 17, what came next: GraphGPO, Tree-GRPO, IGPO", run, claim_numbers, CLAIMS, curves=curves,
    report=summary_lines, audit=held_out_audit, options=_options, configure=_configure,
    validate=functools.partial(bases.own_environments_only, chapter="chapter 17", instead="fork chapter 07 or 08",
                               owns={"grid": key_door_grid.ENV_NAME, "search": two_hop_search.ENV_NAME}),
)  # fmt: skip


if __name__ == "__main__":
    CHAPTER.main()

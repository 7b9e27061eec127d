"""Chapter 08: ARPO, tree rollouts that branch where entropy rises after a tool response (arXiv 2507.19849).

A tiny policy answers two-hop questions with a search tool (`tasks.two_hop_search`, whose docstring describes the
task and its base): hop 1 finds the role holder of a company, hop 2 that person's city, and half the questions are
ambiguous, with two candidates after an imprecise first search. ARPO measures the policy's token entropy right after
each tool response and branches the rollout where it rose above the entropy at the start of the answer; here the
rise is planted where it should appear, after the two-candidate responses.

What RL can learn here is the precise query. Matching the city within a two-candidate response and
copying that candidate's two-word name, the other way out, does not generalise at this scale: the
tiny model memorises the training companies and people instead (it binds a held-out given name to its
family name 0.36 of the time, a training one 0.95). Copying words from the question and copying a
single listed name do generalise, so a policy that learns always to search precisely can solve
held-out ambiguous questions too (the base solved all 21 it searched precisely over three
evaluation seeds; bases demonstrated with more precise episodes, 0.93-0.98).

`run(seed)` measures the four claims: the base's entropies (C8.1); both samplers on the base at the same budget,
groups with varying rewards and tokens written (C8.2); GRPO and ARPO trained from the base (C8.3), with three more
tree arms (`Chapter08Config.ablations`); and the soft/hard credit identity on a real tree (C8.4, `tree_credit`).
On the recorded seeds GRPO ends above ARPO, and `--global-samples` runs the pre-registered test of the chapter's
explanation (`docs/experiments/ch08-global-samples.md`): the tree samples the first turn, where the generalising
decision is made, only in its N global samples, while its branches re-sample the candidate choice, which does not
generalise. The notebook reads both records.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from course_lib import course_config
from course_lib.algos.grpo import group_advantages
from course_lib.chapters import command, skeleton
from course_lib.course import chance, leakage, recorded
from course_lib.course.claims import Claim, ClaimSpec, at_least, evaluate_all, positive_effects
from course_lib.diagnostics.stats import interval
from course_lib.diagnostics.tree_credit import prefix_gradient_gap, shared_prefixes, token_weights
from course_lib.engine.rollout import Trajectory
from course_lib.engine.tree_rollout import TreeConfig, TreeNode, TreeStats, sample_trees
from course_lib.rl import seams
from course_lib.rl.train import GRPOConfig, train_grpo
from course_lib.tasks import bases, two_hop_search
from course_lib.tasks.two_hop_search import (
    BASE_NAME,
    ENV_NAME,
    SearchConfig,
    build_base,
    demonstration_seeds,
    demonstration_texts,
    evaluate,
    make_env,
    test_seeds,
    tree_engine,
)


@dataclass
class Chapter08Config(SearchConfig):
    """Everything chapter 08 varies: the search task's settings (`tasks.two_hop_search.SearchConfig`) and the
    chapter's own measurements and tree arms, with the cpu preset's values as defaults."""

    variance_prompts: int = 64
    """Training questions sampled once by each sampler from the base, for C8.2."""
    ablations: dict[str, TreeConfig] = field(
        default_factory=lambda: {
            "arpo_n2": TreeConfig(global_samples=2, alpha=0.5, beta=0.2, entropy_tokens=4),
            "arpo_n6": TreeConfig(global_samples=6, alpha=0.5, beta=0.2, entropy_tokens=4),
            "arpo_entropy": TreeConfig(global_samples=4, alpha=0.0, beta=10.0, entropy_tokens=4),
        }
    )
    """Further tree arms, each ARPO's run with another `TreeConfig` (pre-registered in
    `docs/experiments/ch08-global-samples.md`): N = 2 and N = 6 global samples test the chapter's explanation of
    C8.3 (the tree samples the first turn, where the generalising decision is made, only N times); alpha 0 and
    beta 10 branch on the entropy rise alone (on seed 0's base tree: mean branch probability 0.38 after a
    two-candidate response, 0.02 after one), an exploration without a prediction."""


def preset(scale: str | None = None) -> Chapter08Config:
    """The chapter's configuration for `COURSE_SCALE` (`cpu` or `gpu`)."""
    return two_hop_search.preset(scale, Chapter08Config)


# Warm start -------------------------------------------------------------------------------------
build_data = bases.base_data(BASE_NAME, build_base)
"""`python -m course_lib.data build ch08 [--scale gpu]`: the warm-started base."""


# Measurements -----------------------------------------------------------------------------------
TRACE_KINDS = ("first action", "after one candidate", "after two candidates")
"""The turns `entropy_traces` averages: the first action, and the action after a first search's response that
listed one candidate or two (a response that found no one is left out)."""


def entropy_traces(trajectories: Sequence[Trajectory], tokenizer, positions: int = 6) -> dict[str, np.ndarray]:
    """Mean normalised entropy at each of the first `positions` policy tokens of a turn, per kind of turn
    (`TRACE_KINDS`): `{kind: [positions]}` (NaN where no trajectory reached that position), plus `count <kind>`, the
    number of turns behind each kind. The per-token picture behind `entropy_after_tool`'s first-k means."""
    log_v = np.log(len(tokenizer))
    turns: dict[str, list[list[float]]] = {kind: [] for kind in TRACE_KINDS}
    for t in trajectories:
        searches = [step for step, info in enumerate(t.infos) if "tool_result" in info]
        chosen = [(0, TRACE_KINDS[0])]
        kind = response_kind(t.infos[searches[0]]["tool_result"]) if searches else "no result"
        if kind != "no result":
            chosen.append((searches[0] + 1, f"after {kind}"))
        for turn, kind in chosen:
            values = [e for e, tid, m in zip(t.entropies, t.turn_ids, t.loss_mask, strict=True) if tid == turn and m]
            if values:
                turns[kind].append(values[:positions])
    out: dict[str, np.ndarray] = {}
    for kind, rows in turns.items():
        trace = np.full(positions, np.nan)
        for position in range(positions):
            at = [row[position] for row in rows if len(row) > position]
            if at:
                trace[position] = np.mean(at) / log_v
        out[kind], out[f"count {kind}"] = trace, np.array(len(rows))
    return out


def plot_entropy_traces(traces: Mapping[str, np.ndarray], ax=None, title: str = ""):
    """The traces of `entropy_traces`, one line per kind of turn, against the token's position in its turn."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(5, 3.4))[1]
    for kind in TRACE_KINDS:
        ax.plot(
            range(1, len(traces[kind]) + 1), traces[kind], marker="o", label=f"{kind} ({int(traces[f'count {kind}'])})"
        )
    ax.set(xlabel="policy token of the turn", ylabel="entropy / log |V|", title=title)
    ax.legend(fontsize=8)
    return ax


# Experiments ------------------------------------------------------------------------------------
ARMS: dict[str, str] = {"grpo": "groups", "arpo": "tree"}
"""The two RL runs and their samplers: GRPO's independent groups and ARPO's entropy-guided tree, at the same
budget (`group_size` trajectories per question)."""


def arm_names(config: Chapter08Config) -> list[str]:
    """Every RL arm `run` trains: `ARMS`, then the tree ablations of `config.ablations`."""
    return [*ARMS, *config.ablations]


def arm_config(config: Chapter08Config, arm: str) -> GRPOConfig:
    """The loop's configuration of `arm` (a key of `ARMS` or of `config.ablations`)."""
    if arm in config.ablations:
        return dataclasses.replace(config.grpo, sampler="tree", tree=config.ablations[arm])
    return dataclasses.replace(config.grpo, sampler=ARMS[arm])


VARIANCE_SEED = 20_000_000
"""C8.2's training questions for run seed s are `VARIANCE_SEED + 1000 s + p` (the leakage audit reads them)."""


def sample_both(model, tokenizer, config: Chapter08Config, seed: int) -> dict:
    """C8.2 on `model`: `variance_prompts` training questions, each sampled by both samplers at the same budget
    (`group_size` trajectories); per sampler the share of groups whose rewards vary, the success rate and the
    policy tokens written (a branch re-uses its source's prefix); likewise for each tree of `config.ablations`
    (keyed by its arm; exploratory). Also both samples themselves: `tree` (ARPO's trajectories and `TreeStats`, for
    C8.4 and the drawing) and `groups` (the independent trajectories)."""
    grpo, engine = config.grpo, tree_engine(model, tokenizer, config)
    task_seeds = [VARIANCE_SEED + seed * 1_000 + p for p in range(config.variance_prompts)]
    trees = {"arpo": grpo.tree, **config.ablations}
    out: dict = {}
    for arm in [*ARMS, *config.ablations]:
        made = [make_env("train", config) for _ in range(len(task_seeds) * grpo.group_size)]
        generator = torch.Generator().manual_seed(seed + 3)
        if arm in trees:
            rows, tree = sample_trees(engine, made, task_seeds, grpo.group_size, trees[arm], generator)
            if arm == "arpo":
                out["tree"] = {"trajectories": rows, "stats": tree}
            counts = tree.counts(grpo.group_size, len(task_seeds))
        else:
            rows, counts = seams.independent_groups(engine, made, task_seeds, grpo, generator).rows, {}
            out["groups"] = {"trajectories": rows}
        groups = [[t.total_reward for t in rows if t.group_id == g] for g in range(len(task_seeds))]
        written = sum(sum(t.loss_mask[t.branch_position or 0 :]) for t in rows)
        out[arm] = {
            "varied_share": float(np.mean([max(g) > min(g) for g in groups])),
            "success": float(np.mean([t.success for t in rows])),
            "policy_tokens": float(written),
            **counts,
        }
    return out


def response_kind(response: str) -> str:
    """`two candidates`, `one candidate` or `no result`: what a search's response listed."""
    return "no result" if "no result" in response else "two candidates" if " ; " in response else "one candidate"


def node_kind(trajectories: Sequence[Trajectory], node: TreeNode) -> str:
    """`response_kind` of the tool response a branch point follows."""
    return response_kind(trajectories[node.index].infos[node.step - 1].get("tool_result", ""))


def branch_decisions(trajectories: Sequence[Trajectory], stats: TreeStats) -> dict[str, float]:
    """The tree's branch points by the tool response they follow (`response_kind`): per kind, `points_<kind>` (how
    many the sampler considered), `probability_<kind>` (the mean branch probability it computed there) and
    `branched_<kind>` (the share it branched at, NaN with no points). Kinds are written with underscores."""
    by_kind: dict[str, list] = {"one_candidate": [], "two_candidates": [], "no_result": []}
    for node in stats.nodes:
        by_kind[node_kind(trajectories, node).replace(" ", "_")].append(node)
    out = {}
    for kind, nodes in by_kind.items():
        out[f"points_{kind}"] = float(len(nodes))
        out[f"probability_{kind}"] = float(np.mean([n.probability for n in nodes])) if nodes else float("nan")
        out[f"branched_{kind}"] = float(np.mean([n.branched for n in nodes])) if nodes else float("nan")
    return out


def showcase_group(trajectories: Sequence[Trajectory], stats: TreeStats) -> int:
    """A group worth drawing: one whose rewards vary, with the most branches after a two-candidate response (then
    the most branches of any kind; ties to the lowest group id). The first group if none has varying rewards."""

    def score(group: int) -> tuple:
        members = [t for t in trajectories if t.group_id == group]
        varied = len({t.total_reward for t in members}) > 1
        branches = [n for n in stats.nodes if n.branched and trajectories[n.index].group_id == group]
        after_two = sum(node_kind(trajectories, n) == "two candidates" for n in branches)
        return (varied, after_two, len(branches), -group)

    return max(sorted({t.group_id for t in trajectories}), key=score)


def credit_check(trajectories: Sequence[Trajectory], stats: TreeStats, model) -> dict[str, float]:
    """C8.4 on a real tree: the largest set of leaves that share a prefix and whose GRPO advantages (within their
    question's group) do not average to 0 (`tree_credit.shared_prefixes`), and the relative gap between soft and
    hard credit on that prefix, under token-mean (the loop's aggregation: exact) and under per-sequence means
    (exact only if the leaves have equal lengths). NaN if no such set exists (nothing branched)."""
    chosen_set = None
    for leaves, cut in shared_prefixes(trajectories, stats):
        group = [i for i, t in enumerate(trajectories) if t.group_id == trajectories[leaves[0]].group_id]
        rewards = torch.tensor([trajectories[i].total_reward for i in group])
        advantage = dict(zip(group, group_advantages(rewards, torch.zeros(len(group), dtype=torch.long)).tolist()))
        if abs(sum(advantage[i] for i in leaves)) > 1e-6:
            chosen_set = leaves, cut, group, [advantage[i] for i in leaves]
            break
    if chosen_set is None:
        return {"credit_gap_token_mean": float("nan"), "credit_gap_seq_mean": float("nan"), "credit_leaves": 0.0}
    leaves, cut, group, chosen = chosen_set
    batch = [trajectories[i] for i in group]
    local = [group.index(i) for i in leaves]
    numbers = {"credit_leaves": float(len(leaves)), "credit_mean_advantage": float(np.mean(chosen))}
    for name, aggregation in (("token_mean", "token-mean"), ("seq_mean", "seq-mean-token-mean")):
        weights = token_weights(batch, local, aggregation)
        gap = prefix_gradient_gap(model, batch, local, cut, chosen, weights)
        numbers[f"credit_gap_{name}"] = gap["relative_gap"]
    numbers["credit_equal_lengths"] = gap["equal_lengths"]
    return numbers


def train(model, tokenizer, config: Chapter08Config, seed: int, arm: str) -> list[dict]:
    """RL with `arm`'s sampler from `model` (changed in place)."""
    return train_grpo(
        model, tokenizer, lambda: make_env("train", config), dataclasses.replace(config.sampling, snapshot_envs=True),
        arm_config(config, arm), seed, evaluate=lambda m: evaluate(m, tokenizer, config, seed + 1),
    )  # fmt: skip


def run(seed: int, config: Chapter08Config | None = None) -> dict:
    """The whole chapter for one seed: the base's entropies (C8.1), both samplers on the base (C8.2), the
    soft/hard credit check on the base's tree (C8.4), then GRPO, ARPO and the tree ablations from the base at the
    same budget (C8.3)."""
    config = on_environment(config or preset())
    start = time.perf_counter()
    course_config.seed_everything(seed)
    texts = functools.partial(demonstration_texts, config.demonstrations, 0, config)
    base, tokenizer, config = bases.base_for(config.base, config, texts, demonstrated=(ENV_NAME, config.env_name))
    results: dict = {"base": evaluate(base, tokenizer, config, seed + 1), "histories": {}, "final": {}}
    results["samplers"] = sample_both(base, tokenizer, config, seed)
    tree = results["samplers"]["tree"]
    results["credit"] = credit_check(tree["trajectories"], tree["stats"], base)
    for arm in arm_names(config):
        model = copy.deepcopy(base)
        course_config.seed_everything(seed)
        results["histories"][arm] = train(model, tokenizer, config, seed, arm)
        results["final"][arm] = results["histories"][arm][-1]
    results["minutes"] = (time.perf_counter() - start) / 60
    results["base_model"], results["tokenizer"] = base, tokenizer
    results["not_applicable"] = not_applicable(config)
    return results


def on_environment(config: Chapter08Config, say: bool = True) -> Chapter08Config:
    """`config` with the stop tags of the environment it runs on (`bases.on_environment`): itself on two_hop_qa; a
    fork still stopping at two_hop_qa's tags takes its environment's, or is refused naming what to set."""
    return bases.on_environment(
        config, ENV_NAME, Chapter08Config().sampling, lambda: make_env("train", config), "chapter 08", say
    )


def not_applicable(config: Chapter08Config) -> dict[str, str]:
    """The claims that cannot apply to `config`'s setting, with the reason: C8.1 compares entropies after
    ambiguous and unambiguous tool responses, which only two_hop_qa plants."""
    if config.env_name == ENV_NAME:
        return {}
    return {"C8.1": f"it reads the ambiguity two_hop_qa plants; {config.env_name} has none"}


# Claims -----------------------------------------------------------------------------------------
def claim_numbers(results: Mapping) -> dict[str, float]:
    """Every number chapter 08's claims use, flat."""
    base, samplers, final = results["base"], results["samplers"], results["final"]
    numbers = {
        "base_success": base["success"],
        "base_success_ambiguous": base["success_ambiguous"],
        "base_success_unambiguous": base["success_unambiguous"],
        "base_precise": base["precise_first_search"],
        "entropy_initial": base["entropy_initial"],
        "entropy_after_ambiguous": base["entropy_after_tool_1_ambiguous"],
        "entropy_after_unambiguous": base["entropy_after_tool_1_unambiguous"],
        "entropy_after_second": base["entropy_after_tool_2"],
    }
    numbers["entropy_rise_ambiguous"] = numbers["entropy_after_ambiguous"] - numbers["entropy_initial"]
    numbers["entropy_ambiguous_minus_unambiguous"] = (
        numbers["entropy_after_ambiguous"] - numbers["entropy_after_unambiguous"]
    )
    for arm in results["histories"]:  # every trained arm's sampler was also run on the base
        numbers[f"{arm}_varied_share"] = samplers[arm]["varied_share"]
        numbers[f"{arm}_policy_tokens"] = samplers[arm]["policy_tokens"]
    for arm, history in results["histories"].items():
        numbers[f"{arm}_success"] = final[arm]["eval_success"]
        numbers[f"{arm}_tool_calls_per_solved"] = final[arm]["eval_tool_calls_per_solved"]
        numbers[f"{arm}_success_ambiguous"] = final[arm]["eval_success_ambiguous"]
        numbers[f"{arm}_precise"] = final[arm]["eval_precise_first_search"]
        shares = [row["tree_branch_share"] for row in history if "tree_branch_share" in row]
        if shares:
            numbers[f"{arm}_train_branch_share"] = float(np.mean(shares))
    numbers["tree_branch_share"] = samplers["arpo"]["tree_branch_share"]
    tree = samplers["tree"]
    decisions = branch_decisions(tree["trajectories"], tree["stats"])
    for kind in ("one_candidate", "two_candidates"):
        numbers[f"tree_probability_{kind}"] = decisions[f"probability_{kind}"]
        numbers[f"tree_points_{kind}"] = decisions[f"points_{kind}"]
    numbers["tree_refill_share"] = samplers["arpo"]["tree_refill_share"]
    numbers["varied_share_tree_minus_independent"] = numbers["arpo_varied_share"] - numbers["grpo_varied_share"]
    numbers["arpo_minus_grpo"] = numbers["arpo_success"] - numbers["grpo_success"]
    numbers["tool_calls_per_solved_arpo_minus_grpo"] = (
        numbers["arpo_tool_calls_per_solved"] - numbers["grpo_tool_calls_per_solved"]
    )
    numbers |= {key: value for key, value in results["credit"].items()}
    return numbers


CLAIMS: tuple[ClaimSpec, ...] = (
    ClaimSpec(
        "C8.1",
        "right after an ambiguous tool response (two candidates; ambiguity planted by the task) the base's "
        "normalised token entropy (a share of log |V|) is at least 1 percentage point above its initial entropy and "
        "above that after an unambiguous response",
        "ARPO: entropy rises in the first 10-50 tokens after each tool call (Qwen2.5-3B/7B, search and Python)",
        "entropy_rise_ambiguous",
        lambda n: (
            at_least(n["entropy_rise_ambiguous"], 0.01) and at_least(n["entropy_ambiguous_minus_unambiguous"], 0.01)
        ),
        kind="design",
        induced=True,
    ),
    positive_effects(
        "C8.2",
        "at the same budget of trajectories per question, the entropy-guided tree gives more groups whose rewards "
        "vary than independent sampling (the base, the same training questions)",
        "ARPO: branching at high-entropy tool steps explores more diverse behaviour per rollout budget",
        "varied_share_tree_minus_independent",
        required=False,
    ),
    ClaimSpec(
        "C8.3",
        "ARPO ends with held-out success at most 2 points below GRPO's, using no more tool calls per solved question",
        "ARPO: higher accuracy than GRPO on 13 benchmarks with about half the tool calls (Qwen3-14B)",
        "arpo_minus_grpo",
        lambda n: at_least(n["arpo_minus_grpo"], -0.02) and n["tool_calls_per_solved_arpo_minus_grpo"] <= 0,
        required=False,
    ),
    ClaimSpec(
        "C8.4",
        "with no clipping, GRPO on the tree's leaves (soft credit) puts the same gradient on a shared prefix as one "
        "copy with the leaves' mean advantage times their number (hard credit): relative gap under 1e-5 with "
        "token-mean aggregation",
        "ARPO: soft advantage estimation on shared tokens equals hard (averaged) estimation",
        "credit_gap_token_mean",
        lambda n: n["credit_gap_token_mean"] < 1e-5,
        kind="mechanism",
        chance=chance.exact("a gradient identity on a constructed tree of seven leaves, compared to float rounding"),
    ),
)


def claims(results: Mapping) -> list[Claim]:
    """Chapter 08's claims, evaluated on `claim_numbers(results)`."""
    return evaluate_all(CLAIMS, claim_numbers(results), not_applicable=results.get("not_applicable"))


CURVE_KEYS = ("success", "eval_success", "eval_success_ambiguous", "tool_calls", "entropy", "tree_branch_share")
"""History keys whose curves `--record` stores, per arm: `<arm>/<key>`."""


def curves(results: Mapping) -> dict[str, list[tuple[float, float]]]:
    return recorded.history_curves(results["histories"], CURVE_KEYS)


def summary_lines(results: Mapping) -> list[str]:
    """What the command line prints for a seed, before its claims."""
    base, samplers = results["base"], results["samplers"]
    if "C8.1" in (results.get("not_applicable") or {}):  # a fork: no planted ambiguity to split the numbers by
        lines = [f"base success {base['success']:.3f}; entropy initial {base['entropy_initial']:.3f}"]
        lines += sampler_lines(samplers)
        lines += [f"{arm} after RL: success {final['eval_success']:.3f}" for arm, final in results["final"].items()]
        return [*lines, credit_line(results["credit"])]
    lines = [
        f"base success {base['success']:.3f} (ambiguous {base['success_ambiguous']:.3f}, unambiguous "
        f"{base['success_unambiguous']:.3f}); entropy initial {base['entropy_initial']:.3f}, after an ambiguous "
        f"response {base['entropy_after_tool_1_ambiguous']:.3f}, an unambiguous one "
        f"{base['entropy_after_tool_1_unambiguous']:.3f}"
    ]
    lines += sampler_lines(samplers)
    for arm, final in results["final"].items():
        lines.append(f"{arm} after RL: success {final['eval_success']:.3f} (ambiguous "
                     f"{final['eval_success_ambiguous']:.3f}), tool calls per solved "
                     f"{final['eval_tool_calls_per_solved']:.2f}, precise first search "
                     f"{final['eval_precise_first_search']:.3f}")  # fmt: skip
    return [*lines, credit_line(results["credit"])]


def sampler_lines(samplers: Mapping) -> list[str]:
    """C8.2's numbers (`sample_both`'s output) as printed lines."""
    lines = []
    for arm, s in samplers.items():
        if "varied_share" not in s:
            continue
        tree = (
            f", branches {s['tree_branch_share']:.3f}, refills {s['tree_refill_share']:.3f}"
            if "tree_branch_share" in s
            else ""
        )
        lines.append(f"{arm:12} sampler on the base: varied groups {s['varied_share']:.3f}, success "
                     f"{s['success']:.3f}, policy tokens {s['policy_tokens']:.0f}{tree}")  # fmt: skip
    return lines


def credit_line(credit: Mapping) -> str:
    """C8.4's check (`credit_check`'s output) as one line."""
    return (
        f"soft vs hard credit on {credit['credit_leaves']:.0f} leaves (equal lengths: "
        f"{bool(credit.get('credit_equal_lengths', 0.0))}): gap {credit['credit_gap_token_mean']:.1e} (token-mean), "
        f"{credit['credit_gap_seq_mean']:.1e} (per-sequence means)"
    )


def decision_lines(decisions: Mapping[str, float]) -> list[str]:
    """`branch_decisions`' output as printed lines, one per kind of response with branch points."""
    return [
        f"after {kind.replace('_', ' ')}: {decisions[f'points_{kind}']:.0f} branch points, mean branch probability "
        f"{decisions[f'probability_{kind}']:.3f}, branched at {decisions[f'branched_{kind}']:.2f}"
        for kind in ("one_candidate", "two_candidates", "no_result")
        if decisions[f"points_{kind}"]
    ]


def lead_lines(seed_sets: Mapping[str, Sequence[Mapping[str, float]]]) -> list[str]:
    """ARPO's final success minus GRPO's per set of seeds (`label -> per-seed claim numbers`): the mean, its 95%
    t-interval and how often ARPO was ahead."""
    lines = []
    for label, seeds in seed_sets.items():
        leads = [n["arpo_success"] - n["grpo_success"] for n in seeds]
        mean, low, high = interval(leads, "t95")
        lines.append(f"{label:12} ARPO - GRPO {mean:+.3f}, 95% interval [{low:+.3f}, {high:+.3f}], ARPO ahead on "
                     f"{sum(lead > 0 for lead in leads)} of {len(leads)}")  # fmt: skip
    return lines


def plot_precise_vs_success(seeds: Sequence[Mapping[str, float]], arms: Sequence[str], ax=None, title: str = ""):
    """Each run's held-out share of precise first searches against its held-out success, one colour per arm."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(5, 3.4))[1]
    for arm in arms:
        ax.scatter([n[f"{arm}_precise"] for n in seeds], [n[f"{arm}_success"] for n in seeds], s=14, label=arm)
    ax.set(xlabel="held-out share of precise first searches", ylabel="held-out success", title=title)
    ax.legend(fontsize=7)
    return ax


# Leakage audit ----------------------------------------------------------------------------------
def held_out_audit() -> list[leakage.SplitAudit]:
    """The test split against GRPO's draws, C8.2's variance questions and the demonstrations, as questions and by
    their hop lookups."""
    config = preset("cpu")
    split_env = functools.partial(make_env, config=config)
    draws = leakage.grpo_draws("ch08", config.grpo)
    seeds = leakage.run_seeds("ch08")
    draws += [VARIANCE_SEED + seed * 1_000 + p for seed in seeds for p in range(config.variance_prompts)]
    demo_seeds = demonstration_seeds(config.demonstrations, leakage.base_seed(BASE_NAME))
    demos = leakage.problem_keys(split_env, demo_seeds)
    held_out = test_seeds(config.eval_tasks)
    return leakage.held_out_split("ch08", split_env, held_out, draws, demos, leakage.two_hop_overlaps)


# The pre-registered test of the explanation of C8.3 ---------------------------------------------
GLOBAL_SAMPLES_RESULTS = "ch08_global_samples"
"""`results/ch08_global_samples.json`: `run` on fresh seeds (3-10), for `docs/experiments/ch08-global-samples.md`."""
GLOBAL_SAMPLES_ARMS: dict[int, str] = {2: "arpo_n2", 4: "arpo", 6: "arpo_n6", 8: "grpo"}
"""Global samples N at M = 8 -> the arm that has them (the tree with N = M is GRPO)."""


def global_samples_trend(per_seed: Sequence[Mapping[str, float]]) -> dict[str, object]:
    """The pre-registered verdict from per-seed `claim_numbers`: the mean final held-out success and precise
    first-search share per N (`GLOBAL_SAMPLES_ARMS`), whether each strictly increases with N (P1, P2), whether
    the weak order N=2 < N=4 < N=8 holds for both, and the verdict: `supported`, `partly supported` or `not
    supported`."""
    if not per_seed:
        raise ValueError("no seeds to pool")
    means = {
        kind: [float(np.mean([n[f"{arm}_{kind}"] for n in per_seed])) for arm in GLOBAL_SAMPLES_ARMS.values()]
        for kind in ("success", "precise")
    }

    def increasing(values: Sequence[float]) -> bool:
        return all(a < b for a, b in zip(values, values[1:]))

    strict = {kind: increasing(values) for kind, values in means.items()}
    weak = all(increasing([values[0], values[1], values[3]]) for values in means.values())
    verdict = "supported" if all(strict.values()) else "partly supported" if weak else "not supported"
    return {
        "seeds": len(per_seed), "n": list(GLOBAL_SAMPLES_ARMS), "success": means["success"],
        "precise": means["precise"], "p1": strict["success"], "p2": strict["precise"], "weak": weak,
        "verdict": verdict,
    }  # fmt: skip


def trend_lines(trend: Mapping[str, object]) -> list[str]:
    """The trend of `global_samples_trend` as printed lines."""
    header = "".join(f"{f'N={n}':>8}" for n in trend["n"])
    return [
        f"{'global samples (M=8)':28}{header}",
        f"{'held-out success':28}" + "".join(f"{v:8.3f}" for v in trend["success"]),
        f"{'precise first search':28}" + "".join(f"{v:8.3f}" for v in trend["precise"]),
        f"over {trend['seeds']} seeds: P1 (success rises with N) {trend['p1']}, P2 (precise rises with N) "
        f"{trend['p2']}, weak order {trend['weak']}: {trend['verdict']}",
    ]


def global_samples(seeds: Sequence[int], record: bool = False) -> dict[str, object]:
    """The pre-registered experiment: `run` on `seeds`, print each seed's arms, then the trend over them (with
    `record`, over every seed recorded in `results/ch08_global_samples.json`, after writing these to it)."""
    experiment = dataclasses.replace(CHAPTER, id=GLOBAL_SAMPLES_RESULTS)
    per_seed = [claim_numbers(results) for results in skeleton.run_seeds(experiment, seeds, record, print_claims=False)]
    if record:
        per_seed = recorded.seed_numbers(recorded.load(GLOBAL_SAMPLES_RESULTS))
    trend = global_samples_trend(per_seed)
    for line in trend_lines(trend):
        print(line)
    return trend


def _options(parser) -> None:
    parser.add_argument(
        "--global-samples", action="store_true", dest="global_samples",
        help="run the pre-registered global-samples experiment instead (--record writes "
        f"results/{GLOBAL_SAMPLES_RESULTS}.json)",
    )  # fmt: skip


CHAPTER = skeleton.Chapter(
    "ch08", "Chapter 08, ARPO", run, claim_numbers, CLAIMS, curves=curves, report=summary_lines, checkpoint=True,
    validate=on_environment, audit=held_out_audit, task=two_hop_search.tool_task, options=_options,
    configure=command.designed_experiment("global_samples", global_samples),
    arms=skeleton.arm_table(arm_config, arm_names),
)  # fmt: skip


if __name__ == "__main__":
    CHAPTER.main()

"""Chapter 11: AEPO, entropy balanced in the rollout and in the update (arXiv 2510.14545).

Chapter 08's two-hop search task and base: ARPO's tree branches after a two-candidate tool response, where the
base's entropy rises. AEPO keeps that tree and changes four things (`algos.aepo`); this chapter measures each.

- **Consecutive-branch penalty** (C11.1). `branch_concentration` samples the same training questions with ARPO's
  tree and with AEPO's (rule `aepo`: a prompt that gained a rollout in each of its last l rounds branches with
  probability clip(1 - alpha / (1 - 0.05 l) + beta dH, 0, 1)), at the released 7B script's budget (16 per
  question, 8 global samples), and reports the share of a question's branches that descend from its three
  most-branched global samples, beside the share if each branch's root were drawn uniformly.
- **Entropy-balanced clip** (C11.2a, C11.2b). `gradient_check`: on a batch the base sampled and the policy AEPO trained,
  grad(balanced loss) - grad(hard loss) equals the gradient of -(1 + eps_high) A log pi over the positive-advantage
  tokens above the bound, exactly (float64). Then two runs that differ only in the clip (`aepo_hard`, `aepo`):
  how far the policy's entropy drifts from the base's during training.
- **AEPO against ARPO and GRPO** (C11.3): held-out pass@1 and pass@k at the same budget (8 trajectories per
  question, 30 iterations, 4 updates per batch so that the clip acts at all; at 1 update every ratio is 1).
- **Entropy pre-monitoring** (C11.4): `budget_split` on two kinds of task. Tool kind: chapter 08's base on its
  ambiguous questions (uncertain after a two-candidate response). Root kind: a variant whose uncertainty sits at
  the root, `two_hop_qa` with no ambiguous question and a base warm-started by a demonstrator that searches
  precisely or imprecisely at random (`ROOT_BASE_NAME`, `python -m course_lib.data build ch11`): its first
  search is a coin flip and every response lists one candidate.

Which AEPO this is: the released code's variant (`aepo`: sg-clip, the penalty, a fixed split; the released
scripts switch pre-monitoring off, and their entropy-aware advantage never runs because the actor computes no
entropy at an entropy coefficient of 0), plus the paper's entropy-aware advantage as its own arm (`aepo_adv`), and
pre-monitoring measured as a sampler in C11.4. Pre-monitoring is the code's: m = int(k sigmoid(0.5 (H_root -
H_tool))) + 1 on entropies divided by log |V| and summed over a turn's first 20 tokens. At that scale
0.5 (H_root - H_tool) is tiny, so m is k / 2 + 1 when the root is the more uncertain and k / 2 otherwise: only the
sign of the difference moves the split, by one sample (printed beside the same rule on entropies in nats).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from course_lib import course_config, data
from course_lib.algos import aepo
from course_lib.chapters import skeleton
from course_lib.course import chance, leakage, recorded
from course_lib.course.claims import Claim, ClaimSpec, at_least, evaluate_all
from course_lib.engine.rollout import RolloutEngine, collate
from course_lib.engine.tree_rollout import pre_monitor, sample_trees
from course_lib.rl import seams
from course_lib.rl.train import GRPOConfig, evaluate_policy, train_grpo
from course_lib.tasks import bases, two_hop_search

BASE_NAME = two_hop_search.BASE_NAME
ROOT_BASE_NAME = "ch11_root_base"
CONCENTRATION_SEED = 30_000_000
"""C11.1's training questions for run seed s are `CONCENTRATION_SEED + 1000 s + p`."""
SPLIT_SEED = 31_000_000
"""C11.4's training questions for run seed s are `SPLIT_SEED + 1000 s + p` (each kind its own environment)."""
CHECK_SEED = 32_000_000
"""C11.2a's gradient-check batch for run seed s: training questions `CHECK_SEED + 1000 s + p`."""


@dataclass
class Chapter11Config:
    """Everything chapter 11 varies, with the cpu preset's values as defaults."""

    task: two_hop_search.SearchConfig = field(default_factory=two_hop_search.SearchConfig)
    """Chapter 08's task, base recipe, sampling and held-out evaluation (all 258 test questions)."""
    root_precise_share: float = 0.5
    """The root variant's demonstrator: probability of a precise first search (else imprecise; with no ambiguous
    question both list the one right candidate, so only the first search's form is uncertain)."""
    grpo: GRPOConfig = field(
        default_factory=lambda: dataclasses.replace(two_hop_search.SearchConfig().grpo, updates_per_batch=4)
    )
    """Chapter 08's RL budget (8 questions x 8 trajectories, 30 iterations, N = 4 global samples), but 4 updates
    per batch: at one update the ratio is 1 and no clip ever acts (the released scripts take 8 mini-batch steps
    per batch)."""
    pass_k: int = 4
    """pass@k on the held-out questions at the end: k episodes per question (the paper reports pass@5)."""
    sampler_budget: int = 16
    """C11.1 and C11.4: trajectories per question (the released 7B script's k = 16)."""
    sampler_globals: int = 8
    """C11.1: global samples of the fixed split (the 7B script's 8)."""
    sampler_prompts: int = 64
    """C11.1 and C11.4: training questions sampled per measurement."""
    check_prompts: int = 64
    """C11.2a's gradient check: questions in its batch (x `group_size` trajectories). At 8 questions one to five
    policy tokens rose above the clip bound, so a batch with none (a vacuous check) was a real chance; 64 make the
    count about eight times larger (C11.2a's `chance` computes it from the recorded counts)."""


def preset(scale: str | None = None) -> Chapter11Config:
    """The chapter's configuration for `COURSE_SCALE` (`cpu` or `gpu`)."""
    cpu = Chapter11Config()
    # `task` names chapter 08's gpu recipe: the base this chapter loads under gpu (`ch08_base`) is that one.
    gpu = Chapter11Config(
        task=two_hop_search.preset("gpu"),
        grpo=dataclasses.replace(cpu.grpo, iterations=100, prompts_per_iteration=16, group_size=16),
        sampler_prompts=256,
    )
    return course_config.by_scale(cpu, gpu, scale)


def make_env(split: str = "train", config: Chapter11Config | None = None, ambiguous_share: float | None = None):
    """Chapter 08's environment; `ambiguous_share` 1 gives the tool kind's questions, 0 the root variant's."""
    task = (config or Chapter11Config()).task
    if ambiguous_share is not None:
        task = dataclasses.replace(task, ambiguous_share=ambiguous_share)
    return two_hop_search.make_env(split, task)


# The root variant's base --------------------------------------------------------------------------
def root_task(config: Chapter11Config, scale: str = "cpu") -> two_hop_search.SearchConfig:
    """Chapter 08's base recipe for the root variant: no ambiguous question, precise first search at random."""
    return dataclasses.replace(
        two_hop_search.preset(scale), ambiguous_share=0.0, precise_share=config.root_precise_share
    )


def build_data(data_dir: Path, seed: int = 0, progress: bool = True, scale: str = "cpu") -> None:
    """`python -m course_lib.data build ch11 [--scale gpu]`: the root variant's base of `preset(scale)` (chapter
    08's base is chapter 08's build)."""

    def build(out_dir, seed: int = 0, scale: str = "cpu", progress: bool = True):
        return two_hop_search.build_base(out_dir, seed, scale, progress, root_task(preset(scale), scale))

    bases.write_base(ROOT_BASE_NAME, build, data_dir, seed, progress, scale)


# Measurements -----------------------------------------------------------------------------------
test_seeds = two_hop_search.test_seeds


def evaluate(model, tokenizer, config: Chapter11Config, seed: int) -> dict[str, float]:
    """Chapter 08's held-out evaluation (258 questions, one episode each)."""
    return two_hop_search.evaluate(model, tokenizer, config.task, seed)


def pass_at_k(model, tokenizer, config: Chapter11Config, seed: int, ambiguous_share: float | None = None) -> dict:
    """Held-out pass@1 (mean success over all k episodes per question) and pass@k (share of questions solved in at
    least one of k), `config.pass_k` episodes per distinct question at temperature 1; also the share of episodes
    whose first search was precise."""
    seeds = test_seeds(config.task.eval_tasks)
    k = config.pass_k
    _, trajectories = evaluate_policy(
        model, tokenizer, lambda: make_env("test", config, ambiguous_share), seeds * k, config.task.sampling, seed
    )
    solved = np.array([t.success for t in trajectories], dtype=float).reshape(k, len(seeds))
    return {
        "pass_1": float(solved.mean()),
        f"pass_{k}": float(solved.max(axis=0).mean()),
        "precise": float(np.mean([two_hop_search.first_search_precise(t) for t in trajectories])),
    }


def tree_engine(model, tokenizer, config: Chapter11Config) -> RolloutEngine:
    return RolloutEngine(model, tokenizer, dataclasses.replace(config.task.sampling, snapshot_envs=True))


def branch_concentration(model, tokenizer, config: Chapter11Config, seed: int) -> dict[str, dict[str, float]]:
    """C11.1 on `model`: the same training questions sampled by ARPO's tree and by AEPO's (penalty, fixed split),
    `sampler_budget` per question with `sampler_globals` global samples, the same random stream. Per rule: the top-3
    branch share (`algos.aepo.top_branch_share`), its uniform reference (`algos.aepo.uniform_top_share`), branches
    per question, the share of the budget spent on branches, and the mean length of a branch chain (branches of
    branches)."""
    engine = tree_engine(model, tokenizer, config)
    seeds = [CONCENTRATION_SEED + 1_000 * seed + p for p in range(config.sampler_prompts)]
    budget = config.sampler_budget
    out = {}
    for rule in ("arpo", "aepo"):
        tree = dataclasses.replace(config.grpo.tree, global_samples=config.sampler_globals, rule=rule)
        made = [make_env("train", config) for _ in range(len(seeds) * budget)]
        rows, stats = sample_trees(engine, made, seeds, budget, tree, torch.Generator().manual_seed(seed + 5))
        groups = range(len(seeds))
        branches = [sum(p is not None and g == q for p, g in zip(stats.parents, stats.group_ids)) for q in groups]
        roots = [sum(p is None and g == q for p, g in zip(stats.parents, stats.group_ids)) for q in groups]
        depth = [_chain_depth(stats.parents, i) for i, p in enumerate(stats.parents) if p is not None]
        counts = stats.counts(budget, len(seeds))
        out[rule] = {
            "top3_share": counts["tree_top3_branch_share"],
            "uniform_top3_share": aepo.uniform_top_share(branches, roots, 3, seed),
            "branches_per_question": float(np.mean(branches)),
            "branch_share": counts["tree_branch_share"],
            "chain_depth": float(np.mean(depth)) if depth else float("nan"),
            "success": float(np.mean([t.success for t in rows])),
        }
    return out


def _chain_depth(parents: Sequence[int | None], index: int) -> int:
    """How many forks lie between trajectory `index` and its global sample (1 for a direct branch)."""
    depth = 0
    while parents[index] is not None:
        index, depth = parents[index], depth + 1
    return depth


def gradient_check(model, base, tokenizer, config: Chapter11Config, seed: int) -> dict[str, float]:
    """C11.2a's exact check on real policies: a batch `base` sampled (its log-probs are the old ones), the current
    policy `model`, GRPO advantages, float64. Returns the relative gap between grad(balanced) - grad(hard) and the
    gradient of the kept term -(1 + eps_high) A log pi (token-mean, over the positive-advantage tokens above the
    bound), the share of policy tokens above the bound, and the kept gradient's norm relative to the hard clip's."""
    grpo = config.grpo
    engine = RolloutEngine(base, tokenizer, config.task.sampling)
    seeds = [CHECK_SEED + 1_000 * seed + p for p in range(config.check_prompts)]
    made = [make_env("train", config) for _ in range(len(seeds) * grpo.group_size)]
    rows = seams.independent_groups(engine, made, seeds, grpo, torch.Generator().manual_seed(seed + 7)).rows
    batch = collate(rows, tokenizer.pad_token_id)
    advantages, _ = seams.grpo(batch, grpo)
    current = copy.deepcopy(model).double()
    logits = current(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]
    chosen = torch.log_softmax(logits, dim=-1).gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)
    logprobs = torch.cat([torch.zeros_like(chosen[:, :1]), chosen], dim=1)
    old, mask = batch.old_logprobs.double(), batch.loss_mask.double()
    advantages = advantages.double()
    balanced = aepo.policy_loss(logprobs, old, advantages, mask, grpo.clip_low, grpo.clip_high)
    losses, above = aepo.balanced_clip_losses(logprobs, old, advantages, grpo.clip_low, grpo.clip_high, balanced=False)
    hard = (losses * mask).sum() / mask.sum()
    weights = advantages[:, None] if advantages.dim() == 1 else advantages
    kept = (-(1 + grpo.clip_high) * weights * logprobs * (above & mask.bool())).sum() / mask.sum()
    parameters = [p for p in current.parameters() if p.requires_grad]

    def gradient(loss):
        return torch.cat([g.flatten() for g in torch.autograd.grad(loss, parameters, retain_graph=True)])

    difference, expected, hard_gradient = gradient(balanced) - gradient(hard), gradient(kept), gradient(hard)
    return {
        "gradient_gap": float((difference - expected).norm() / expected.norm().clamp_min(1e-300)),
        "value_gap": abs(float(balanced.detach() - hard.detach())),
        "above_share": float((above & mask.bool()).sum() / mask.sum()),
        "tokens_above": float((above & mask.bool()).sum()),
        "kept_over_hard": float(expected.norm() / hard_gradient.norm().clamp_min(1e-300)),
    }


def budget_split(config: Chapter11Config, seed: int) -> dict[str, dict[str, float]]:
    """C11.4: entropy pre-monitoring on the two kinds of task, `sampler_prompts` training questions each, a budget
    of `sampler_budget`. Per kind: the mean pre-monitored H_root and H_tool on the code's scale (each token's
    entropy divided by log |V|, summed over a turn's first 20 tokens), the global samples m the AEPO sampler chose
    (`globals`) and the share of the budget it then spent on branches (`branch_share`); the same two with entropies
    in nats (`globals_nats`, `branch_share_nats`), the scale the code does not use."""
    kinds = {"tool": (BASE_NAME, 1.0), "root": (ROOT_BASE_NAME, 0.0)}
    seeds = [SPLIT_SEED + 1_000 * seed + p for p in range(config.sampler_prompts)]
    budget = config.sampler_budget
    out = {}
    for kind, (name, share) in kinds.items():
        model, tokenizer = data.load_base(name, course_config.device())
        engine = tree_engine(model, tokenizer, config)
        row: dict[str, float] = {}
        for units, suffix in (("normalised", ""), ("nats", "_nats")):
            tree = dataclasses.replace(config.grpo.tree, rule="aepo", dynamic_globals=True, monitor_units=units)
            made = [make_env("train", config, share) for _ in range(len(seeds) * budget)]
            generator = torch.Generator().manual_seed(seed + 11)
            if units == "normalised":
                entropies = pre_monitor(engine, made, seeds, budget, tree, generator)
                row["h_root"] = float(np.mean([root for root, _ in entropies]))
                row["h_tool"] = float(np.mean([tool for _, tool in entropies]))
            _, stats = sample_trees(engine, made, seeds, budget, tree, generator)
            counts = stats.counts(budget, len(seeds))
            row[f"globals{suffix}"] = counts["tree_global_samples"]
            row[f"branch_share{suffix}"] = counts["tree_branch_share"]
        out[kind] = row
    return out


def entropy_drift(history: Sequence[Mapping[str, float]]) -> float:
    """Mean |H_t - H_0| / H_0 over a run's iterations t >= 1: how far the policy's sampling entropy (mean over the
    batch's policy tokens) moved from the first batch's, relative to it."""
    values = [row["entropy"] for row in history if "entropy" in row]
    return float(np.mean([abs(h - values[0]) for h in values[1:]]) / values[0])


# Experiments ------------------------------------------------------------------------------------
ARMS: dict[str, dict] = {
    "grpo": {"sampler": "groups"},
    "arpo": {"sampler": "tree"},
    "aepo_hard": {"sampler": "tree", "rule": "aepo"},
    "aepo": {"sampler": "tree", "rule": "aepo", "policy_loss": "entropy_balanced"},
    "aepo_adv": {"sampler": "tree", "rule": "aepo", "policy_loss": "entropy_balanced", "entropy_advantage": 0.2},
}
"""The RL runs, each from chapter 08's base at the same budget: GRPO's groups, ARPO's tree, AEPO's tree (penalty)
with the hard clip, AEPO as released (penalty and balanced clip), and with the paper's entropy-aware advantage."""


def arm_config(config: Chapter11Config, arm: str) -> GRPOConfig:
    """The loop's configuration of `arm` (a key of `ARMS`)."""
    settings = dict(ARMS[arm])
    tree = dataclasses.replace(config.grpo.tree, rule=settings.pop("rule", "arpo"))
    return dataclasses.replace(config.grpo, tree=tree, **settings)


def train(model, tokenizer, config: Chapter11Config, seed: int, arm: str) -> list[dict]:
    """RL with `arm` from `model` (changed in place)."""
    return train_grpo(
        model, tokenizer, lambda: make_env("train", config),
        dataclasses.replace(config.task.sampling, snapshot_envs=True), arm_config(config, arm), seed,
        evaluate=lambda m: evaluate(m, tokenizer, config, seed + 1),
    )  # fmt: skip


def run(seed: int, config: Chapter11Config | None = None) -> dict:
    """The whole chapter for one seed: C11.1 and C11.4 on the bases, the five arms from chapter 08's base with
    their held-out pass@1 and pass@k (C11.2b, C11.3), and C11.2a's gradient check on the AEPO arm's policy."""
    config = config or preset()
    start = time.perf_counter()
    course_config.seed_everything(seed)
    base, tokenizer = data.load_base(BASE_NAME, course_config.device())
    results: dict = {"histories": {}, "final": {}, "passes": {}}
    results["concentration"] = branch_concentration(base, tokenizer, config, seed)
    results["split"] = budget_split(config, seed)
    results["passes"]["base"] = pass_at_k(base, tokenizer, config, seed + 1)
    trained = {}
    for arm in ARMS:
        model = copy.deepcopy(base)
        course_config.seed_everything(seed)
        results["histories"][arm] = train(model, tokenizer, config, seed, arm)
        results["final"][arm] = results["histories"][arm][-1]
        results["passes"][arm] = pass_at_k(model, tokenizer, config, seed + 1)
        trained[arm] = model
    results["gradient"] = gradient_check(trained["aepo"], base, tokenizer, config, seed)
    results["minutes"] = (time.perf_counter() - start) / 60
    results["base_model"], results["tokenizer"] = base, tokenizer
    return results


# Claims -----------------------------------------------------------------------------------------
def claim_numbers(results: Mapping) -> dict[str, float]:
    """Every number chapter 11's claims use, flat."""
    numbers: dict[str, float] = {}
    for rule, row in results["concentration"].items():
        numbers |= {f"{rule}_{key}": value for key, value in row.items()}
    for kind, row in results["split"].items():
        numbers |= {f"{kind}_{key}": value for key, value in row.items()}
    numbers |= {f"gradient_{key}": value for key, value in results["gradient"].items()}
    for arm, passes in results["passes"].items():
        numbers |= {f"{arm}_{key}": value for key, value in passes.items()}
    for arm, history in results["histories"].items():
        numbers[f"{arm}_success"] = results["final"][arm]["eval_success"]
        numbers[f"{arm}_entropy_drift"] = entropy_drift(history)
        clipped = [row["clip_fraction"] for row in history if "clip_fraction" in row]
        numbers[f"{arm}_clip_fraction"] = float(np.mean(clipped))
    k = next(key for key in results["passes"]["base"] if key.startswith("pass_") and key != "pass_1")
    numbers["aepo_pass_k"], numbers["arpo_pass_k"] = numbers[f"aepo_{k}"], numbers[f"arpo_{k}"]
    numbers["aepo_minus_arpo_pass_1"] = numbers["aepo_pass_1"] - numbers["arpo_pass_1"]
    numbers["aepo_minus_arpo_pass_k"] = numbers["aepo_pass_k"] - numbers["arpo_pass_k"]
    numbers["top3_arpo_over_uniform"] = numbers["arpo_top3_share"] - numbers["arpo_uniform_top3_share"]
    numbers["top3_aepo_minus_arpo"] = numbers["aepo_top3_share"] - numbers["arpo_top3_share"]
    numbers["drift_balanced_minus_hard"] = numbers["aepo_entropy_drift"] - numbers["aepo_hard_entropy_drift"]
    numbers["globals_root_minus_tool"] = numbers["root_globals"] - numbers["tool_globals"]
    numbers["branches_tool_minus_root"] = numbers["tool_branch_share"] - numbers["root_branch_share"]
    return numbers


CLAIMS: tuple[ClaimSpec, ...] = (
    ClaimSpec(
        "C11.1",
        "ARPO's tree puts more of a question's branches on its three most-branched global samples than branches "
        "drawn uniformly over them would, and AEPO's consecutive-branch penalty lowers that share (the base, the "
        "same training questions, 16 per question with 8 global samples)",
        "AEPO: 93.4% of ARPO's branches concentrate on 1-3 trajectories; the penalty spreads them",
        "top3_aepo_minus_arpo",
        lambda n: n["top3_arpo_over_uniform"] > 0 and n["top3_aepo_minus_arpo"] < 0,
        required=False,
    ),
    ClaimSpec(
        "C11.2a",
        "on real policies the balanced clip's gradient minus the hard clip's equals the kept term's (relative gap "
        "under 1e-6, equal values, on a batch with tokens above the bound)",
        "AEPO: the stop-gradient clip keeps the gradient of tokens above the clip bound (Eq. 10)",
        "gradient_gradient_gap",
        lambda n: (
            n["gradient_above_share"] > 0 and n["gradient_gradient_gap"] < 1e-6 and n["gradient_value_gap"] < 1e-9
        ),
        kind="mechanism",
        chance=chance.compared_exactly(
            "Eq. 10's identity, compared in float64 on the same batch", "gradient_tokens_above"
        ),
    ),
    ClaimSpec(
        "C11.2b",
        "the policy's entropy drifts less from the base's under the balanced clip than under the hard clip (same "
        "sampler, same budget)",
        "AEPO: the stop-gradient clip keeps entropy stable in training",
        "drift_balanced_minus_hard",
        lambda n: n["drift_balanced_minus_hard"] < 0,
        required=False,
    ),
    ClaimSpec(
        "C11.3",
        "AEPO ends with held-out pass@1 and pass@k each at most 2 points below ARPO's (the same budget)",
        "AEPO: higher pass@1 and pass@5 than ARPO on GAIA, HLE and WebWalkerQA (Qwen3-14B)",
        "aepo_minus_arpo_pass_1",
        lambda n: at_least(n["aepo_minus_arpo_pass_1"], -0.02) and at_least(n["aepo_minus_arpo_pass_k"], -0.02),
        required=False,
        effects=(("aepo_minus_arpo_pass_1", -0.02), ("aepo_minus_arpo_pass_k", -0.02)),
    ),
    ClaimSpec(
        "C11.4",
        "entropy pre-monitoring gives the root variant's questions more global samples than the tool kind's, and "
        "the tool kind's a larger share of branches",
        "AEPO: more global samples where the question is uncertain, more branches where tool feedback is",
        "globals_root_minus_tool",
        lambda n: n["globals_root_minus_tool"] > 0 and n["branches_tool_minus_root"] > 0,
        required=False,
        kind="design",
    ),
)


def claims(results: Mapping) -> list[Claim]:
    """Chapter 11's claims, evaluated on `claim_numbers(results)`."""
    return evaluate_all(CLAIMS, claim_numbers(results))


CURVE_KEYS = ("eval_success", "entropy", "clip_fraction", "tree_top3_branch_share", "success")
"""History keys whose curves `--record` stores, per arm: `<arm>/<key>`."""


def curves(results: Mapping) -> dict[str, list[tuple[float, float]]]:
    return recorded.history_curves(results["histories"], CURVE_KEYS)


def summary_lines(results: Mapping) -> list[str]:
    """What the command line prints for a seed, before its claims."""
    lines = []
    for rule, row in results["concentration"].items():
        lines.append(f"{rule} tree: top-3 branch share {row['top3_share']:.3f} (uniform "
                     f"{row['uniform_top3_share']:.3f}), {row['branches_per_question']:.1f} branches per question, "
                     f"chain depth {row['chain_depth']:.2f}")  # fmt: skip
    for kind, row in results["split"].items():
        lines.append(f"{kind} kind: H_root {row['h_root']:.4f}, H_tool {row['h_tool']:.4f} (code's scale); global "
                     f"samples {row['globals']:.2f} (in nats {row['globals_nats']:.2f}), branch share "
                     f"{row['branch_share']:.3f}")  # fmt: skip
    g = results["gradient"]
    lines.append(f"gradient check: gap {g['gradient_gap']:.1e}, value gap {g['value_gap']:.1e}, tokens above the bound "
                 f"{g['above_share']:.3f}, kept / hard gradient norm {g['kept_over_hard']:.3f}")  # fmt: skip
    for arm, passes in results["passes"].items():
        rest = "  ".join(f"{key} {value:.3f}" for key, value in passes.items())
        drift = f", entropy drift {entropy_drift(results['histories'][arm]):.3f}" if arm in results["histories"] else ""
        lines.append(f"{arm:10} {rest}{drift}")
    return lines


ARM_NAMES = {"base": "base", "grpo": "GRPO", "arpo": "ARPO", "aepo_hard": "AEPO's tree, hard clip",
             "aepo": "AEPO as released", "aepo_adv": "AEPO + entropy-aware advantage"}  # fmt: skip
"""Readable names of the policies in figures (the keys are `ARMS`' and the base)."""


def plot_recorded(results: Mapping | None = None, config: Chapter11Config | None = None):
    """Four panels over every recorded seed (`results/ch11.json`; dots are seeds, bars their mean, bands their
    range), with this run's numbers as crosses or dashed lines when `results` (from `run`) is given: C11.1's top-3
    branch shares beside the uniform reference, C11.2b's batch entropy for the two runs that differ only in the clip,
    C11.3's held-out pass@1 and pass@k per policy, and C11.4's global samples per kind of task."""
    from course_lib.diagnostics.plots import curves_with_bands, grid, legend_outside

    config = config or preset()
    loaded = recorded.load("ch11")
    seeds = recorded.seed_numbers(loaded)
    this = claim_numbers(results) if results is not None else None
    fig, (a, b, c, d) = grid(4, width=5.2, height=3.6)

    def bars(ax, keys: Sequence[str], labels: Sequence[str], offset: float = 0.0, width: float = 0.6,
             colour: str = "C0", label: str = "mean of the recorded seeds") -> None:  # fmt: skip
        x = np.arange(len(keys)) + offset
        values = [[n[key] for n in seeds] for key in keys]
        ax.bar(x, [np.mean(v) for v in values], width, color=colour, alpha=0.5, label=label)
        for position, v in zip(x, values, strict=True):
            ax.scatter(np.full(len(v), position), v, s=12, color="black", zorder=3,
                       label=f"each recorded seed ({len(seeds)})")  # fmt: skip
        if this is not None:
            ax.scatter(x, [this[key] for key in keys], marker="x", s=40, color="C3", zorder=4, label="this run")
        ax.set_xticks(np.arange(len(keys)), labels)

    bars(a, ["arpo_top3_share", "aepo_top3_share", "arpo_uniform_top3_share"],
         ["ARPO's tree", "AEPO's tree", "uniform roots"])  # fmt: skip
    a.set(ylabel="branches on the top-3 global samples", title="C11.1 branch concentration", ylim=(0, 1))
    series = {ARM_NAMES[arm]: recorded.load_curves("ch11", f"{arm}/entropy") for arm in ("aepo_hard", "aepo")}
    curves_with_bands(series, b, y_label="batch entropy (nats per token)", title="C11.2b entropy in training")
    if results is not None:
        for (name, _), arm, line in zip(series.items(), ("aepo_hard", "aepo"), b.get_lines(), strict=True):
            rows = [row for row in results["histories"][arm] if "entropy" in row]
            b.plot([r["iteration"] for r in rows], [r["entropy"] for r in rows], ls="--", color=line.get_color(),
                   label=f"{name}: this run")  # fmt: skip
    policies = list(ARM_NAMES)
    k = f"pass_{config.pass_k}"
    bars(c, [f"{p}_pass_1" for p in policies], [ARM_NAMES[p] for p in policies], -0.2, 0.4, "C0",
         "pass@1, mean of the recorded seeds")  # fmt: skip
    bars(c, [f"{p}_{k}" for p in policies], [ARM_NAMES[p] for p in policies], 0.2, 0.4, "C2",
         f"pass@{config.pass_k}, mean of the recorded seeds")  # fmt: skip
    c.set_xticklabels([ARM_NAMES[p] for p in policies], rotation=30, ha="right", fontsize=8)
    c.set(ylabel="held-out success", title=f"C11.3 pass@1 and pass@{config.pass_k}", ylim=(0, 1.05))
    bars(d, ["root_globals", "tool_globals"], ["root kind", "tool kind"], -0.2, 0.4)
    budget = config.sampler_budget
    d.set(ylabel=f"global samples m (of {budget})", title="C11.4 pre-monitored split", ylim=(0, budget))
    legend_outside(fig, columns=3)
    return fig


# Leakage audit ----------------------------------------------------------------------------------
def held_out_audit() -> list[leakage.SplitAudit]:
    """The test split against GRPO's draws, the samplers' and checks' questions (both kinds of C11.4's split) and
    the demonstrations of both bases (the chapter's and the root-entropy one), as questions and by hop lookups."""
    config = preset("cpu")
    keys = leakage.problem_keys(lambda: make_env("test", config), test_seeds(config.task.eval_tasks))
    grpo, seeds = config.grpo, leakage.run_seeds("ch11")
    tool_seeds = leakage.grpo_task_seeds(grpo.iterations, grpo.prompts_per_iteration, seeds)
    for offset, count in ((CONCENTRATION_SEED, config.sampler_prompts), (CHECK_SEED, config.check_prompts)):
        tool_seeds += [offset + seed * 1_000 + p for seed in seeds for p in range(count)]
    split = [SPLIT_SEED + seed * 1_000 + p for seed in seeds for p in range(config.sampler_prompts)]
    training = leakage.problem_keys(lambda: make_env("train", config), tool_seeds)
    for share in (0.0, 1.0):  # C11.4's two kinds of question
        training += leakage.problem_keys(lambda share=share: make_env("train", config, share), split)
    root_config = root_task(config)
    demo_seeds = two_hop_search.demonstration_seeds(config.task.demonstrations, leakage.base_seed(BASE_NAME))
    demos = leakage.problem_keys(lambda: make_env("train", config), demo_seeds)
    root_seeds = two_hop_search.demonstration_seeds(root_config.demonstrations, leakage.base_seed(ROOT_BASE_NAME))
    demos += leakage.problem_keys(lambda: two_hop_search.make_env("train", root_config), root_seeds)
    return [leakage.split_audit("ch11", "test", keys, leakage.two_hop_overlaps(keys, training, demos))]


CHAPTER = skeleton.Chapter(
    "ch11",
    "Chapter 11, AEPO",
    run,
    claim_numbers,
    CLAIMS,
    curves=curves,
    report=summary_lines,
    audit=held_out_audit,
    arms=skeleton.arm_table(arm_config, ARMS),
)


if __name__ == "__main__":
    CHAPTER.main()

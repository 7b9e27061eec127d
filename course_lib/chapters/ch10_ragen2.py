"""Chapter 10: RAGEN-2, template collapse and the mutual information that sees it (arXiv 2604.06268).

Chapter 09's FrozenLake and base: every turn is `<think> you r2 c3 go down </think> <answer> down </answer>`, and
the base's reasoning names the agent's cell, so it depends on the input. RAGEN-2 splits what the reasoning Z says
about the input X as H(Z) = I(X; Z) + H(Z | X): the entropy people log sees only H(Z | X); template collapse keeps
it high while I(X; Z) falls, the reasoning varied but the same for every input. The chapter measures both with
`diagnostics.reasoning_mutual_information` (in-batch cross-scoring of first-turn reasonings) on distinct held-out
maps, and trains five arms from the base at the same budget:

- `grpo`: GRPO (StarPO), no regulariser;
- `entropy`: the same with an entropy bonus on the reasoning's tokens (`GRPOConfig.entropy_scope="reasoning"`),
  the regulariser that, by RAGEN-2's argument, acts alone wherever a group's rewards do not vary;
- `entropy_zero_rv`: the bonus only on the groups whose rewards are all equal (`entropy_rows="zero_variance"`),
  that argument isolated: the bonus acts exactly where the task gradient is 0;
- `entropy_snr` and `grpo_snr`: the first two with RAGEN-2's SNR-aware filter (`batch_filter="snr_top_p"`, linear
  top-p 0.9, zero-std groups dropped, the docs' recommendation; the published main table used the much milder
  softmax mode with zero-std groups kept).

It then asks which diagnostic orders the runs by their final success (Spearman's rank correlation of MI, and of
entropy, with success), and measures the gradient norms of the task, entropy and KL terms per reward-std bucket.
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from course_lib import course_config, data
from course_lib.algos.filters import FilterConfig
from course_lib.algos.grpo import group_advantages
from course_lib.chapters import skeleton
from course_lib.course import leakage, recorded
from course_lib.course.claims import Claim, ClaimSpec, at_least, effect_at_least, evaluate_all, positive_effects
from course_lib.diagnostics import (
    first_turn_reasoning,
    reasoning_mutual_information,
    reward_std_buckets,
    teacher_forced_logp,
    term_gradient_norms,
)
from course_lib.diagnostics.collapse import eval_curve
from course_lib.diagnostics.stats import spearman
from course_lib.engine.rollout import RolloutEngine, SamplingConfig, Trajectory, collate
from course_lib.envs import frozen_lake
from course_lib.rl.train import GRPOConfig, train_grpo
from course_lib.tasks import lake_reasoning
from course_lib.tasks.lake_reasoning import BASE_NAME, make_env, test_seeds  # chapter 09's base and maps

BUCKET_SEED_OFFSET = 900_000_000
"""Training-split map seeds of the gradient-term batch start here, far from every RL draw."""


@dataclass
class Chapter10Config:
    """Everything chapter 10 varies, with the cpu preset's values as defaults."""

    sampling: SamplingConfig = field(default_factory=lambda: lake_reasoning.LakeConfig().sampling)
    """Chapter 09's sampling: temperature 1, 16 tokens a turn, a turn ends at `</answer>`."""
    grpo: GRPOConfig = field(
        default_factory=lambda: GRPOConfig(
            iterations=30,
            prompts_per_iteration=8,
            group_size=8,
            learning_rate=5e-4,
            eval_every=10,
            entropy_scope="reasoning",
            filter=FilterConfig(top_p=0.9, mode="linear", include_zero=False),
        )
    )
    """Every arm: GRPO on 8 maps x 8 episodes, one update per batch, no KL; the bonus (where an arm has one) on the
    reasoning's tokens only, so that it loosens what the reasoning says and not the format around it (on every
    policy token, with the task advantage zeroed, a bonus broke the format within 10-20 iterations in pilots); the
    SNR filter's settings."""
    entropy_coef: float = 0.1
    """The entropy arms' bonus, the chapter's inducer (100 times RAGEN-2's). Chosen on pilots of seeds 0-2 with the
    earlier base, trained on a split that leaked held-out states (disclosed): 0.1 with the bonus on zero-variance
    groups lowered MI within 30 iterations while the format held; 0.5 broke the format by iteration 30. On the
    layout-split base the same bonus barely moves MI (`docs/experiments/ch09-10-layout-split.md`). RAGEN-2's runs use
    0.001 on a 3B model for 400 steps; its sweeps go up to 0.1."""
    eval_tasks: int = 128
    """Distinct held-out maps per evaluation (one episode each); their first turns are MI's prompts."""
    mi_samples: int = 64
    """First-turn reasonings scored under every evaluation prompt (RAGEN-2's `num_samples`)."""
    bucket_maps: int = 32
    """Training maps of the gradient-term batch (C10.4), `group_size` episodes each."""
    bucket_edges: tuple[float, ...] = (1e-9, 0.4)
    """Reward-std buckets of C10.4: zero (all rewards equal), low (below 0.4: one success in 8 gives 0.35), high."""


def preset(scale: str | None = None) -> Chapter10Config:
    """The chapter's configuration for `COURSE_SCALE` (`cpu` or `gpu`)."""
    cpu = Chapter10Config()
    gpu = Chapter10Config(
        grpo=dataclasses.replace(cpu.grpo, iterations=150, prompts_per_iteration=16), eval_tasks=512, bucket_maps=128
    )
    return course_config.by_scale(cpu, gpu, scale)


# Measurements -----------------------------------------------------------------------------------
def evaluate(model, tokenizer, config: Chapter10Config, seed: int, keep: bool = False) -> dict:
    """Held-out success (one episode per distinct map, temperature 1), entropy of the policy tokens, chapter 09's
    reasoning statistics, and RAGEN-2's first-turn MI over the maps: `mi`, `retrieval_accuracy` (chance
    `1 / prompts`), `conditional_entropy` H(Z|X) and `marginal_entropy` H(Z), each map its own prompt. With `keep`,
    also the trajectories."""
    stats = lake_reasoning.evaluate(model, tokenizer, config, seed, keep=True)  # reads `eval_tasks` and `sampling` only
    trajectories = stats.pop("trajectories")
    for index, trajectory in enumerate(trajectories):  # every map is its own input x
        trajectory.group_id = index
    generator = torch.Generator().manual_seed(seed)
    mi = reasoning_mutual_information(model, tokenizer, trajectories, config.mi_samples, generator=generator)
    stats |= {key: mi[key] for key in ("mi", "retrieval_accuracy", "conditional_entropy", "marginal_entropy",
                                        "chance", "prompts")}  # fmt: skip
    return {**stats, "trajectories": trajectories} if keep else stats


def first_reasonings(trajectories: Sequence[Trajectory], tokenizer, count: int = 6) -> list[str]:
    """The first turn's text of `count` held-out episodes, after their start cell (what a template looks like)."""
    lines = []
    for trajectory in trajectories[:count]:
        start = trajectory.anchors[0][1] if trajectory.anchors else None
        first = lake_reasoning.turn_texts(trajectory, tokenizer)[:1]
        where = frozen_lake.cell_words(start) if start is not None else "?"
        lines.append(f"start {where:6}  ->  {first[0] if first else '(none)'}")
    return lines


def distinct_start_maps(trajectories: Sequence[Trajectory], count: int = 8) -> list[int]:
    """Indices of the first `count` episodes whose start cells differ (the most a first reasoning can tell apart)."""
    seen, chosen = set(), []
    for index, trajectory in enumerate(trajectories):
        start = trajectory.anchors[0][1] if trajectory.anchors else None
        if start is not None and start not in seen:
            seen.add(start)
            chosen.append(index)
    return chosen[:count]


def cross_scores(model, tokenizer, trajectories: Sequence[Trajectory], maps: Sequence[int]):
    """RAGEN-2's cross-scoring on a few maps, to look at: `(posterior, labels)`, where `posterior[i, j]` is
    p(x_j | z_i) under a uniform prior over the maps (softmax over j of log p(z_i | x_j), per-token mean), for
    the maps among `maps` whose first turn has valid reasoning, and `labels` their start cells."""
    think, end_think = tokenizer.convert_tokens_to_ids("<think>"), tokenizer.convert_tokens_to_ids("</think>")
    found = [(m, pair) for m in maps if (pair := first_turn_reasoning(trajectories[m], think, end_think))]
    logp = teacher_forced_logp(model, [x for _, (x, _) in found], [z for _, (_, z) in found])
    labels = [frozen_lake.cell_words(trajectories[m].anchors[0][1]) for m, _ in found]
    return torch.softmax(logp, dim=1), labels


# Arms -------------------------------------------------------------------------------------------
class Arm(NamedTuple):
    """One run's regulariser and filter."""

    bonus_rows: str | None
    """Where the entropy bonus acts (`GRPOConfig.entropy_rows`), or None for no bonus."""
    batch_filter: str = "none"


ARMS: dict[str, Arm] = {
    "grpo": Arm(None),
    "entropy": Arm("all"),
    "entropy_zero_rv": Arm("zero_variance"),
    "entropy_snr": Arm("all", "snr_top_p"),
    "grpo_snr": Arm(None, "snr_top_p"),
}
"""The five runs of a seed; every one starts from the base with the same seed and budget."""


def arm_config(config: Chapter10Config, arm: str) -> GRPOConfig:
    """The loop's configuration of `arm`."""
    settings = ARMS[arm]
    bonus = {} if settings.bonus_rows is None else {"entropy_coef": config.entropy_coef,
                                                      "entropy_rows": settings.bonus_rows}  # fmt: skip
    return dataclasses.replace(config.grpo, batch_filter=settings.batch_filter, **bonus)


def step_stats(history: Sequence[Mapping]) -> dict[str, float]:
    """A run's cost and what its filter kept: mean seconds per step (rollout, advantage and update; evaluations
    excluded), of which the update, the share of rows kept and the number of skipped (empty) steps."""
    steps = [r for r in history if "time_update" in r]
    return {
        "seconds_per_step": statistics.fmean(r["time_rollout"] + r["time_advantage"] + r["time_update"] for r in steps),
        "update_seconds": statistics.fmean(r["time_update"] for r in steps),
        "kept_rows": statistics.fmean(r.get("kept_rows", 1.0) for r in steps),
        "skipped_steps": float(sum(r.get("skipped_update", 0.0) for r in steps)),
    }


def train(model, tokenizer, config: Chapter10Config, seed: int, arm: str, evaluator=None) -> list[dict]:
    """RL of `arm` from `model` (changed in place), evaluated on held-out maps with evaluation seed `seed + 1`."""
    course_config.seed_everything(seed)
    evaluator = evaluator or lake_reasoning.HeldOutEvaluator(tokenizer, config, seed + 1, measure=evaluate)
    grpo = arm_config(config, arm)
    return train_grpo(model, tokenizer, lambda: make_env("train"), config.sampling, grpo, seed, evaluate=evaluator)


# Gradient terms per reward-variance bucket (C10.4) -----------------------------------------------
def gradient_terms(model, reference, tokenizer, config: Chapter10Config, seed: int) -> dict[str, dict[str, float]]:
    """Norms of the task, entropy and KL terms' gradients per reward-std bucket (`config.bucket_edges`) on one batch
    of `bucket_maps` training maps x `group_size` episodes sampled from `model`, KL to `reference` (the base).

    The task term is measured with GRPO's advantage (`task`, divided by the group's std) and with the mean-centred
    one (`task_centred`, Dr. GRPO's, whose size follows the rewards' spread): GRPO's division rescales every
    group with any spread to unit std, so its task gradient hardly depends on how much the rewards vary, only on
    whether they do. The regularisers' norms are unweighted (multiply by a coefficient to compare with a loss).
    Keys: `zero`, `low`, `high`, each with `rows`, `groups`, `task`, `task_centred`, `entropy` and `kl`."""
    grpo = config.grpo
    engine = RolloutEngine(model, tokenizer, config.sampling)
    envs = [make_env("train") for _ in range(config.bucket_maps * grpo.group_size)]
    maps = [BUCKET_SEED_OFFSET + seed * 10_000 + m for m in range(config.bucket_maps)]
    seeds = [s for s in maps for _ in range(grpo.group_size)]
    groups = [m for m in range(config.bucket_maps) for _ in range(grpo.group_size)]
    trajectories = engine.rollout(envs, seeds, groups, torch.Generator().manual_seed(seed))
    batch = collate(trajectories, tokenizer.pad_token_id)
    buckets = reward_std_buckets(batch.rewards, batch.group_ids, config.bucket_edges)
    out = {}
    for index, name in enumerate(("zero", "low", "high")):
        rows = buckets == index
        if not bool(rows.any()):
            out[name] = dict.fromkeys(("rows", "groups", "task", "task_centred", "entropy", "kl"), float("nan"))
            continue
        part = batch.select(rows)
        scaled = group_advantages(part.rewards, part.group_ids, scale_by_std=True)
        centred = group_advantages(part.rewards, part.group_ids, scale_by_std=False)
        norms = term_gradient_norms(model, part, scaled, reference, config.sampling.temperature)
        centred_norm = term_gradient_norms(model, part, centred, None, config.sampling.temperature)["task"]
        out[name] = {"rows": float(rows.sum()), "groups": float(len(set(part.group_ids.tolist()))),
                     **norms, "task_centred": centred_norm}  # fmt: skip
    model.zero_grad(set_to_none=True)
    return out


# The chapter ------------------------------------------------------------------------------------
def run(seed: int, config: Chapter10Config | None = None) -> dict:
    """The whole chapter for one seed: the base's evaluation, every arm from it, held-out first turns of the base
    and of the `entropy` arm, and the gradient terms per bucket on the `grpo` arm's final policy."""
    config = config or preset()
    start = time.perf_counter()
    course_config.seed_everything(seed)
    base, tokenizer = data.load_base(BASE_NAME, course_config.device())
    base_eval = evaluate(base, tokenizer, config, seed + 1, keep=True)
    results: dict = {"base": lake_reasoning.without_trajectories(base_eval), "histories": {}, "final": {}, "steps": {}}
    results["samples"] = {"base": first_reasonings(base_eval["trajectories"], tokenizer)}
    for arm in ARMS:
        model = copy.deepcopy(base)
        evaluator = lake_reasoning.HeldOutEvaluator(
            tokenizer, config, seed + 1, start=results["base"], measure=evaluate
        )
        history = train(model, tokenizer, config, seed, arm, evaluator)
        results["histories"][arm], results["final"][arm] = history, history[-1]
        results["steps"][arm] = step_stats(history)
        if arm in ("entropy", "entropy_snr"):
            results["samples"][arm] = first_reasonings(evaluator.trajectories, tokenizer)
        if arm == "entropy":  # kept for the notebook's cross-scoring picture
            results["policies"], results["trajectories"] = {"entropy": model}, {"entropy": evaluator.trajectories}
        if arm == "grpo":
            results["gradient_terms"] = gradient_terms(model, base, tokenizer, config, seed)
    results["minutes"] = (time.perf_counter() - start) / 60
    results["base_model"], results["tokenizer"] = base, tokenizer
    results["trajectories"]["base"] = base_eval["trajectories"]
    return results


# Claims -----------------------------------------------------------------------------------------
FINAL_KEYS = ("success", "mi", "retrieval_accuracy", "conditional_entropy", "entropy", "reasoning_tracks_state",
              "first_reasoning_tracks_state", "invalid_rate")  # fmt: skip
"""Held-out measurements recorded for the base and each arm's final policy."""


def claim_numbers(results: Mapping, config: Chapter10Config | None = None) -> dict[str, float]:
    """Every number chapter 10's claims use, flat."""
    base, final = results["base"], results["final"]
    numbers = {f"base_{key}": base[key] for key in FINAL_KEYS} | {"chance": base["chance"]}
    for arm in ARMS:
        numbers |= {f"{arm}_{key}": final[arm][f"eval_{key}"] for key in FINAL_KEYS}
        numbers |= {f"{arm}_{key}": value for key, value in results["steps"][arm].items()}
    success = [numbers[f"{arm}_success"] for arm in ARMS]
    numbers["spearman_mi"] = spearman([numbers[f"{arm}_mi"] for arm in ARMS], success)
    numbers["spearman_entropy"] = spearman([numbers[f"{arm}_entropy"] for arm in ARMS], success)
    numbers["spearman_conditional_entropy"] = spearman([numbers[f"{arm}_conditional_entropy"] for arm in ARMS], success)
    numbers["spearman_gap"] = numbers["spearman_mi"] - numbers["spearman_entropy"]
    # C10.2 asks which diagnostic predicts success better, whatever the sign: entropy bonuses raise entropy and lower
    # success, so entropy ranks these runs inverted, and a signed gap would count that ranking against it
    numbers["spearman_abs_gap"] = abs(numbers["spearman_mi"]) - abs(numbers["spearman_entropy"])
    for arm in ("grpo", "grpo_snr"):  # the runs without the inducer: what MI does on its own
        numbers[f"{arm}_mi_change"] = numbers[f"{arm}_mi"] - numbers["base_mi"]
    numbers["retrieval_halfway"] = (numbers["base_retrieval_accuracy"] + numbers["chance"]) / 2
    for name, terms in results["gradient_terms"].items():
        numbers |= {f"bucket_{name}_{key}": value for key, value in terms.items()}
    for name in ("low", "high"):
        for term in ("entropy", "kl"):
            numbers[f"bucket_{name}_{term}_per_task"] = (
                numbers[f"bucket_{name}_{term}"] / numbers[f"bucket_{name}_task_centred"]
            )
    for key in ("mi", "success"):
        numbers[f"snr_{key}_gain"] = numbers[f"entropy_snr_{key}"] - numbers[f"entropy_{key}"]
    numbers["snr_step_saving"] = 1 - numbers["entropy_snr_seconds_per_step"] / numbers["entropy_seconds_per_step"]
    return numbers


def _template_collapse(n: Mapping[str, float]) -> bool:
    return at_least(0.5 * n["base_mi"], n["entropy_mi"]) and at_least(
        n["retrieval_halfway"], n["entropy_retrieval_accuracy"]
    )


def _buckets(n: Mapping[str, float]) -> bool:
    return (
        n["bucket_low_task_centred"] < n["bucket_high_task_centred"]
        and n["bucket_low_entropy_per_task"] > n["bucket_high_entropy_per_task"]
        and n["bucket_low_kl_per_task"] > n["bucket_high_kl_per_task"]
    )


CLAIMS: tuple[ClaimSpec, ...] = (
    ClaimSpec(
        "C10.1",
        "with the entropy bonus (the inducer), MI ends at most half the base's and retrieval accuracy at most halfway "
        "from the base's to chance (entropy and H(Z|X) rise with the bonus by construction: shown, not checked)",
        "RAGEN-2: template collapse, entropy stays high while I(X;Z) and retrieval accuracy fall toward chance",
        "entropy_mi",
        _template_collapse,
        required=False,
        induced=True,
    ),
    effect_at_least(
        "C10.2",
        "over the seed's five runs, the absolute Spearman correlation of final MI with final success exceeds that of "
        "final entropy by at least 0.25 on average over the seeds (95% t-interval above 0; restated before the runs "
        "on the layout-split base: the signed comparison counted entropy's inverted ranking against it)",
        "RAGEN-2: MI correlates with final performance much more strongly than entropy",
        "spearman_abs_gap",
        0.25,
        required=False,
    ),
    positive_effects(
        "C10.3",
        "with the entropy bonus (the inducer), the SNR filter (linear top-p, 90% of the summed reward std) ends with "
        "higher MI and higher success than no filter (its cheaper steps follow from dropping rows: shown, not checked)",
        "RAGEN-2: SNR-aware filtering raises input dependence and task performance and makes steps cheaper",
        "snr_mi_gain",
        "snr_success_gain",
        required=False,
        induced=True,
    ),
    ClaimSpec(
        "C10.4",
        "on the GRPO run's final policy, the mean-centred task gradient is smaller in the low-std bucket than the "
        "high, and entropy's and KL's ratios to it larger (in zero-std groups the task gradient is 0 by construction: "
        "shown, not checked)",
        "RAGEN-2: at low reward variance the regularisers' gradients dominate the task gradient",
        "bucket_low_kl_per_task",
        _buckets,
        required=False,
        # Holds by arithmetic: the low bucket (one success or one failure in a group of 8) has a smaller centred
        # advantage than the high one, so a smaller task gradient, and the regularisers it compares with have
        # coefficient 0 in the measured run. A design, not RAGEN-2's finding.
        kind="design",
    ),
)


def claims(results: Mapping, config: Chapter10Config | None = None) -> list[Claim]:
    """Chapter 10's claims, evaluated on `claim_numbers(results, config)`."""
    return evaluate_all(CLAIMS, claim_numbers(results, config))


def pooled_spearman(seed_numbers: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """C10.2 over every recorded run of every seed (five per seed): Spearman's correlation of final MI, entropy
    and H(Z|X) with final success, and the number of runs."""
    rows = [(n[f"{arm}_mi"], n[f"{arm}_entropy"], n[f"{arm}_conditional_entropy"], n[f"{arm}_success"])
            for n in seed_numbers for arm in ARMS]  # fmt: skip
    mi, entropy, conditional, success = (list(column) for column in zip(*rows, strict=True))
    return {"runs": float(len(rows)), "spearman_mi": spearman(mi, success),
            "spearman_entropy": spearman(entropy, success),
            "spearman_conditional_entropy": spearman(conditional, success)}  # fmt: skip


CURVE_KEYS = ("eval_success", "eval_mi", "eval_retrieval_accuracy", "eval_conditional_entropy", "eval_entropy",
              "entropy", "reward_std")  # fmt: skip
"""History keys whose curves `--record` stores, per arm: `<arm>/<key>`."""


def curves(results: Mapping) -> dict[str, list[tuple[float, float]]]:
    return recorded.history_curves(results["histories"], CURVE_KEYS)


def no_bonus_lines(per_seed: Mapping[int, Mapping[str, float]] | None = None) -> list[str]:
    """What MI did in the runs without the inducer (`grpo`, `grpo_snr`), per seed (`{seed: numbers}`; default: the
    recorded seeds): the base's held-out MI and success, and each run's final MI, its change and final success."""
    if per_seed is None:
        loaded = recorded.load(CHAPTER.id)
        per_seed = {int(seed): record["numbers"] for seed, record in loaded["seeds"].items()}
    lines, rose = [], 0
    for seed, n in sorted(per_seed.items()):
        runs = []
        for label, arm in (("GRPO", "grpo"), ("GRPO + SNR", "grpo_snr")):
            change = n[f"{arm}_mi_change"]
            rose += change > 0
            runs.append(f"{label} {n[f'{arm}_mi']:.3f} ({change:+.3f}), success {n[f'{arm}_success']:.3f}")
        lines.append(f"seed {seed}: base MI {n['base_mi']:.3f}, success {n['base_success']:.3f}; " + "; ".join(runs))
    lines.append(f"MI rose in {rose} of {2 * len(per_seed)} runs without the entropy bonus")
    return lines


def summary_lines(results: Mapping) -> list[str]:
    """What the command line prints for a seed, before its claims."""
    rows = [("base", results["base"], "")]
    rows += [(arm, {k[5:]: v for k, v in results["final"][arm].items() if k.startswith("eval_")}, arm)
             for arm in ARMS]  # fmt: skip
    lines = []
    for name, stats, arm in rows:
        step = results["steps"].get(arm)
        cost = f", {step['seconds_per_step']:.2f} s/step, kept {step['kept_rows']:.2f}" if step else ""
        lines.append(f"{name:15} success {stats['success']:.3f}  MI {stats['mi']:.3f}  retrieval "
                     f"{stats['retrieval_accuracy']:.3f}  H(Z|X) {stats['conditional_entropy']:.3f}  entropy "
                     f"{stats['entropy']:.3f}  names cell {stats['reasoning_tracks_state']:.3f}{cost}")  # fmt: skip
    n = claim_numbers(results)
    lines.append(f"Spearman with final success over the {len(ARMS)} runs: MI {n['spearman_mi']:+.2f}, entropy "
                 f"{n['spearman_entropy']:+.2f}, H(Z|X) {n['spearman_conditional_entropy']:+.2f}")  # fmt: skip
    lines += bucket_lines(results)
    return lines


def bucket_lines(results: Mapping) -> list[str]:
    """C10.4's table: gradient norms per reward-std bucket."""
    lines = ["bucket  rows groups   task(GRPO)  task(centred)  entropy      KL"]
    for name, t in results["gradient_terms"].items():
        lines.append(f"{name:6} {t['rows']:5.0f} {t['groups']:6.0f}   {t['task']:10.4f}  {t['task_centred']:13.4f}"
                     f"  {t['entropy']:7.4f}  {t['kl']:7.4f}")  # fmt: skip
    return lines


# Plots ------------------------------------------------------------------------------------------
def plot_mi_and_entropy(histories: Mapping[str, Sequence[Mapping]], arms: Sequence[str]):
    """One panel per arm: held-out MI (left axis) and the policy's entropy (right axis) over training, so that
    entropy rising while MI falls (template collapse) reads at a glance."""
    from course_lib.diagnostics.plots import grid

    fig, axes = grid(len(arms), width=4.4, height=3.0)
    for ax, arm in zip(axes, arms, strict=False):
        ax.plot(*zip(*eval_curve(histories[arm], "mi"), strict=True), marker="o", color="C0", label="MI (nats)")
        ax.set_ylabel("MI I(X;Z), nats", color="C0")
        right = ax.twinx()
        right.plot(*zip(*eval_curve(histories[arm], "entropy"), strict=True), marker="s", color="C3",
                   label="entropy")  # fmt: skip
        right.set_ylabel("entropy of policy tokens", color="C3")
        ax.set_title(arm)
        ax.set_xlabel("RL iteration")
        ax.grid(alpha=0.3)
    for ax in axes[len(arms) :]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def plot_cross_scores(panels: Mapping[str, tuple[torch.Tensor, list[str]]]):
    """One heat map per policy of `cross_scores`: a bright diagonal means each reasoning points to its own map."""
    from course_lib.diagnostics.plots import grid

    fig, axes = grid(len(panels), width=4.0, height=3.6)
    for ax, (title, (posterior, labels)) in zip(axes, panels.items(), strict=True):
        image = ax.imshow(posterior.numpy(), vmin=0, vmax=1, cmap="viridis")
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_xlabel("map x_j (its start cell)")
        ax.set_ylabel("reasoning z_i written on the map")
        ax.set_title(title, fontsize=9)
        fig.colorbar(image, ax=ax, fraction=0.046, label="p(x_j | z_i)")
    fig.tight_layout()
    return fig


# Readable figures over the recorded seeds (issue 32) -----------------------------------------------
ARM_LABELS: dict[str, str] = {
    "grpo": "GRPO",
    "entropy": "entropy bonus",
    "entropy_zero_rv": "bonus on zero-RV groups",
    "entropy_snr": "bonus + SNR filter",
    "grpo_snr": "GRPO + SNR filter",
}
"""How the figures name each arm of `ARMS` (the keys are the records' prefixes)."""


def label_arms(fig) -> None:
    """Rename every panel title and legend entry of `fig` that is an arm key (`ARMS`) to its `ARM_LABELS` name."""
    for ax in fig.axes:
        if ax.get_title() in ARM_LABELS:
            ax.set_title(ARM_LABELS[ax.get_title()])
        for artist in [*ax.get_lines(), *ax.collections]:
            if artist.get_label() in ARM_LABELS:
                artist.set_label(ARM_LABELS[artist.get_label()])


def plot_recorded_predictors(seed_numbers: Sequence[Mapping[str, float]], results: Mapping | None = None):
    """C10.2 over every recorded run: each run's final held-out success against its final MI and its final entropy,
    one colour per arm and a dot per recorded seed; with `results`, this session's runs as open circles."""
    from course_lib.diagnostics.plots import grid, legend_outside

    fig, axes = grid(2, width=4.2, height=3.0)
    for ax, (key, label) in zip(axes, (("mi", "final MI, nats"), ("entropy", "final entropy")), strict=True):
        for k, (arm, name) in enumerate(ARM_LABELS.items()):
            xs = [n[f"{arm}_{key}"] for n in seed_numbers]
            ys = [n[f"{arm}_success"] for n in seed_numbers]
            ax.scatter(xs, ys, color=f"C{k}", s=18, label=f"{name} ({len(xs)} recorded seeds)")
            if results is not None:
                final = results["final"][arm]
                ax.scatter(final[f"eval_{key}"], final["eval_success"], facecolors="none", edgecolors=f"C{k}", s=60,
                           label="this run (open circles)" if k == 0 else None)  # fmt: skip
        ax.set_xlabel(label)
        ax.set_ylabel("final held-out success")
        ax.grid(alpha=0.3)
    legend_outside(fig, columns=3)
    return fig


BUCKET_TERMS = (("task", "task (GRPO advantage)"), ("task_centred", "task (mean-centred)"), ("entropy", "entropy"),
                ("kl", "KL to the base"))  # fmt: skip
"""C10.4's gradient terms, as `(recorded key suffix, label)`: `bucket_<bucket>_<term>` in the records."""


def plot_recorded_gradient_terms(seed_numbers: Sequence[Mapping[str, float]]):
    """C10.4 over the recorded seeds: per reward-std bucket (zero, low, high), each term's gradient norm on the
    `grpo` run's final policy as a bar at the mean over seeds with every seed as a dot (norms unweighted)."""
    import numpy as np

    from course_lib.diagnostics.plots import grid, legend_outside

    fig, (ax,) = grid(1, width=7.0, height=3.2, columns=1)
    buckets = ("zero", "low", "high")
    x = np.arange(len(buckets))
    for k, (term, label) in enumerate(BUCKET_TERMS):
        values = np.array([[n[f"bucket_{b}_{term}"] for b in buckets] for n in seed_numbers])
        offset = x + (k - 1.5) * 0.2
        ax.bar(offset, values.mean(0), width=0.2, color=f"C{k}", alpha=0.6, label=label)
        for row in values:
            ax.scatter(offset, row, color="black", s=8, zorder=3)
    ax.scatter([], [], color="black", s=8, label=f"one recorded seed ({len(seed_numbers)} seeds)")
    ax.set_xticks(x, [f"{b} reward std" for b in buckets])
    ax.set_ylabel("gradient norm")
    ax.grid(alpha=0.3, axis="y")
    legend_outside(fig, columns=3)
    return fig


# Leakage audit ----------------------------------------------------------------------------------
def held_out_audit() -> list[leakage.SplitAudit]:
    """The test maps against every arm's draws, the bucket maps and chapter 09's demonstrations (its base)."""
    config = preset("cpu")
    keys = leakage.problem_keys(lambda: make_env("test"), test_seeds(config.eval_tasks))
    grpo, seeds = config.grpo, leakage.run_seeds("ch10")  # every arm has the same iterations and maps per iteration
    draws = leakage.grpo_task_seeds(grpo.iterations, grpo.prompts_per_iteration, seeds)
    draws += [BUCKET_SEED_OFFSET + seed * 10_000 + m for seed in seeds for m in range(config.bucket_maps)]
    training = set(leakage.problem_keys(lambda: make_env("train"), draws))
    return [leakage.lake_split("ch10", keys, training, leakage.demonstrated_lakes())]


def finish(args, outputs: list[dict]) -> None:
    """After the last seed: C10.2 pooled over every run of the seeds just run."""
    if len(outputs) > 1:
        pooled = pooled_spearman([claim_numbers(results) for results in outputs])
        print(f"pooled over {pooled['runs']:.0f} runs: Spearman with final success, MI "
              f"{pooled['spearman_mi']:+.2f}, entropy {pooled['spearman_entropy']:+.2f}, H(Z|X) "
              f"{pooled['spearman_conditional_entropy']:+.2f}")  # fmt: skip


CHAPTER = skeleton.Chapter(
    "ch10", "Chapter 10, RAGEN-2", run, claim_numbers, CLAIMS, curves=curves, report=summary_lines,
    audit=held_out_audit, finish=finish, arms=skeleton.arm_table(arm_config, ARMS),
)  # fmt: skip


if __name__ == "__main__":
    CHAPTER.main()

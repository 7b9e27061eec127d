"""Chapter 09's designed setting (issue 29): RAGEN's optimisation schedule, where the Echo Trap can arise from RL.

RAGEN (arXiv 2504.20073) trains on a rollout batch of 8 environment groups x 16 episodes in mini-batches of 32
trajectories, one epoch: four optimizer steps per iteration (`ppo_mini_batch_size` is a quarter of the batch in the
v1 config, `RAGEN-AI/RAGEN@a5affaf` `config/base.yaml`). StarPO-S's filter (`_filter_rollout`, top 25% of groups by
within-group reward std) keeps 2 of the 8 groups, 32 trajectories: one mini-batch, so one optimizer step per
iteration. In the chapter's main run (`ch09_ragen`) every arm takes one step on the whole batch, so the filter only
shrinks the batch and StarPO never gets more than one step's push per iteration; StarPO improves and never collapses
there in 60 iterations.

Here both arms follow the official schedule at the miniature's size: 8 maps x 8 episodes per iteration, mini-batches
of 16 episodes (a quarter of the batch), one epoch, so StarPO takes 4 steps per iteration and StarPO-S (top quarter
of groups: 16 episodes, clip 0.2/0.28, no KL) takes 1 (`optimizer_steps`). Everything else is the chapter's: its base,
the course's learning rate 5e-4, GRPO's advantage, token-mean loss, no KL, temperature 1, 60 iterations. The decided
finding is C9.3d, StarPO-S ending above StarPO on held-out maps; StarPO's own improve-then-collapse (C9.1's windows)
and the reasoning's input dependence (chapter 09's `reasoning_tracks_state`, chapter 10's mutual information) are
recorded beside it. The pre-registration is `docs/experiments/ch09-design.md`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from course_lib import course_config, data
from course_lib.algos.filters import FilterConfig
from course_lib.course.claims import ClaimSpec, at_least
from course_lib.course.designs import Design
from course_lib.diagnostics import collapse, group_reward_std, reasoning_mutual_information, rollout_stats
from course_lib.engine.rollout import RolloutEngine, Trajectory, collate
from course_lib.models import token_logprobs
from course_lib.rl import seams
from course_lib.rl.train import GRPOConfig
from course_lib.tasks import lake_reasoning


@dataclass
class DesignConfig:
    """The designed setting (pre-registered in `docs/experiments/ch09-design.md`)."""

    iterations: int = 60
    """RL iterations per arm (the chapter's main run's length)."""
    prompts_per_iteration: int = 8
    """Distinct training maps per iteration (RAGEN's 8 environment groups)."""
    group_size: int = 8
    """Episodes per map (RAGEN's 16, halved as the chapter's main run does)."""
    mini_batch_rows: int = 16
    """Episodes per optimizer step: a quarter of the 64-episode batch, as RAGEN's 32 of 128."""
    learning_rate: float = 5e-4
    """The course's learning rate (the chapter's main run's)."""
    eval_every: int = 10
    """Held-out checkpoints (iteration 0 is the base), on `eval_tasks` maps: C9.1's windows."""
    eval_tasks: int = 64
    """Distinct held-out maps at each checkpoint."""
    final_eval_tasks: int = 256
    """Distinct held-out maps of the final evaluation (the decided effect; its own evaluation seed)."""
    mi_tasks: int = 128
    """Held-out maps (the first of the final evaluation's) that are the prompts of the mutual-information estimate."""
    mi_samples: int = 64
    """First-turn reasonings scored under every prompt (RAGEN-2's `num_samples`, chapter 10's)."""


ARMS: dict[str, dict] = {
    "starpo": {},
    "starpo_s": {"batch_filter": "starpo_s", "clip_high": 0.28},
}
"""StarPO: every episode, clip 0.2/0.2, no KL. StarPO-S: the top quarter of groups by reward std, clip 0.2/0.28, no
KL (GRPO's advantage: the critic of RAGEN's StarPO-S is left out, as in chapter 09's `starpo_s` arm)."""


def optimizer_steps(rows: int, mini_batch_rows: int) -> int:
    """Optimizer steps of one epoch over `rows` kept episodes in mini-batches of `mini_batch_rows` (the last may be
    short): ceil(rows / mini_batch_rows); 0 when nothing is kept."""
    if mini_batch_rows < 1 or rows < 0:
        raise ValueError(f"need rows >= 0 and mini_batch_rows >= 1, got {rows} and {mini_batch_rows}")
    return -(-rows // mini_batch_rows)


def mini_batches(rows: int, mini_batch_rows: int, generator: torch.Generator) -> list[torch.Tensor]:
    """A random split of row indices 0..rows-1 into `optimizer_steps(rows, mini_batch_rows)` chunks, each sorted
    (verl shuffles the batch once per epoch and walks it in mini-batches)."""
    order = torch.randperm(rows, generator=generator)
    return [order[k : k + mini_batch_rows].sort().values for k in range(0, rows, mini_batch_rows)]


def grpo_config(design: DesignConfig, arm: str) -> GRPOConfig:
    """The loop's configuration of `arm` (the seams and clip of `ARMS`, the design's batch and learning rate)."""
    return GRPOConfig(
        iterations=design.iterations,
        prompts_per_iteration=design.prompts_per_iteration,
        group_size=design.group_size,
        learning_rate=design.learning_rate,
        filter=FilterConfig(keep_fraction=0.25),
        **ARMS[arm],
    )


def minibatch_iteration(
    model: torch.nn.Module,
    engine: RolloutEngine,
    envs: Sequence,
    config: GRPOConfig,
    mini_batch_rows: int,
    seed: int,
    iteration: int,
    generator: torch.Generator,
    optimizer: torch.optim.Optimizer,
) -> dict[str, float]:
    """One iteration as RAGEN's verl trainer runs it: sample `group_size` episodes on each of the iteration's maps
    (the same map seeds as `train.policy_iteration`), keep whole groups (`config.batch_filter`), compute GRPO's
    advantages on the kept episodes, then one epoch of clipped-surrogate steps over random mini-batches of
    `mini_batch_rows` kept episodes, the old log-probs those of sampling (so the clip acts from the second step on).
    Returns the batch's rollout statistics, `reward_std`, `kept_rows`, `steps`, `grad_norm` (largest over the
    steps) and `clip_fraction` (of the last step)."""
    sample = seams.resolve("sampler", config.sampler)
    estimate = seams.resolve("advantage", config.advantage)
    keep_rows = seams.resolve("batch_filter", config.batch_filter)
    policy_loss = seams.resolve("policy_loss", config.policy_loss)
    start = time.perf_counter()
    prompts = config.prompts_per_iteration
    task_seeds = [seed * 1_000_003 + iteration * prompts + p for p in range(prompts)]
    rollouts = sample(engine, envs, task_seeds, config, generator)
    rolled = time.perf_counter()
    batch = collate(rollouts.rows, engine.tokenizer.pad_token_id)
    keep = keep_rows(batch, config)
    record = {**rollout_stats(rollouts.episodes), "reward_std": group_reward_std(rollouts.episodes),
              "kept_rows": float(keep.float().mean()), "time_rollout": rolled - start}  # fmt: skip
    if not bool(keep.any()):
        return record | {"steps": 0.0}
    if not bool(keep.all()):
        batch = batch.select(keep)
    advantages, _ = estimate(batch, config)
    rows = batch.input_ids.shape[0]
    model.train()
    norms, stats = [], {}
    chunks = mini_batches(rows, mini_batch_rows, generator)
    for chunk in chunks:
        part = batch.select(torch.zeros(rows, dtype=torch.bool).index_fill(0, chunk, True))
        logprobs, _ = token_logprobs(model, part.input_ids, part.attention_mask, engine.config.temperature)
        loss, stats = policy_loss(logprobs, part.old_logprobs, advantages[chunk], part.loss_mask, config)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)))
        optimizer.step()
    model.eval()
    return record | {"steps": float(len(chunks)), "grad_norm": max(norms), "clip_fraction": stats["clip_fraction"]}


def train(
    model: torch.nn.Module,
    tokenizer,
    config: GRPOConfig,
    mini_batch_rows: int,
    seed: int,
    checkpoint: Callable[[torch.nn.Module], dict[str, float]],
    eval_every: int,
    start: Mapping[str, float] | None = None,
) -> list[dict[str, float]]:
    """`config.iterations` of `minibatch_iteration` from `model` (changed in place), with `checkpoint(model)` held-out
    numbers under `eval_*` every `eval_every` iterations and at the end (`start`, the base's, at iteration 0). The
    rollout generator and the AdamW optimizer (no weight decay) are seeded and built as `train.train_grpo`'s."""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, weight_decay=0.0)
    engine = RolloutEngine(model, tokenizer, lake_reasoning.LakeConfig().sampling)
    envs = [lake_reasoning.make_env("train") for _ in range(config.prompts_per_iteration * config.group_size)]
    history = []
    for iteration in range(config.iterations + 1):
        record: dict[str, float] = {"iteration": iteration}
        if iteration % eval_every == 0 or iteration == config.iterations:
            stats = start if iteration == 0 and start is not None else checkpoint(model)
            record |= {f"eval_{key}": value for key, value in stats.items()}
        if iteration == config.iterations:
            history.append(record)
            break
        record |= minibatch_iteration(model, engine, envs, config, mini_batch_rows, seed, iteration, generator,
                                      optimizer)  # fmt: skip
        history.append(record)
    return history


HELD_OUT_KEYS = ("success", "invalid_rate", "entropy", "reasoning_tracks_state", "distinct_first_reasoning")


def held_out(model, tokenizer, tasks: int, seed: int) -> tuple[dict[str, float], list[Trajectory]]:
    """Chapter 09's held-out evaluation on the first `tasks` distinct held-out maps (one episode each, temperature 1,
    evaluation seed `seed`): `HELD_OUT_KEYS` and the trajectories."""
    config = dataclasses.replace(lake_reasoning.LakeConfig(), eval_tasks=tasks)
    stats = lake_reasoning.evaluate(model, tokenizer, config, seed, keep=True)
    return {key: stats[key] for key in HELD_OUT_KEYS}, stats["trajectories"]


def mutual_information(model, tokenizer, trajectories: Sequence[Trajectory], samples: int, seed: int) -> dict:
    """RAGEN-2's first-turn MI of the reasoning (`diagnostics.reasoning_mutual_information`) over `trajectories`,
    each map its own prompt, as chapter 10's `evaluate` computes it: `mi` and `retrieval_accuracy`."""
    episodes = [copy.copy(t) for t in trajectories]
    for index, trajectory in enumerate(episodes):
        trajectory.group_id = index
    generator = torch.Generator().manual_seed(seed)
    mi = reasoning_mutual_information(model, tokenizer, episodes, samples, generator=generator)
    return {"mi": mi["mi"], "retrieval_accuracy": mi["retrieval_accuracy"]}


def arm_numbers(arm: str, history: Sequence[Mapping], final: Mapping[str, float]) -> dict[str, float]:
    """The numbers one arm records: its final evaluation (`final`, prefixed `<arm>_`), C9.1's windows on the
    checkpoints (`collapse.echo_windows`: mean success after 0 up to half the run, and over its last third), the peak,
    and the Echo Trap's signals (`collapse.signal_onsets`: first and last 10-iteration window of the within-group
    reward std and of the rollout entropy; the largest gradient norm and its iteration)."""
    numbers = {f"{arm}_{key}": float(value) for key, value in final.items()}
    windows = collapse.echo_windows(history)
    base = history[0]["eval_success"]
    curve = collapse.eval_curve(history)
    numbers |= {f"{arm}_{key}": value for key, value in windows.items()}
    numbers[f"{arm}_early_minus_base"] = windows["early_success"] - base
    numbers[f"{arm}_early_minus_late"] = windows["early_success"] - windows["late_success"]
    numbers[f"{arm}_peak_success"] = max(value for _, value in curve)
    numbers[f"{arm}_checkpoint_final_success"] = curve[-1][1]
    signals = collapse.signal_onsets(history, window=10, drop=0.2)
    for key in ("reward_std_first_window", "reward_std_last_window", "entropy_first_window", "entropy_last_window",
                "grad_norm_peak", "grad_norm_peak_iteration", "grad_norm_median"):  # fmt: skip
        numbers[f"{arm}_{key}"] = float(signals[key])
    numbers[f"{arm}_steps_per_iteration"] = sum(r.get("steps", 0.0) for r in history) / max(len(history) - 1, 1)
    return numbers


def run_seed(seed: int, design: DesignConfig | None = None, mi: bool = True) -> dict[str, float]:
    """Every number of one seed: the base on the checkpoint maps (evaluation seed `seed + 1`) and on the final maps
    (seed `seed + 2`), then each arm of `ARMS` from a copy of the base (training seed `seed`), checkpointed on the
    first set and finally evaluated on the second; with `mi`, the first-turn MI of the base and of each final policy
    on the first `mi_tasks` final maps. The effect is `starpo_s_minus_starpo` (final held-out success)."""
    design = design or DesignConfig()
    begin = time.perf_counter()
    course_config.seed_everything(seed)
    base, tokenizer = data.load_base(lake_reasoning.BASE_NAME, "cpu")
    start, _ = held_out(base, tokenizer, design.eval_tasks, seed + 1)
    base_final, base_trajectories = held_out(base, tokenizer, design.final_eval_tasks, seed + 2)
    numbers = {f"base_{key}": value for key, value in base_final.items()}
    numbers["base_checkpoint_success"] = start["success"]
    if mi:
        mi_base = mutual_information(base, tokenizer, base_trajectories[: design.mi_tasks], design.mi_samples, seed)
        numbers |= {f"base_{key}": value for key, value in mi_base.items()}
    for arm in ARMS:
        course_config.seed_everything(seed)
        model = copy.deepcopy(base)
        history = train(model, tokenizer, grpo_config(design, arm), design.mini_batch_rows, seed,
                        lambda m: held_out(m, tokenizer, design.eval_tasks, seed + 1)[0], design.eval_every,
                        start)  # fmt: skip
        final, trajectories = held_out(model, tokenizer, design.final_eval_tasks, seed + 2)
        if mi:
            final |= mutual_information(model, tokenizer, trajectories[: design.mi_tasks], design.mi_samples, seed)
        numbers |= arm_numbers(arm, history, final)
    numbers["starpo_s_minus_starpo"] = numbers["starpo_s_success"] - numbers["starpo_success"]
    numbers["starpo_minus_base"] = numbers["starpo_success"] - numbers["base_success"]
    numbers["starpo_s_minus_base"] = numbers["starpo_s_success"] - numbers["base_success"]
    numbers["starpo_s_minus_starpo_tracks_state"] = (
        numbers["starpo_s_reasoning_tracks_state"] - numbers["starpo_reasoning_tracks_state"]
    )
    numbers["design_minutes"] = (time.perf_counter() - begin) / 60
    return numbers


def _starpo_s_above(n: Mapping[str, float]) -> bool:
    return at_least(n["starpo_s_minus_starpo"], 0.0) and not math.isnan(n["starpo_s_minus_starpo"])


CLAIM = ClaimSpec(
    "C9.3d",
    "under RAGEN's optimisation schedule (mini-batches of a quarter of the rollout batch, one epoch: 4 optimizer steps "
    "an iteration for StarPO, 1 for StarPO-S after its top-25% filter), StarPO-S ends above StarPO in held-out "
    "success after 60 iterations (256 held-out maps), paired over seeds",
    "RAGEN: StarPO-S (top 25% of groups by reward std, clip-higher, no KL) delays or removes the collapse and raises "
    "success",
    "starpo_s_minus_starpo",
    _starpo_s_above,
    required=False,
    kind="finding",
    effects=(("starpo_s_minus_starpo", 0.0),),
)

SCALED_EFFECT = 0.075
"""The paper's StarPO-S gain on FrozenLake, about 5 to 10 points on success rates near 0.2 (papers.md 3.6), taken
at its midpoint in the same absolute points: the miniature's held-out success (0.2-0.5) is on the paper's scale.
Deciding seeds start at 20: chapter 09's main run recorded StarPO and StarPO-S on seeds 0-2 (the same training maps
and evaluation seed), so those draws were seen under a nearby setting."""

DESIGN = Design(
    chapter="ch09",
    claim=CLAIM,
    scaled_effect=SCALED_EFFECT,
    run=run_seed,
    first_seed=20,
    arms=(("starpo_success", "StarPO"), ("starpo_s_success", "StarPO-S")),
)

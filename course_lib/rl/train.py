"""The RL loop (chapter 00; reused by every RL chapter). The warm start before it is `course_lib.rl.warm_start`.

`train_grpo` repeats `policy_iteration`: sample
(the sampler seam), estimate advantages (the estimator seam), keep some rows (the batch-filter
seam), take policy-gradient steps on the policy tokens (the loss seam), and record metrics with the
time spent in each phase. The seams are chosen by name in `GRPOConfig` (see `course_lib.rl.seams`); the
defaults are GRPO in trajectory mode, chapter 00's algorithm.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from course_lib.algos.aepo import entropy_aware_advantages
from course_lib.algos.filters import FilterConfig
from course_lib.algos.gigpo import GiGPOConfig
from course_lib.algos.graphgpo import GraphGPOConfig
from course_lib.algos.grpo import AGGREGATIONS, kl_k3, masked_aggregate
from course_lib.algos.igpo import IGPOConfig
from course_lib.diagnostics import group_reward_std, rollout_stats
from course_lib.engine.rollout import RolloutBatch, RolloutEngine, SamplingConfig, Trajectory, collate
from course_lib.engine.tree_rollout import TreeConfig
from course_lib.envs.base import TextEnv
from course_lib.models import reference_policy, token_logprobs
from course_lib.rl import micro_batch, run_state, seams, session
from course_lib.validation import at_least, one_of, within

ROLLOUT_MODES = ("trajectory", "step")
"""`GRPOConfig.rollout_mode` (and `evaluate_policy`'s): the samplers test for "trajectory" and treat anything else as
step mode, so a typo would train in one mode and evaluate in the other; the configs refuse it instead."""
ENTROPY_SCOPES = ("policy", "reasoning")
"""`GRPOConfig.entropy_scope`."""
ENTROPY_ROWS = ("all", "zero_variance")
"""`GRPOConfig.entropy_rows`."""
OLD_LOGPROBS = ("auto", "sampler", "update")
"""`GRPOConfig.old_logprobs`."""


def recomputes_old_logprobs(config: GRPOConfig, sampling_precision: str) -> bool:
    """Whether the update takes its old log-probs from its own forward (`GRPOConfig.old_logprobs`): always for
    `update`, never for `sampler`, and for `auto` when the sampler's precision or the update's is not float32."""
    if config.old_logprobs != "auto":
        return config.old_logprobs == "update"
    return config.autocast != "none" or sampling_precision != "fp32"


def stored_logprob_error(model: torch.nn.Module, trajectories: Sequence[Trajectory], pad_id: int) -> float:
    """The largest difference, over policy tokens, between the log-prob the rollout engine stored while sampling a
    token and that token's log-prob from one forward over the padded batch (`[B, T]`, `token_logprobs`): 0 up to
    float rounding when the engine's incremental decoding scores what the trainer will score."""
    width = max(len(t.token_ids) for t in trajectories)
    ids = torch.full((len(trajectories), width), pad_id)
    attention = torch.zeros_like(ids)
    for row, t in enumerate(trajectories):
        ids[row, : len(t.token_ids)] = torch.tensor(t.token_ids)
        attention[row, : len(t.token_ids)] = 1
    with torch.no_grad():
        recomputed, _ = token_logprobs(model, ids, attention)
    error = 0.0
    for row, t in enumerate(trajectories):
        policy = [k for k, m in enumerate(t.loss_mask) if m]
        stored = torch.tensor([t.logprobs[k] for k in policy])
        error = max(error, float((stored - recomputed[row, policy]).abs().max()))  # position k scores token k
    return error


@dataclass
class GRPOConfig:
    """GRPO training loop (defaults: chapter 00's cpu preset)."""

    iterations: int = 30
    """Rollout-then-update iterations."""
    prompts_per_iteration: int = 8
    """Distinct tasks per iteration; each is one group."""
    group_size: int = 8
    """Samples per task (G in the GRPO paper)."""
    learning_rate: float = 5e-4
    """AdamW learning rate."""
    clip_low: float = 0.2
    """Lower clip epsilon of the ratio."""
    clip_high: float = 0.2
    """Upper clip epsilon (raise above clip_low for DAPO's clip-higher)."""
    aggregation: str = "token-mean"
    """How token losses are averaged: see `algos.grpo.masked_aggregate`."""
    scale_by_std: bool = True
    """Divide advantages by the group's std (GRPO) or not (Dr. GRPO)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL penalty to the reference policy (needs a peft model)."""
    entropy_coef: float = 0.0
    """Weight of an entropy bonus on policy tokens."""
    entropy_scope: str = "policy"
    """Where the entropy bonus acts: `policy` (every policy token) or `reasoning` (only the policy tokens inside
    `<think> ... </think>`, tags excluded: `reasoning_mask`), so that a bonus can loosen what the reasoning says
    without loosening the format around it (chapter 10 induces template collapse this way)."""
    entropy_rows: str = "all"
    """Which rows the entropy bonus acts on: `all`, or `zero_variance` (only the rows of groups whose rewards are
    all equal, where GRPO's task advantage is 0 and the bonus is the only force: RAGEN-2's low-SNR regime,
    isolated; `zero_variance_rows`)."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip."""
    micro_batch_tokens: int = 0
    """Padded tokens per forward of the update (`course_lib.rl.micro_batch`): 0 runs the batch at once; a budget splits
    its rows into micro-batches whose gradients add up to the whole batch's (one extra forward without a graph), so
    that a real vocabulary's logits fit in memory."""
    gradient_checkpointing: bool = False
    """Recompute a layer's activations in the update's backward instead of keeping them
    (`micro_batch.memory_options`): for a real model on a GPU; the same gradient."""
    autocast: str = "none"
    """The update's forwards: `none` (float32) or `bf16` (matrix products under bfloat16 autocast, logits scored in
    float32)."""
    old_logprobs: str = "auto"
    """What the ratio's denominator is (`OLD_LOGPROBS`): `sampler`, the log-probs the rollout engine stored; `update`,
    the update's own forward on the batch before its first step (detached), so the first ratio is exactly 1 and the
    sampler's precision cannot leak into it (verl recomputes them; a bf16 sampler's differ from a float32 forward's
    by about 0.03 nats a token on SmolLM2); `auto`, `update` when the sampler or the update runs in bf16, else
    `sampler` (the float32 runs are bit-identical to before)."""
    updates_per_batch: int = 1
    """Optimizer steps on each batch of rollouts (1 is on-policy)."""
    mask_observations: bool = True
    """Train only on policy tokens. False also trains on tool/environment tokens (an ablation)."""
    eval_every: int = 10
    """Run the evaluation callback every this many iterations (and at the start and end)."""
    sampler: str = "groups"
    """The sampler seam (`seams.SEAMS["sampler"]`): `groups` samples `group_size` episodes per task."""
    advantage: str = "grpo"
    """The advantage-estimator seam: `grpo`, `gigpo`, `graphgpo`, `tree_grpo` (with the `tree` sampler) or `igpo`
    (with the `igpo` sampler); each method's settings are its field below, defined beside its equations in `algos`."""
    batch_filter: str = "none"
    """The batch-filter seam: `none` trains on every row; `starpo_s` and `snr_top_p` keep whole groups by their
    reward spread (`filter`). A batch with no row kept is not trained on (`skipped_update` 1)."""
    policy_loss: str = "clipped"
    """The policy-loss seam: `clipped` is the clipped surrogate with `clip_low` and `clip_high`; `entropy_balanced`
    is AEPO's (the same value, with gradient kept above the upper bound)."""
    entropy_advantage: float = 0.0
    """AEPO's entropy-aware advantage: when positive, each token's advantage is multiplied by 1 + this * z, z its
    entropy standardised over the batch's policy tokens (`algos.aepo.entropy_aware_advantages`; the paper's 0.2).
    0 leaves advantages alone, as AEPO's released recipes do in effect."""
    rollout_mode: str = "trajectory"
    """`trajectory`: one growing sequence per episode; `step`: one short sequence per step (`step_mode`)."""
    history_window: int = 0
    """Step mode: (observation, action) pairs of earlier steps shown before the current observation."""
    anchor_source: str = "observation"
    """Step mode: what a step's anchor is, the raw observation (verl-agent) or the env's true `state`."""
    invalid_penalty: float = 0.0
    """Subtracted per invalid action from the episode score of its row (and, for GiGPO, from its step
    return), step-local and after discounting, as verl-agent's invalid-action penalty (0.1 there)."""
    gigpo: GiGPOConfig = field(default_factory=GiGPOConfig)
    """GiGPO's settings (`algos.gigpo`; used when `advantage="gigpo"`)."""
    graphgpo: GraphGPOConfig = field(default_factory=GraphGPOConfig)
    """GraphGPO's settings (`algos.graphgpo`: omega, beta_G; used when `advantage="graphgpo"`)."""
    tree: TreeConfig = field(default_factory=TreeConfig)
    """ARPO's tree sampler's settings (used when `sampler="tree"`; `group_size` is its budget M)."""
    filter: FilterConfig = field(default_factory=FilterConfig)
    """The batch filters' settings (used when `batch_filter` is `starpo_s` or `snr_top_p`)."""
    igpo: IGPOConfig = field(default_factory=IGPOConfig)
    """IGPO's settings (`algos.igpo`; used by the `igpo` sampler and estimator)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse unknown modes and impossible sizes and rates with a ValueError naming the field and what it allows.

        Runs on construction (and `dataclasses.replace`) and again when `train_grpo` starts, for a config changed
        in place. The nested `tree` and `filter` settings are checked here too. The four seam names are not: a
        method may register its function after the config is made (chapter 09's critic does), so `train_grpo`
        resolves them before its first rollout, with `seams.resolve`'s error listing what is registered."""
        at_least("GRPOConfig.iterations", self.iterations, 0)
        at_least("GRPOConfig.prompts_per_iteration", self.prompts_per_iteration, 1)
        at_least("GRPOConfig.group_size", self.group_size, 1)
        at_least("GRPOConfig.learning_rate", self.learning_rate, 0.0, strict=True)
        within("GRPOConfig.clip_low", self.clip_low, 0.0, 1.0)
        at_least("GRPOConfig.clip_high", self.clip_high, 0.0)
        one_of("GRPOConfig.autocast", self.autocast, micro_batch.AUTOCAST)
        one_of("GRPOConfig.old_logprobs", self.old_logprobs, OLD_LOGPROBS)
        one_of("GRPOConfig.aggregation", self.aggregation, AGGREGATIONS)
        at_least("GRPOConfig.kl_coef", self.kl_coef, 0.0)
        one_of("GRPOConfig.entropy_scope", self.entropy_scope, ENTROPY_SCOPES)
        one_of("GRPOConfig.entropy_rows", self.entropy_rows, ENTROPY_ROWS)
        at_least("GRPOConfig.max_grad_norm", self.max_grad_norm, 0.0, strict=True)
        at_least("GRPOConfig.micro_batch_tokens", self.micro_batch_tokens, 0)
        at_least("GRPOConfig.updates_per_batch", self.updates_per_batch, 1)
        at_least("GRPOConfig.eval_every", self.eval_every, 1)
        for seam in ("sampler", "advantage", "batch_filter", "policy_loss"):
            if not isinstance(getattr(self, seam), str) or not getattr(self, seam):
                raise ValueError(f"GRPOConfig.{seam} must be a registered name (seams.SEAMS[{seam!r}])")
        one_of("GRPOConfig.rollout_mode", self.rollout_mode, ROLLOUT_MODES)
        at_least("GRPOConfig.history_window", self.history_window, 0)
        from course_lib.engine.step_mode import ANCHOR_SOURCES  # here: importing the loop loads no step-mode code

        one_of("GRPOConfig.anchor_source", self.anchor_source, ANCHOR_SOURCES)
        at_least("GRPOConfig.invalid_penalty", self.invalid_penalty, 0.0)
        self.gigpo.validate()
        self.graphgpo.validate()
        self.tree.validate()
        self.filter.validate()
        self.igpo.validate()


GROUP_RELATIVE = frozenset({"grpo"})
"""The course's advantage estimators whose only baseline is the other samples of the group (so a group whose samples
are all alike teaches nothing). GiGPO's and GraphGPO's step groups, Tree-GRPO's siblings and IGPO's per-turn gains
can still differ within one episode or tree, so they are not listed."""


def idle_settings(config: GRPOConfig, sampling: SamplingConfig) -> list[str]:
    """Why `config` with `sampling` would learn nothing from its rewards, one line per reason (empty when it can): a
    group of one
    or greedy sampling leave a group-relative estimator (`GROUP_RELATIVE`) no difference to learn from, so every
    advantage is 0 and every update a no-op. A critic's estimator (chapter 09's) learns from either."""
    if config.advantage not in GROUP_RELATIVE or config.iterations == 0:
        return []
    reasons = []
    if config.group_size == 1:
        reasons.append(
            f"grpo.group_size=1 with the {config.advantage!r} estimator: each sample is its own group, so "
            "every advantage is 0 and the rewards teach nothing; use groups of 2 or more (the course uses 4-8)"
        )
    if sampling.temperature == 0:
        reasons.append(
            f"sampling.temperature=0 (greedy) with the {config.advantage!r} estimator: a group's samples "
            "are alike, so its advantages are 0 and the rewards teach nothing; sample at a temperature > 0 (the "
            "course uses 1.0)"
        )
    return reasons


def train_grpo(
    model: torch.nn.Module,
    tokenizer,
    make_env: Callable[[], TextEnv],
    sampling: SamplingConfig,
    config: GRPOConfig,
    seed: int,
    evaluate: Callable[[torch.nn.Module], dict[str, float]] | None = None,
    checkpoint_dir: str | Path | None = None,
    progress: bool = False,
    stop: Callable[[dict[str, float]], bool] | None = None,
    on_iteration: Callable[[dict[str, float]], None] | None = None,
    resume: bool = False,
    save_every: int = 1,
    settings: object | None = None,
) -> list[dict[str, float]]:
    """Train `model` with GRPO on tasks from `make_env()`.

    Returns one metrics dict per iteration, plus a last record holding only the final evaluation
    (`iteration` = `config.iterations`), so evaluation curves include the trained model.

    Task seeds come from `seed`, so two runs with the same arguments give the same history.
    Evaluation results (if `evaluate` is given) are stored under `eval_*` keys. `stop`, if given, sees every
    record that holds an evaluation, the final one included, before that iteration's update; when it returns True
    training ends there and that record is the last (an early stop, e.g. chapter 12's input-dependence monitor,
    which then rolls back: at the final evaluation, too).

    `on_iteration`, if given, is called with each record once it is complete (after that iteration's update; the
    last record, the final evaluation, too), in order, so that an experiment tracker can log it as it happens.

    `checkpoint_dir`, if given, receives a checkpoint after every `save_every`-th update and after the last one
    (`course_lib.rl.run_state`: model and tokenizer with `save_pretrained` in `checkpoint_dir/latest`, plus the
    optimizer, the iteration, the history and every random state; written atomically). With `resume=True` the run
    continues from the checkpoint found there (and says so: "resumed from iteration k"), and its history and weights
    equal those of a run that was never interrupted (the `time_*` keys aside); an existing empty folder starts a
    fresh run (and says so), while a folder that does not exist, a `latest/` without its training state, a damaged
    state file and a checkpoint from another config, sampling, seed or `settings` (the chapter's whole resolved
    config, when given: `run_state.fingerprint`) are refused. `iterations` is not part of that check, so a finished
    run can be extended. In a run session that checkpoints (`session.checkpointing(folder, resume)`: a chapter
    command's `--checkpoint-dir` and `--resume`) a call without a `checkpoint_dir` checkpoints into a folder of its
    own there, and the session's observers (`session.observing`: trackers, progress lines) hear of the run.

    The callbacks are the caller's to keep deterministic: `evaluate` and `stop` should depend on the model only.
    `on_iteration` is called before the checkpoint is written, so a callback that draws random numbers leaves the
    saved random states where the uninterrupted run has them; a run interrupted in between logs that record twice. A
    resumed run calls it for its new records only (the restored ones were logged by the run that made them).
    """
    config.validate()  # again: a config may have been changed in place since it was made
    for seam in ("sampler", "advantage", "batch_filter", "policy_loss"):
        seams.resolve(seam, getattr(config, seam))  # an unknown name fails here, not after the first evaluation
    running = session.current()
    if checkpoint_dir is None and running.checkpoints is not None:  # a command's --checkpoint-dir: this run's folder
        checkpoint_dir, resume, given = running.checkpoints.place(method_label(config))
        settings = given if settings is None else settings
    if resume and checkpoint_dir is None:
        raise ValueError("resume=True needs the checkpoint_dir to resume from")
    at_least("save_every", save_every, 1)
    if config.rollout_mode == "step" and sampling.snapshot_envs:
        from course_lib.engine.step_mode import STEP_MODE_SNAPSHOTS

        raise ValueError(STEP_MODE_SNAPSHOTS)  # before any sampling, not inside the first rollout
    for hint in idle_settings(config, sampling):
        warnings.warn(hint, RuntimeWarning, stacklevel=2)
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=config.learning_rate, weight_decay=0.0)
    engine = RolloutEngine(model, tokenizer, sampling)
    envs = [make_env() for _ in range(config.prompts_per_iteration * config.group_size)]
    history: list[dict[str, float]] = []
    fingerprint = run_state.fingerprint(config, sampling, seed, settings)
    start = 0
    if resume:
        run_state.check_resumable(checkpoint_dir)
    saved = run_state.load(checkpoint_dir) if resume else None
    if resume and saved is None:
        print(f"no checkpoint in {checkpoint_dir} yet: a fresh run from iteration 0", flush=True)
    if saved is not None:
        run_state.check_fingerprint(saved["fingerprint"], fingerprint, Path(checkpoint_dir))
        if saved["iteration"] >= config.iterations:
            raise ValueError(f"the checkpoint in {checkpoint_dir} has finished {saved['iteration'] + 1} iterations, "
                             f"more than this run's {config.iterations}")  # fmt: skip
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        run_state.restore_random_states(saved["random"], generator)
        history, start = saved["history"], saved["iteration"] + 1
        print(f"resumed from iteration {saved['iteration']} in {checkpoint_dir}: continuing at iteration {start} of "
              f"{config.iterations}", flush=True)  # fmt: skip
    hooks = [observer(config, sampling, start) for observer in running.observers]

    def report(record: dict[str, float]) -> None:
        if on_iteration is not None:
            on_iteration(record)
        for log, _ in hooks:
            log(record)

    bar = tqdm(total=config.iterations + 1, initial=start, disable=not progress, desc=method_label(config))
    with bar, contextlib.ExitStack() as ending:  # bar counted by hand: a wrapped range would end one short
        for _, end in hooks:
            ending.callback(end)  # the observers hear a run end, after an error too
        for iteration in range(start, config.iterations + 1):
            record: dict[str, float] = {"iteration": iteration}
            evaluated = evaluate is not None and (iteration % config.eval_every == 0 or iteration == config.iterations)
            if evaluated:
                record.update({f"eval_{k}": v for k, v in evaluate(model).items()})
            stopping = stop is not None and evaluated and stop(record)  # asked at the last evaluation too
            if iteration == config.iterations or stopping:
                history.append(record)
                bar.update()
                report(record)
                break
            record.update(policy_iteration(model, engine, envs, config, seed, iteration, generator, optimizer))
            history.append(record)
            bar.update()
            report(record)
            if checkpoint_dir is not None and ((iteration + 1) % save_every == 0 or iteration + 1 == config.iterations):
                state = {"fingerprint": fingerprint, "iteration": iteration,
                         "history": run_state.plain_history(history), "model": model.state_dict(),
                         "optimizer": optimizer.state_dict(), "random": run_state.random_states(generator)}  # fmt: skip
                run_state.save(checkpoint_dir, model, tokenizer, state)
    return history


def method_label(config: GRPOConfig) -> str:
    """What a run trains with, for its progress bar, tracker run and checkpoint folder: the advantage estimator's
    name, then each seam or mode that differs from chapter 00's GRPO and, for the estimator, a discount other than
    GiGPO's default and mean-only normalisation, e.g. `grpo`, `gigpo [step mode]`, `gigpo [step mode, gamma 1]`,
    `gigpo [no std]`, `grpo [tree, snr_top_p, entropy_balanced]`."""
    gamma = config.gigpo.gamma
    extras = [
        config.sampler if config.sampler != "groups" else "",
        f"{config.rollout_mode} mode" if config.rollout_mode != "trajectory" else "",
        config.batch_filter if config.batch_filter != "none" else "",
        config.policy_loss if config.policy_loss != "clipped" else "",
        f"gamma {gamma:g}" if config.advantage == "gigpo" and gamma != GiGPOConfig.gamma else "",
        "no std" if not config.scale_by_std else "",
    ]
    extras = [extra for extra in extras if extra]
    return f"{config.advantage} [{', '.join(extras)}]" if extras else config.advantage


def policy_iteration(
    model: torch.nn.Module,
    engine: RolloutEngine,
    envs: Sequence[TextEnv],
    config: GRPOConfig,
    seed: int,
    iteration: int,
    generator: torch.Generator,
    optimizer: torch.optim.Optimizer,
) -> dict[str, float]:
    """One sample-filter-estimate-update iteration through the four seams of `config` (`course_lib.rl.seams`);
    returns its metrics and phase timings (seconds).

    `clip_fraction` and `ratio_mean` are those of the last update; with `updates_per_batch > 1` the
    metrics also hold `clip_fraction_update_k` for each update k (0 at k = 0, where every ratio is 1 up to rounding).
    """
    if config.entropy_scope not in ("policy", "reasoning"):
        raise ValueError(f"entropy_scope must be 'policy' or 'reasoning', got {config.entropy_scope!r}")
    if config.entropy_rows not in ("all", "zero_variance"):
        raise ValueError(f"entropy_rows must be 'all' or 'zero_variance', got {config.entropy_rows!r}")
    sample = seams.resolve("sampler", config.sampler)
    estimate = seams.resolve("advantage", config.advantage)
    keep_rows = seams.resolve("batch_filter", config.batch_filter)
    policy_loss = seams.resolve("policy_loss", config.policy_loss)
    device = next(model.parameters()).device
    start = time.perf_counter()
    prompts = config.prompts_per_iteration
    task_seeds = [seed * 1_000_003 + iteration * prompts + p for p in range(prompts)]
    for env in envs:  # scheduled rewards (reward scales, curricula) read the iteration from here
        env.training_step = iteration
    rollouts = sample(engine, envs, task_seeds, config, generator)
    rolled = time.perf_counter()

    batch = collate(rollouts.rows, engine.tokenizer.pad_token_id, rollouts.step_extras).to(device)
    keep = keep_rows(batch, config)
    sampled = {**rollout_stats(rollouts.episodes), "reward_std": group_reward_std(rollouts.episodes), **rollouts.stats}
    if config.batch_filter != "none":
        sampled |= {"kept_rows": float(keep.float().mean()), "skipped_update": float(not keep.any())}
    if not bool(keep.any()):  # nothing informative to train on (RAGEN-2 skips such a step)
        return {**sampled, "time_rollout": rolled - start, "time_advantage": time.perf_counter() - rolled,
                "time_update": 0.0}  # fmt: skip
    if not bool(keep.all()):
        batch = batch.select(keep)
    advantages, estimator_stats = estimate(batch, config)
    loss_mask = (
        batch.loss_mask
        if config.mask_observations
        else observation_and_policy_mask(batch.turn_ids, batch.attention_mask)
    )
    advantaged = time.perf_counter()

    temperature, budget = engine.config.temperature, config.micro_batch_tokens
    own_old = recomputes_old_logprobs(config, engine.config.precision)
    old_logprobs = None if own_old else batch.old_logprobs  # None: the first update's own forward fills it in
    if not config.mask_observations and not own_old:
        with torch.no_grad():  # observation tokens were never sampled: take the pre-update policy's log-probs
            old_logprobs, _ = micro_batch.logprobs_and_entropy(
                model, batch.input_ids, batch.attention_mask, temperature, budget
            )
    entropy_mask = loss_mask if config.entropy_scope == "policy" else reasoning_mask(batch, engine.tokenizer)
    if config.entropy_rows == "zero_variance":
        entropy_mask = entropy_mask * zero_variance_rows(batch)[:, None].to(entropy_mask.dtype)
    model.train()
    stats: dict[str, float] = {}
    per_update: dict[str, float] = {}

    def whole_batch_loss(logprobs: torch.Tensor, entropy: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """The update's loss on the whole batch from its `[B, T]` log-probs and entropies."""
        nonlocal old_logprobs
        if old_logprobs is None:  # the first update's own forward, before any step: the ratio is exactly 1
            old_logprobs = logprobs.detach()
        weighted = advantages
        if config.entropy_advantage:  # AEPO: the current policy's entropy, through a stop-gradient
            weighted = entropy_aware_advantages(advantages, entropy, loss_mask, config.entropy_advantage)
        loss, stats = policy_loss(logprobs, old_logprobs, weighted, loss_mask, config)
        if config.entropy_coef:
            loss = loss - config.entropy_coef * masked_aggregate(entropy, entropy_mask, config.aggregation)
        if config.kl_coef:
            with torch.no_grad(), reference_policy(model) as reference:
                ref_logprobs, _ = micro_batch.logprobs_and_entropy(
                    reference, batch.input_ids, batch.attention_mask, temperature, budget
                )
            kl = masked_aggregate(kl_k3(logprobs, ref_logprobs), loss_mask, config.aggregation)
            loss = loss + config.kl_coef * kl
            stats["kl"] = kl.item()
        return loss, stats

    for update in range(config.updates_per_batch):
        optimizer.zero_grad(set_to_none=True)
        with micro_batch.memory_options(model, config.gradient_checkpointing, config.autocast):
            loss, stats = micro_batch.backward(
                model, batch.input_ids, batch.attention_mask, temperature, whole_batch_loss, budget
            )
        if config.updates_per_batch > 1:  # the clip can only act from the second update on (ratio 1 at the first)
            per_update[f"clip_fraction_update_{update}"] = stats["clip_fraction"]
        grad_norm = torch.nn.utils.clip_grad_norm_(
            [p for p in model.parameters() if p.requires_grad], config.max_grad_norm
        )
        optimizer.step()
    model.eval()
    updated = time.perf_counter()
    return {
        **sampled,
        "loss": loss.item(),
        "grad_norm": float(grad_norm),
        **stats,
        **per_update,
        **estimator_stats,
        "time_rollout": rolled - start,
        "time_advantage": advantaged - rolled,
        "time_update": updated - advantaged,
    }


def reasoning_mask(batch: RolloutBatch, tokenizer) -> torch.Tensor:
    """`[B, T]` 1 on the policy tokens strictly inside a `<think> ... </think>` pair (the reasoning's content, tags
    excluded), 0 elsewhere. Tags alternate in a well-formed turn; a `<think>` left open marks the rest of its turn's
    policy tokens as reasoning."""
    think, end = tokenizer.convert_tokens_to_ids("<think>"), tokenizer.convert_tokens_to_ids("</think>")
    ids = batch.input_ids
    depth = (ids == think).long().cumsum(-1) - (ids == end).long().cumsum(-1)
    return ((depth > 0) & (ids != think) & (ids != end)).float() * batch.loss_mask


def zero_variance_rows(batch: RolloutBatch) -> torch.Tensor:
    """`[B]` bool, True on the rows of groups whose rewards are all equal (whole groups; rows of an episode repeat
    its reward, which leaves "all equal" unchanged, so this holds in step mode too)."""
    from course_lib.algos.filters import group_reward_std as stds_by_group

    order, stds = stds_by_group(batch.rewards.detach().cpu(), batch.group_ids.detach().cpu())
    flat = {group for group, std in zip(order, stds.tolist(), strict=True) if std <= 1e-12}
    return torch.tensor([int(g) in flat for g in batch.group_ids.tolist()], device=batch.input_ids.device)


def observation_and_policy_mask(turn_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """A loss mask over everything after the prompt: policy *and* observation tokens (`[B, T]`)."""
    return ((turn_ids >= 0) & attention_mask.bool()).float()


def evaluate_policy(
    model: torch.nn.Module,
    tokenizer,
    make_env: Callable[[], TextEnv],
    seeds: Sequence[int],
    sampling: SamplingConfig,
    seed: int,
    rollout_mode: str = "trajectory",
    history_window: int = 0,
) -> tuple[dict[str, float], list]:
    """Roll out once per seed (all in one batch) and summarise with `rollout_stats`; in step mode the
    episodes are `step_mode.Episode`s."""
    one_of("rollout_mode", rollout_mode, ROLLOUT_MODES)
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    engine = RolloutEngine(model, tokenizer, sampling)
    made = [make_env() for _ in seeds]
    if rollout_mode == "step":
        from course_lib.engine.step_mode import rollout_steps

        episodes = rollout_steps(engine, made, list(seeds), generator=generator, window=history_window)
        return rollout_stats(episodes), episodes
    trajectories = engine.rollout(made, list(seeds), generator=generator)
    return rollout_stats(trajectories), trajectories

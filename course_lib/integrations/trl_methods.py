"""The course's methods inside TRL's `GRPOTrainer` (trl 1.16.0): GiGPO (trajectory and step mode), the StarPO-S and
SNR group filters, and AEPO's entropy-balanced clip, each computed by the course's own functions
(`course_lib.rl.seams`).

`CourseMethodTrainer` is a `GRPOTrainer` that takes the course's `train.GRPOConfig` (`course`) and overrides three
methods, each the smallest place TRL 1.16 leaves for it:

- `_generate_and_score_completions`: TRL has no public advantage-estimator or batch-filter hook. Its advantages are
  computed inline from the reward functions' scalars (GRPO, std + 1e-4), and it merges every extra field of the
  `rollout_func` into the inputs it was given, so after `super()` returns the override finds the rows that
  `trl_rollouts` forwarded (`course_rows`). It rebuilds the course's `RolloutBatch` in TRL's completion layout with
  `rollout.collate`, applies the course's batch filter (`seams.starpo_s`, `seams.snr_top_p`: dropped groups get a zero
  loss mask, `tool_mask`, and `num_items_in_batch`, the normaliser of TRL's "dapo" token mean, is recounted, so the
  loss is the course's token mean over the kept tokens), and replaces TRL's advantages with the course estimator's
  on the kept rows (`seams.grpo`: the course's eps 1e-6; `seams.gigpo`: per token, `[B, T]`, which TRL's loss
  accepts). In step mode (one row per environment step, as verl-agent trains GiGPO) TRL's one completion per slot
  cannot hold an episode, so the override rebuilds every batch tensor from all step rows of the episodes
  (`step_layout`). The old log-probs become the sampler's (`RolloutBatch.old_logprobs`), as in the course's loop.
- `_compute_loss`: TRL computes its per-token loss inline, with no per-token hook. AEPO's balanced clip has the hard
  clip's value and differs only in the gradient of a positive-advantage token above 1 + eps_high (Dong et al. 2025,
  arXiv 2510.14545; `algos.aepo`); so the override keeps TRL's loss (`delta` = 3 is verl's dual clip) and adds a term
  whose value is exactly 0 and whose gradient is that missing -(1 + eps_high) A grad log pi, with TRL's normaliser.
  The current log-probs come from `_get_per_token_logps_and_entropies`, which the subclass remembers.
- `training_step`: a batch whose filter kept nothing is not trained on (the course skips the update, as RAGEN-2
  does). TRL would still take an AdamW step, which moves weights through the moments even at zero gradient, so the
  override drops the gradients (`grad = None`) and the optimizer leaves every parameter alone.

What the course's loop does and this route does not is refused at construction (`unsupported`).
"""

from __future__ import annotations

import torch

from course_lib.algos.aepo import DUAL_CLIP
from course_lib.engine.rollout import RolloutBatch, collate
from course_lib.integrations.course_trl import GRPOTrainer
from course_lib.integrations.trl_rollouts import row_trajectory
from course_lib.rl import seams
from course_lib.rl.train import GRPOConfig

POLICY_LOSSES = {"clipped": None, "entropy_balanced": DUAL_CLIP}
"""The course's policy losses this route trains, with the TRL `GRPOConfig.delta` each needs: none for the hard clip,
verl's dual clip 3 for AEPO's (`algos.aepo`). TRL caps every token's unclipped ratio at `delta`, which changes only
a negative-advantage token's loss (a positive one's is clipped lower already): exactly the dual clip."""


def unsupported(args, course: GRPOConfig, processes: int) -> list[str]:
    """Why TRL (with `args`) cannot compute what the course's loop computes with `course`: one line per reason."""
    delta = POLICY_LOSSES.get(course.policy_loss, "unknown")
    checks = {
        "loss_type must be 'dapo' (the course's token mean)": args.loss_type == "dapo",
        "GRPOConfig.aggregation must be 'token-mean'": course.aggregation == "token-mean",
        "importance_sampling_level must be 'token'": args.importance_sampling_level == "token",
        "no KL term (beta 0, kl_coef 0)": args.beta == 0.0 and course.kl_coef == 0.0,
        "one update per batch (num_iterations 1, updates_per_batch 1)": args.num_iterations == 1
        and course.updates_per_batch == 1,
        "one process: groups must be whole where the estimator runs": processes == 1,
        "mask_truncated_completions off (the course trains on cut rows)": not args.mask_truncated_completions,
        "observations masked, no entropy bonus or entropy-aware advantage": course.mask_observations
        and course.entropy_coef == 0.0
        and course.entropy_advantage == 0.0,
        "no entropy mask, entropy bonus or off-policy mask": args.top_entropy_quantile == 1.0
        and args.entropy_coef == 0.0
        and not args.use_adaptive_entropy
        and args.off_policy_mask_threshold is None,
        "no vLLM": not args.use_vllm,
        f"policy_loss must be one of {sorted(POLICY_LOSSES)}": delta != "unknown",
        f"delta must be {delta} for policy_loss {course.policy_loss!r}": delta == "unknown" or args.delta == delta,
        "epsilon and epsilon_high must be the course's clip_low and clip_high": args.epsilon == course.clip_low
        and (args.epsilon_high if args.epsilon_high is not None else args.epsilon) == course.clip_high,
        "step mode needs steps_per_generation 1 (its row count varies) and no pad_to_multiple_of": (
            course.rollout_mode == "trajectory" or (args.steps_per_generation == 1 and args.pad_to_multiple_of is None)
        ),
        "num_generations must be the course's group_size": args.num_generations == course.group_size,
    }
    return [reason for reason, ok in checks.items() if not ok]


def completion_batch(rows: list[dict], pad_id: int, width: int) -> RolloutBatch:
    """The course's `RolloutBatch` of `rows` (`trl_rollouts.row_fields`) in TRL's completion layout: row b's tokens
    are its completion, right-padded to `width` (`[B, width]`), built by the course's own `rollout.collate`."""
    batch = collate([row_trajectory(row) for row in rows], pad_id)
    extra = width - batch.input_ids.shape[1]
    if extra < 0:
        raise ValueError(f"a row's completion is longer than TRL's ({batch.input_ids.shape[1]} > {width})")
    if extra:  # TRL padded to a multiple (`pad_to_multiple_of`)
        pads = {"input_ids": pad_id, "turn_ids": -1}
        for name in ("input_ids", "attention_mask", "loss_mask", "old_logprobs", "entropies", "turn_ids"):
            value = getattr(batch, name)
            setattr(batch, name, torch.nn.functional.pad(value, (0, extra), value=pads.get(name, 0)))
    return batch


def _padded(sequences: list[list], value, dtype, left: bool = False) -> torch.Tensor:
    """`[N, max length]` of `sequences`, padded with `value` on the right (or the left)."""
    width = max((len(s) for s in sequences), default=0)
    out = torch.full((len(sequences), width), value, dtype=dtype)
    for i, s in enumerate(sequences):
        if s:
            start = width - len(s) if left else 0
            out[i, start : start + len(s)] = torch.tensor(s, dtype=dtype)
    return out


def step_layout(rows: list[dict], pad_id: int, device) -> dict[str, torch.Tensor]:
    """TRL's batch tensors for step-mode rows (one per environment step, `[R, ...]`): prompts left-padded,
    completions right-padded (as TRL pads them), their masks, `tool_mask` (the policy's tokens; padding 1, as TRL
    pads it) and the sampler's log-probs."""
    prompts = [row["prompt_ids"] for row in rows]
    completions = [row["completion_ids"] for row in rows]
    tensors = {
        "prompt_ids": _padded(prompts, pad_id, torch.long, left=True),
        "prompt_mask": _padded([[1] * len(p) for p in prompts], 0, torch.long, left=True),
        "completion_ids": _padded(completions, pad_id, torch.long),
        "completion_mask": _padded([[1] * len(c) for c in completions], 0, torch.long),
        "tool_mask": _padded([row["env_mask"] for row in rows], 1, torch.long),
        "sampling_per_token_logps": _padded([row["logprobs"] for row in rows], 0.0, torch.float),
    }
    return {name: value.to(device) for name, value in tensors.items()}


class CourseMethodTrainer(GRPOTrainer):
    """`GRPOTrainer` whose advantages, batch filter and policy loss are the course's (`course`, a
    `train.GRPOConfig`, read through `seams.resolve`); its `rollout_func` must forward `course_rows`
    (`trl_rollouts`). The module docstring says which methods are overridden and why."""

    def __init__(self, *args, course: GRPOConfig, **kwargs):
        super().__init__(*args, **kwargs)
        reasons = unsupported(self.args, course, self.accelerator.num_processes)
        if reasons:
            raise ValueError("TRL cannot train this course configuration exactly: " + "; ".join(reasons))
        if course.sampler == "tree" and course.rollout_mode != "trajectory":
            raise ValueError("the tree sampler forks growing sequences: it needs rollout_mode='trajectory'")
        self.course = course
        self.course_skip = False
        """True while the current batch kept no row (its update is skipped)."""
        self._policy_logps: torch.Tensor | None = None

    def _generate_and_score_completions(self, inputs: list[dict]) -> dict:
        output = super()._generate_and_score_completions(inputs)
        course, mode = self.course, "train" if self.model.training else "eval"
        rows = [row for example in inputs for row in example["course_rows"]]
        device, pad_id = output["completion_ids"].device, self._tokenizer.pad_token_id
        if course.rollout_mode != "trajectory":
            for name in ("old_per_token_logps", "ref_per_token_logps", "importance_sampling_ratio"):
                output.pop(name, None)  # they belong to TRL's one-row-per-episode batch; unsupported() keeps them off
            output |= step_layout(rows, pad_id, device)
        elif len(rows) != len(inputs):
            raise ValueError("in trajectory mode each completion slot forwards exactly one row")
        completion_mask = output["completion_mask"]
        tool_mask = output.get("tool_mask", torch.ones_like(completion_mask))
        batch = completion_batch(rows, pad_id, completion_mask.shape[1]).to(device)
        keep = seams.resolve("batch_filter", course.batch_filter)(batch, course)
        advantages = torch.zeros_like(batch.loss_mask)  # [B, T]; 0 on dropped rows
        if bool(keep.any()):
            kept = batch if bool(keep.all()) else batch.select(keep)
            values, stats = seams.resolve("advantage", course.advantage)(kept, course)
            advantages[keep] = values[:, None].expand_as(kept.loss_mask) if values.dim() == 1 else values
            for name, value in stats.items():
                self._metrics[mode][f"course/{name}"].append(float(value))
        output["tool_mask"] = tool_mask * keep[:, None].to(tool_mask.dtype)
        output["advantages"] = advantages
        output["num_items_in_batch"] = (completion_mask * output["tool_mask"]).sum()
        output["old_per_token_logps"] = output["sampling_per_token_logps"]  # the course's old policy: the sampler's
        self.course_skip = not bool(keep.any())
        self._metrics[mode]["course/kept_rows"].append(float(keep.float().mean()))
        self._metrics[mode]["course/rows"].append(float(len(rows)))
        return output

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):
        result = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        self._policy_logps = result[0]  # the last call's log-probs: `_compute_loss`'s own, read right after
        return result

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        if self.course.policy_loss == "entropy_balanced":
            loss = loss + self.balanced_gradient(inputs)
        return loss

    def balanced_gradient(self, inputs: dict) -> torch.Tensor:
        """AEPO's gradient above the upper clip, as a term of value exactly 0: on each policy token with A > 0 and
        r > 1 + eps_high, -A (1 + eps_high) (r / sg(r) - 1), token-summed and divided by TRL's "dapo" normaliser.
        TRL's hard clip gives that token no gradient; with this term it gets -A (1 + eps_high) grad log pi, which is
        `algos.aepo.balanced_clip_losses`'. Below the bound and for A < 0 TRL's clip (with `delta` = 3) is AEPO's."""
        logps = self._policy_logps
        advantages = inputs["advantages"]
        advantages = (advantages[:, None] if advantages.dim() == 1 else advantages).expand_as(logps)
        mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
        ratio = torch.exp(logps - inputs["old_per_token_logps"])
        above = (ratio > 1 + self.epsilon_high) & (advantages > 0) & mask.bool()
        unit = ratio / ratio.detach() - 1.0  # value 0, gradient grad log pi
        extra = torch.where(above, -advantages * (1 + self.epsilon_high) * unit, torch.zeros_like(unit))
        normaliser = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
        if self.model.training:
            normaliser = normaliser * self.current_gradient_accumulation_steps / self.args.steps_per_generation
        return extra.sum() / normaliser

    def training_step(self, model, inputs, num_items_in_batch):
        loss = super().training_step(model, inputs, num_items_in_batch)
        if self.course_skip:  # nothing kept: no update at all (AdamW skips a parameter without a gradient)
            for parameter in model.parameters():
                parameter.grad = None
        return loss

"""Batched multi-turn rollouts of a policy in text environments (all RL chapters).

One `Trajectory` per sequence carries everything the algorithms and diagnostics need: token ids,
a loss mask that is 1 exactly on tokens the policy sampled (prompt, tool and environment tokens are
0), the sampling log-probs and full-vocabulary entropies of those tokens, the turn each token
belongs to, per-step rewards, anchors and infos, the group id, and for branched sequences the parent
and the branch position.

Token in, token out: an observation is encoded once and appended as ids; the history is never
re-tokenised. All sequences advance in lock-step through one decoder (`hf_decoder.make_decoder`: the lean
`KVDecoder` for the Llama family, the model's own forward over a cache for any other): at each step a sequence
either samples a token or, while its queue holds observation tokens, is fed the next of them.
A turn ends at a stop string (e.g. `</tool_call>`), at EOS for a checkpoint's tokenizer, or after
`max_turn_tokens`; its text, decoded by the tokenizer's own decoder, goes to `env.step`, whose observation is
queued (as the prompt format renders it: `course_lib.engine.prompt_format`). Finished sequences leave the batch.

Stop strings: with the course's word-level tokenizers every tag is one token and is matched by id. A checkpoint's
tokenizer (byte-level BPE) splits `</tool_call>` into several pieces and the policy may spell it with different
ones, so the string is matched on the turn's decoded text and the turn ends at the token that completes it.

Why queued observations are fed one token per step unless every live row has some: feeding each
row's whole observation in one ragged, right-padded step was built and measured (exact against the
model's forward). On the course's tasks the rows of a batch are mostly in phase, so the lock-step
multi-token path already covers most observations, and a ragged step costs 1.3-1.5x a decode step
(dense work on the packed tokens, a wider mask). Old seconds over new per GRPO-shaped batch, medians
over 15 interleaved pairs: ch03 1.03, ch06 0.97-1.02, ch04 0.97-1.00, ch05 0.95-0.97; not kept.
"""

from __future__ import annotations

import time
import warnings
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from course_lib.engine.hf_decoder import left_pad, make_decoder
from course_lib.engine.prompt_format import resolve as resolve_format
from course_lib.engine.sampling_config import PRECISIONS, SamplingConfig
from course_lib.envs.base import TextEnv
from course_lib.tokenizer import decode, is_word_level, single_token_id, tag_id


@dataclass
class Trajectory:
    """One sequence: a prompt, then turns of (policy action tokens, observation tokens)."""

    env: TextEnv
    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    entropies: list[float]
    turn_ids: list[int]
    """-1 for the prompt; k for the action of turn k and the observation that answered it."""
    group_id: int = 0
    seed: int = 0
    rewards: list[float] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    anchors: list[Any] = field(default_factory=list)
    """Anchor of the state each action was taken in (one per step)."""
    snapshots: list[TextEnv] = field(default_factory=list)
    """Environment copies after 0, 1, ... steps (only with `snapshot_envs`)."""
    parent: int | None = None
    branch_position: int | None = None
    traj_id: int | None = None
    """Step mode: the episode this one-step row belongs to (None in trajectory mode: the row is its episode)."""
    step_index: int = 0
    """Step mode: the index of this row's step within its episode (its own turn 0)."""
    episode_reward: float | None = None
    """Step mode: the episode's total reward, which every step row of it carries (as verl-agent does)."""
    terminated: bool = False
    truncated: bool = False
    cut: bool = False
    """The sequence hit `max_total_tokens` while its episode was still running (then also
    `truncated`); its last turn may be incomplete and was never sent to the environment."""

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))

    @property
    def success(self) -> bool:
        return bool(self.infos and self.infos[-1].get("success", False))

    @property
    def num_turns(self) -> int:
        return len(self.rewards)

    def prefix_length(self, steps: int) -> int:
        """Number of tokens up to the end of the observation that answered step `steps` (0: prompt)."""
        return sum(1 for turn in self.turn_ids if turn < steps)


@dataclass
class RolloutBatch:
    """Right-padded tensors of a list of rows (B sequences, T tokens), plus a flat table of their K
    environment steps, so that step-level estimators (GiGPO) find rewards, validity and anchors.

    A row is a whole episode in trajectory mode and one step of an episode in step mode
    (`Trajectory.traj_id` set); either way each step is one entry `k` of the step table, whose action
    tokens are those of row `step_row[k]` with turn id `step_turn[k]` (`broadcast_steps`).
    """

    input_ids: torch.Tensor  # [B, T] long
    attention_mask: torch.Tensor  # [B, T] long
    loss_mask: torch.Tensor  # [B, T] float, 1 on policy tokens only
    old_logprobs: torch.Tensor  # [B, T] float, sampling log-probs (0 off the loss mask)
    entropies: torch.Tensor  # [B, T] float
    turn_ids: torch.Tensor  # [B, T] long, the row's step each token belongs to; -1 for prompt and padding
    rewards: torch.Tensor  # [B] float, total reward of each row's episode
    group_ids: torch.Tensor  # [B] long
    traj_ids: torch.Tensor  # [B] long, the episode of each row
    tree_ids: torch.Tensor  # [B] long, the tree of each row: the row of its first ancestor (its own episode unbranched)
    step_row: torch.Tensor  # [K] long, the row holding step k's action
    step_turn: torch.Tensor  # [K] long, step k's turn id within that row
    step_index: torch.Tensor  # [K] long, step k's index within its episode
    step_traj: torch.Tensor  # [K] long
    step_group: torch.Tensor  # [K] long
    step_reward: torch.Tensor  # [K] float, the environment's reward for step k
    step_valid: torch.Tensor  # [K] bool, `info["valid"]` of step k (True when the env does not say)
    step_anchors: list = field(default_factory=list)  # K anchors (hashable; not tensors)
    step_extras: dict[str, torch.Tensor] = field(default_factory=dict)
    """Per-step numbers a sampler wrote into its steps' infos for its estimator (IGPO's `turn_reward`), by info key,
    `[K]` float each (0 where an info lacks it): a method adds a key here, not a field."""

    def to(self, device: torch.device | str) -> RolloutBatch:
        moved = {name: value.to(device) if torch.is_tensor(value) else value for name, value in vars(self).items()}
        moved["step_extras"] = {key: value.to(device) for key, value in self.step_extras.items()}
        return RolloutBatch(**moved)

    def select(self, keep: torch.Tensor) -> RolloutBatch:
        """The rows where `keep` `[B]` (bool) is True, with their steps (a batch filter's output)."""
        rows = torch.nonzero(keep, as_tuple=True)[0]
        new_row = torch.full((len(keep),), -1, dtype=torch.long, device=keep.device)
        new_row[rows] = torch.arange(len(rows), device=keep.device)
        steps = torch.nonzero(keep[self.step_row], as_tuple=True)[0]
        per_row = {name: getattr(self, name)[rows] for name in ROW_FIELDS}
        per_step = {name: getattr(self, name)[steps] for name in STEP_FIELDS}
        per_step["step_row"] = new_row[self.step_row[steps]]
        extras = {key: value[steps] for key, value in self.step_extras.items()}
        anchors = [self.step_anchors[k] for k in steps.tolist()]
        return RolloutBatch(**per_row, **per_step, step_anchors=anchors, step_extras=extras)


ROW_FIELDS = (
    "input_ids", "attention_mask", "loss_mask", "old_logprobs", "entropies", "turn_ids", "rewards", "group_ids",
    "traj_ids", "tree_ids",
)  # fmt: skip
STEP_FIELDS = (
    "step_row", "step_turn", "step_index", "step_traj", "step_group", "step_reward", "step_valid",
)  # fmt: skip


def tree_roots(trajectories: Sequence[Trajectory]) -> list[int]:
    """Each row's tree (Tree-GRPO's intra-tree group): the row of its first ancestor through `Trajectory.parent`
    (a tree sampler's rows, whose `parent` is a row of the same list), or its own episode (`traj_id`, else its row)
    when it has no parent."""
    roots = []
    for row, t in enumerate(trajectories):
        seen, current = {row}, t
        while current.parent is not None:
            if current.parent in seen or not 0 <= current.parent < len(trajectories):
                raise ValueError(f"row {row}: its parents do not lead to a root within the batch ({current.parent})")
            seen.add(current.parent)
            row_of_root, current = current.parent, trajectories[current.parent]
        roots.append(row if t.parent is None else row_of_root)
    return [root if trajectories[root].traj_id is None else trajectories[root].traj_id for root in roots]


def collate(trajectories: Sequence[Trajectory], pad_id: int, extras: Sequence[str] = ()) -> RolloutBatch:
    """Stack rows (whole episodes, or step-mode rows) into a right-padded `RolloutBatch`, with the per-step numbers
    the infos hold under each key of `extras` (`RolloutBatch.step_extras`)."""
    length = max(len(t.token_ids) for t in trajectories)

    def pad(rows: list[list], value, dtype) -> torch.Tensor:
        return torch.tensor([row + [value] * (length - len(row)) for row in rows], dtype=dtype)

    traj_ids = [row if t.traj_id is None else t.traj_id for row, t in enumerate(trajectories)]
    steps = []  # (row, turn, index within the episode, reward, valid, anchor, extras)
    for row, t in enumerate(trajectories):
        for turn, (reward, info) in enumerate(zip(t.rewards, t.infos, strict=True)):
            index = turn if t.traj_id is None else t.step_index + turn
            anchor = t.anchors[turn] if turn < len(t.anchors) else None
            numbers = [float(info.get(key, 0.0)) for key in extras]
            steps.append((row, turn, index, reward, bool(info.get("valid", True)), anchor, numbers))

    def column(position: int, dtype) -> torch.Tensor:
        return torch.tensor([step[position] for step in steps], dtype=dtype)

    step_row = column(0, torch.long)
    group_ids = torch.tensor([t.group_id for t in trajectories], dtype=torch.long)
    traj_tensor = torch.tensor(traj_ids, dtype=torch.long)
    return RolloutBatch(
        input_ids=pad([t.token_ids for t in trajectories], pad_id, torch.long),
        attention_mask=pad([[1] * len(t.token_ids) for t in trajectories], 0, torch.long),
        loss_mask=pad([t.loss_mask for t in trajectories], 0, torch.float),
        old_logprobs=pad([t.logprobs for t in trajectories], 0.0, torch.float),
        entropies=pad([t.entropies for t in trajectories], 0.0, torch.float),
        turn_ids=pad([t.turn_ids for t in trajectories], -1, torch.long),
        rewards=torch.tensor(
            [t.total_reward if t.episode_reward is None else t.episode_reward for t in trajectories], dtype=torch.float
        ),
        group_ids=group_ids,
        traj_ids=traj_tensor,
        tree_ids=torch.tensor(tree_roots(trajectories), dtype=torch.long),
        step_row=step_row,
        step_turn=column(1, torch.long),
        step_index=column(2, torch.long),
        step_traj=traj_tensor[step_row] if steps else torch.zeros(0, dtype=torch.long),
        step_group=group_ids[step_row] if steps else torch.zeros(0, dtype=torch.long),
        step_reward=column(3, torch.float),
        step_valid=column(4, torch.bool),
        step_anchors=[step[5] for step in steps],
        step_extras={
            key: torch.tensor([step[6][i] for step in steps], dtype=torch.float) for i, key in enumerate(extras)
        },
    )


def broadcast_steps(batch: RolloutBatch, values: torch.Tensor) -> torch.Tensor:
    """Per-step `values` `[K]` spread over the action tokens of each step: `[B, T]`, 0 elsewhere.

    Step k's value lands on every token of row `step_row[k]` whose turn id is `step_turn[k]` and that
    the policy sampled (loss mask 1): the tokens whose log-probs step k's advantage should move.
    """
    rows = batch.input_ids.shape[0]
    count = len(values)
    top = int(max(batch.turn_ids.max().item(), batch.step_turn.max().item() if count else -1)) + 1
    # lookup[b, turn] = k; column `top` (prompt, padding) and turns without a step (the unsent action of a
    # sequence cut by the length cap) point at slot `count`, which holds 0
    lookup = torch.full((rows, top + 1), count, dtype=torch.long, device=values.device)
    lookup[batch.step_row, batch.step_turn] = torch.arange(count, device=values.device)
    padded = torch.cat([values, values.new_zeros(1)])
    column = torch.where(batch.turn_ids >= 0, batch.turn_ids, torch.full_like(batch.turn_ids, top))
    spread = padded[lookup.gather(1, column)]
    return spread * batch.loss_mask.to(spread.dtype)


class RolloutEngine:
    """Samples trajectories of `model` in text environments, many at once.

    `rollout(envs, seeds)` resets each environment and plays it to the end; `branch(trajectory,
    steps, n)` continues `n` copies of a trajectory from the end of its `steps`-th observation.
    """

    def __init__(self, model: torch.nn.Module, tokenizer, config: SamplingConfig | None = None, prompt_format=None):
        self.model = model
        self.tokenizer = tokenizer
        self.config = config or SamplingConfig()
        self.format = resolve_format(prompt_format or self.config.prompt_format)
        """`prompt_ids(tokenizer, observation)` and `observation_ids(tokenizer, observation, last_token)`."""
        self.stop_ids, self.stop_strings = stop_rule(tokenizer, self.config)
        self.pad_id = pad_id(tokenizer)
        self.timings = {"model": 0.0, "sampling": 0.0, "env": 0.0}
        """Seconds the last `run` spent in model forwards, in sampling, and in `env.step`."""

    def rollout(
        self,
        envs: Sequence[TextEnv],
        seeds: Sequence[int],
        group_ids: Sequence[int] | None = None,
        generator: torch.Generator | None = None,
    ) -> list[Trajectory]:
        """Reset `envs[i]` with `seeds[i]` and sample one trajectory in each."""
        if len(envs) != len(seeds):
            raise ValueError("envs and seeds must have the same length")
        return self.run(start_trajectories(self, envs, seeds, group_ids), generator)

    def branch(
        self, trajectory: Trajectory, steps: int, n: int, parent: int | None = None,
        generator: torch.Generator | None = None,
    ) -> list[Trajectory]:  # fmt: skip
        """`n` new trajectories sharing `trajectory`'s tokens up to the end of step `steps`."""
        return self.run([self.fork(trajectory, steps, parent) for _ in range(n)], generator)

    def fork(self, trajectory: Trajectory, steps: int, parent: int | None = None) -> Trajectory:
        """A copy of `trajectory` cut at the end of step `steps` (its observation included), with its own copy of
        the environment as it was then, ready for `run` to continue; not yet sampled (a sampler that branches many
        trajectories collects their forks and continues them in one batch)."""
        return fork_trajectory(self, trajectory, steps, parent)

    @torch.no_grad()
    def run(self, trajectories: list[Trajectory], generator: torch.Generator | None = None) -> list[Trajectory]:
        """Continue every trajectory (its prefix ends at a turn boundary) until its episode ends."""
        config = self.config
        device = next(self.model.parameters()).device
        lengths = [len(t.token_ids) for t in trajectories]
        width = max(lengths)
        # Identical prefixes (a GRPO group's prompt, the copies of a branch) are prefilled once;
        # their cache rows and logits are then repeated for every trajectory that shares them.
        unique: dict[tuple[int, ...], int] = {}
        source = [unique.setdefault(tuple(t.token_ids), len(unique)) for t in trajectories]
        input_ids, attention = left_pad(list(unique), self.pad_id)  # dicts keep insertion order: row = value
        # A prefix already longer than the budget is cut after one token: the cache still needs its one slot.
        slots = width + max(config.max_total_tokens - min(lengths), 0) + 1
        decoder = make_decoder(self.model, len(unique), slots, dtype=PRECISIONS[config.precision])
        was_training = self.model.training
        self.model.eval()
        self.timings = dict.fromkeys(self.timings, 0.0)
        with self._timed("model"):
            logits = decoder.prefill(input_ids.to(device), attention.to(device))
            if len(unique) < len(trajectories):
                rows = torch.tensor(source, device=device)
                decoder.keep(rows)
                logits = logits.index_select(0, rows)

        live = list(range(len(trajectories)))  # trajectory index of each decoder row
        queues = {i: deque() for i in live}
        turn_tokens: dict[int, list[int]] = {i: [] for i in live}
        while live:
            with self._timed("sampling"):
                tokens, logprobs, entropies = self.sample(logits, generator)
            next_inputs, keep = [], []
            for row, index in enumerate(live):
                t = trajectories[index]
                if queues[index]:
                    token = queues[index].popleft()
                    _append(t, token, t.num_turns - 1)
                else:
                    token = tokens[row]
                    _append(t, token, t.num_turns, logprobs[row], entropies[row])
                    turn_tokens[index].append(token)
                    if len(turn_tokens[index]) >= config.max_turn_tokens or ends_turn(self, turn_tokens[index]):
                        with self._timed("env"):
                            queues[index].extend(send_turn(self, t, turn_tokens[index]))
                        turn_tokens[index] = []
                finished = t.terminated or t.truncated
                if not finished and len(t.token_ids) >= config.max_total_tokens:
                    t.truncated = t.cut = finished = True
                if not finished:
                    keep.append(row)
                    next_inputs.append([token])
            if len(keep) < len(live):
                if not keep:
                    break
                decoder.keep(torch.tensor(keep, device=device))
                live = [live[row] for row in keep]
            # When every live sequence has observation tokens waiting (turns often end together in
            # a lock-step batch), feed them in one multi-token step instead of one per step.
            room = min(config.max_total_tokens - 1 - len(trajectories[i].token_ids) for i in live)
            extra = min(min(len(queues[i]) for i in live), room)
            for inputs, index in zip(next_inputs, live, strict=True):
                t = trajectories[index]
                for _ in range(max(extra, 0)):
                    token = queues[index].popleft()
                    _append(t, token, t.num_turns - 1)
                    inputs.append(token)
            with self._timed("model"):
                logits = decoder.step(torch.tensor(next_inputs, device=device).squeeze(1))
        self.model.train(was_training)
        return trajectories

    @contextmanager
    def _timed(self, key: str) -> Iterator[None]:
        """Add the seconds spent inside the `with` block to `self.timings[key]`."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.timings[key] += time.perf_counter() - start

    def sample(self, logits: torch.Tensor, generator: torch.Generator | None) -> tuple[list, list, list]:
        """Sample one token per row of `logits` `[B, V]`; return tokens, their log-probs, entropies."""
        temperature = self.config.temperature
        logits = logits.float()
        log_probs = torch.log_softmax(logits / temperature if temperature > 0 else logits, dim=-1)
        probs = log_probs.exp()
        entropy = -(probs * log_probs).sum(-1)
        if temperature > 0:
            # Inverse-CDF sampling: one uniform per row (torch.multinomial is several times slower here).
            cumulative = probs.cumsum(-1)
            # Drawn where the generator lives (the chapters seed CPU generators), then moved: a model on a GPU
            # samples the same uniforms as on the CPU, and a CPU generator is not refused by a CUDA tensor.
            source = generator.device if generator is not None else probs.device
            uniform = torch.rand(probs.shape[0], 1, generator=generator, device=source).to(probs.device)
            tokens = torch.searchsorted(cumulative, uniform * cumulative[:, -1:]).squeeze(-1)
            tokens = tokens.clamp(max=probs.shape[-1] - 1)
        else:
            tokens = logits.argmax(-1)
        chosen = log_probs.gather(-1, tokens[:, None]).squeeze(-1)
        return tokens.tolist(), chosen.tolist(), entropy.tolist()


# The turn rule, once for every engine -----------------------------------------------------------------------------
# `RolloutEngine` (lock-step, one token at a time), `server_engine.ServerEngine` (a whole turn per server call: verl's
# agent loop, its tree worker and step mode) and the TRL route's engines end a turn, send it and append what the
# environment answers through these functions. An `engine` here is anything with `tokenizer`, `config` (a
# `SamplingConfig`), `format` (a prompt format), `stop_ids` and `stop_strings` (from `stop_rule`).
def stop_rule(tokenizer, config: SamplingConfig) -> tuple[set[int], tuple[str, ...]]:
    """The ids that end a turn and the strings whose completion ends it (SamplingConfig.stop_tags, end_at_eos).

    A word-level tokenizer has every tag as one token (matched by id; a `KeyError` names the pieces otherwise). A
    checkpoint's tokenizer splits a tag into pieces the policy may spell differently: tags that are one token are
    matched by id, and every tag also as a string on the turn's decoded text. EOS ends a turn where `end_at_eos`
    says so (default: for a checkpoint's tokenizer, not for the course's word-level ones)."""
    word_level = is_word_level(tokenizer)
    if word_level:
        stop_ids = {tag_id(tokenizer, tag) for tag in config.stop_tags}
        stop_strings: tuple[str, ...] = ()
    else:
        single = (single_token_id(tokenizer, tag) for tag in config.stop_tags)
        stop_ids = {token for token in single if token is not None}
        stop_strings = tuple(config.stop_tags)
    end_at_eos = not word_level if config.end_at_eos is None else config.end_at_eos
    if end_at_eos and tokenizer.eos_token_id is not None:
        stop_ids.add(tokenizer.eos_token_id)
    return stop_ids, stop_strings


def ends_turn(engine, turn: list[int]) -> bool:
    """Whether the turn's last token ends it: a stop id, or the token that completes a stop string (the text did
    not hold one before it, or the turn would have ended there)."""
    if turn[-1] in engine.stop_ids:
        return True
    return bool(engine.stop_strings) and any(stop in decode(engine.tokenizer, turn) for stop in engine.stop_strings)


def turn_end(engine, ids: Sequence[int]) -> int | None:
    """The index of the token that ends a turn in `ids` (what a server returned for one turn), None if none does.
    The tokens after it are the server's overshoot and are dropped."""
    if engine.stop_strings:
        text = decode(engine.tokenizer, list(ids))
        if not any(stop in text for stop in engine.stop_strings):  # the common case: scan ids only
            return next((k for k, token in enumerate(ids) if token in engine.stop_ids), None)
    return next((k for k in range(len(ids)) if ends_turn(engine, list(ids[: k + 1]))), None)


def send_turn(engine, t: Trajectory, action_ids: list[int]) -> list[int]:
    """Send a finished turn to the environment: its text (the tokenizer's own decoding of the sampled ids, never
    re-encoded) goes to `env.step`; the anchor of the state it was taken in, the reward, the info and the episode's
    end are recorded, and a copy of the environment where `snapshot_envs`. Returns the observation's ids in the
    engine's prompt format (none when the episode ended), which the caller appends with mask 0."""
    t.anchors.append(t.env.anchor())
    obs, reward, terminated, truncated, info = t.env.step(decode(engine.tokenizer, action_ids))
    t.rewards.append(reward)
    t.infos.append(info)
    t.terminated, t.truncated = terminated, truncated
    if engine.config.snapshot_envs:
        t.snapshots.append(t.env.fork())
    if terminated or truncated or not obs:
        return []
    return engine.format.observation_ids(engine.tokenizer, obs, action_ids[-1] if action_ids else None)


def advance(
    engine, t: Trajectory, ids: Sequence[int], logprobs: Sequence[float], entropies: Sequence[float],
    budget: int, cap: int,
) -> str:  # fmt: skip
    """One whole turn of `t` from a server's answer: `ids` (with their `logprobs` and `entropies`), asked for at
    most `budget` tokens with the sequence capped at `cap` tokens. Returns what happened:

    - `"cut"`: the cap cut the turn short (no stop, fewer than `max_turn_tokens`, and the server used the whole
      budget): the tokens are kept, the environment never sees them, `t` is `truncated` and `cut`;
    - `"done"`: the turn was sent and the episode ended, or the observation reached the cap (then `cut`);
    - `"sent"`: the turn was sent and its observation appended; the episode goes on.

    The turn is trimmed after its stop (`turn_end`) and to `budget`, appended with mask 1, sent (`send_turn`) and
    the observation appended with mask 0 up to the cap: the rule `RolloutEngine.run` applies token by token."""
    ids = [int(token) for token in ids[:budget]]
    stop_at = turn_end(engine, ids)
    if stop_at is not None:
        ids = ids[: stop_at + 1]
    turn = t.num_turns
    for k, token in enumerate(ids):
        _append(t, token, turn, float(logprobs[k]), float(entropies[k]))
    sent = stop_at is not None or len(ids) >= engine.config.max_turn_tokens or len(ids) < budget
    if not sent:
        t.truncated = t.cut = True
        return "cut"
    observation = send_turn(engine, t, ids)
    if t.terminated or t.truncated:
        return "done"
    for token in observation[: cap - len(t.token_ids)]:
        _append(t, token, turn)
    if len(t.token_ids) >= cap:
        t.truncated = t.cut = True
        return "done"
    return "sent"


def start_trajectories(
    engine, envs: Sequence[TextEnv], seeds: Sequence[int], group_ids: Sequence[int] | None = None
) -> list[Trajectory]:
    """Reset `envs[i]` with `seeds[i]`: one trajectory per environment holding only its prompt (the observation in
    `engine.format`, encoded by `engine.tokenizer`), with a copy of the environment when `engine.config.snapshot_envs`.
    Shared by every engine that plays the course's turns (`RolloutEngine`, verl's `verl_trees.ServerEngine`)."""
    group_ids = list(range(len(envs))) if group_ids is None else list(group_ids)
    starts = []
    for env, seed, group in zip(envs, seeds, group_ids, strict=True):
        obs, _ = env.reset(seed=seed)
        prompt = engine.format.prompt_ids(engine.tokenizer, obs)
        start = Trajectory(
            env=env, token_ids=prompt, loss_mask=[0] * len(prompt), logprobs=[0.0] * len(prompt),
            entropies=[0.0] * len(prompt), turn_ids=[-1] * len(prompt), group_id=group, seed=seed,
        )  # fmt: skip
        if engine.config.snapshot_envs:
            start.snapshots.append(env.fork())
        starts.append(start)
    longest = max(starts, key=lambda t: len(t.token_ids), default=None)
    if longest is not None and len(longest.token_ids) >= engine.config.max_total_tokens - 1:
        warnings.warn(over_budget(type(longest.env).__name__, longest.seed, len(longest.token_ids),
                                  engine.config.max_total_tokens), RuntimeWarning, stacklevel=3)  # fmt: skip
    return starts


def over_budget(env: str, seed: int, tokens: int, budget: int) -> str:
    """What to say of a first observation that leaves no room in the sequence budget for a turn."""
    return (
        f"{env}'s first observation (seed {seed}) is {tokens} tokens, at or over sampling.max_total_tokens={budget}: "
        "its episode ends after one policy token with reward 0 (and so does any episode as long); raise "
        "sampling.max_total_tokens or shorten the observation (check_env(..., max_observation_tokens=...) checks it)"
    )


def fork_trajectory(engine, trajectory: Trajectory, steps: int, parent: int | None = None) -> Trajectory:
    """`trajectory` cut at the end of step `steps` (its observation included), with its own copy of the environment
    as it was then; what `RolloutEngine.fork` (and `verl_trees.ServerEngine.fork`) returns."""
    if not engine.config.snapshot_envs:
        raise RuntimeError("branching needs SamplingConfig(snapshot_envs=True)")
    if not 0 <= steps < len(trajectory.snapshots) or trajectory.snapshots[steps].done:
        raise ValueError(f"cannot branch after step {steps} of a {trajectory.num_turns}-step trajectory")
    cut = trajectory.prefix_length(steps)
    return Trajectory(
        env=trajectory.snapshots[steps].fork(), group_id=trajectory.group_id, seed=trajectory.seed,
        token_ids=trajectory.token_ids[:cut], loss_mask=trajectory.loss_mask[:cut],
        logprobs=trajectory.logprobs[:cut], entropies=trajectory.entropies[:cut], turn_ids=trajectory.turn_ids[:cut],
        rewards=trajectory.rewards[:steps], infos=trajectory.infos[:steps], anchors=trajectory.anchors[:steps],
        snapshots=[s.fork() for s in trajectory.snapshots[: steps + 1]], parent=parent, branch_position=cut,
    )  # fmt: skip


def pad_id(tokenizer) -> int:
    """The id padding is written with: the tokenizer's pad token, else its EOS (padding is masked out either way)."""
    for token_id in (tokenizer.pad_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return token_id
    raise ValueError("the tokenizer has neither a pad nor an EOS token: set tokenizer.pad_token")


def _append(t: Trajectory, token: int, turn: int, logprob: float | None = None, entropy: float = 0.0) -> None:
    """Append one token: sampled by the policy when `logprob` is given (loss mask 1), else forced."""
    t.token_ids.append(token)
    t.loss_mask.append(0 if logprob is None else 1)
    t.logprobs.append(0.0 if logprob is None else logprob)
    t.entropies.append(entropy)
    t.turn_ids.append(turn)

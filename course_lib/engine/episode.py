"""One episode, one sequence: the multi-turn bookkeeping `RolloutEngine` applies to each of its rows, written out
plainly (chapter 00; the reference solution of the implement-it exercise `exercises/rollout.py`).

The engine plays many sequences in lock step through a KV cache, which hides the rule it applies to each one. For
one sequence the rule is short:

1. Reset the environment; the prompt is the prompt format's ids of the first observation (loss mask 0, turn -1).
2. Ask the policy for a token and append it with loss mask 1, its log-prob and entropy (the sampling policy's:
   they are pi_old of the update), and the turn id k, the number of steps taken so far.
3. The turn ends at a stop (a stop id, or the token that completes a stop string on the turn's decoded text) or
   after `max_turn_tokens`. Its text, the tokenizer's decoding of the sampled ids (never re-encoded), goes to
   `env.step`; the anchor of the state it was taken in, the reward, the info and the episode's end are recorded.
4. Unless the episode ended, the observation's ids (the format's, which may depend on the turn's last token) are
   appended with loss mask 0, log-prob 0, entropy 0 and the same turn id k.
5. A sequence that reaches `max_total_tokens` while its episode runs stops there, `truncated` and `cut`.

`play_episode` is that rule; `tests/engine/test_episode.py` checks that its trajectories equal the engine's, token
for token, on the word-level base and on a BPE stand-in. `sampling_policy` samples from the engine's model as the
engine does (one uniform per sampled token, inverse CDF); `rl.seams.one_by_one` turns any `play_episode` into a
sampler for the training loop, so that chapter 00 can train with a rollout written by hand.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from course_lib import bridges
from course_lib.engine.rollout import Trajectory, ends_turn, send_turn
from course_lib.envs.base import TextEnv
from course_lib.implement_it import implement_it

Policy = Callable[[list[int]], tuple[int, float, float]]
"""`policy(token_ids)` -> `(token, logprob, entropy)`: the next token the policy samples after `token_ids`, its
log-probability and the full-vocabulary entropy of the distribution it was drawn from."""


@implement_it("rollout.play_episode", bridges.play_episode)
def play_episode(engine, policy: Policy, env: TextEnv, seed: int, group_id: int = 0) -> Trajectory:
    """Play one episode of `env` (reset with `seed`) with `policy`, as `engine` (a `RolloutEngine`: its
    `tokenizer`, `config`, `format`, `stop_ids`, `stop_strings`) would: the trajectory `engine.rollout([env],
    [seed], [group_id])` returns when its sampler draws the tokens `policy` draws."""
    config = engine.config
    obs, _ = env.reset(seed=seed)
    prompt = engine.format.prompt_ids(engine.tokenizer, obs)
    t = Trajectory(
        env=env, token_ids=list(prompt), loss_mask=[0] * len(prompt), logprobs=[0.0] * len(prompt),
        entropies=[0.0] * len(prompt), turn_ids=[-1] * len(prompt), group_id=group_id, seed=seed,
    )  # fmt: skip
    if config.snapshot_envs:
        t.snapshots.append(env.fork())
    turn: list[int] = []
    while True:
        token, logprob, entropy = policy(list(t.token_ids))
        append(t, token, 1, logprob, entropy, t.num_turns)
        turn.append(token)
        if len(turn) >= config.max_turn_tokens or ends_turn(engine, turn):
            observation = send_turn(engine, t, turn)  # the engine's own: env.step on the decoded turn
            turn = []
            for token in observation:
                if len(t.token_ids) >= config.max_total_tokens:
                    break
                append(t, token, 0, 0.0, 0.0, t.num_turns - 1)
        if t.terminated or t.truncated:
            return t
        if len(t.token_ids) >= config.max_total_tokens:
            t.truncated = t.cut = True
            return t


def append(t: Trajectory, token: int, mask: int, logprob: float, entropy: float, turn: int) -> None:
    """One token with its loss mask, log-prob, entropy and turn id: the five lists stay aligned."""
    t.token_ids.append(int(token))
    t.loss_mask.append(mask)
    t.logprobs.append(float(logprob))
    t.entropies.append(float(entropy))
    t.turn_ids.append(turn)


def sampling_policy(engine, generator: torch.Generator | None = None) -> Policy:
    """A policy that samples from `engine.model` as the engine does (its `sample`: temperature, one uniform from
    `generator` per token, inverse CDF), with a full forward over the ids each call: slow and plain, no cache. Its
    tokens are the engine's wherever the two forwards' logits agree to the last bit, which a cache does not promise;
    the log-probs then differ by float rounding (about 1e-6)."""

    @torch.no_grad()
    def policy(token_ids: list[int]) -> tuple[int, float, float]:
        device = next(engine.model.parameters()).device
        was_training = engine.model.training
        engine.model.eval()
        logits = engine.model(input_ids=torch.tensor([token_ids], device=device)).logits[:, -1]
        engine.model.train(was_training)
        tokens, logprobs, entropies = engine.sample(logits, generator)
        return tokens[0], logprobs[0], entropies[0]

    return policy

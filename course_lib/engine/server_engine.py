"""The course's turns over an inference server: `ServerEngine`, a whole turn per server call.

`rollout.RolloutEngine` samples a batch token by token from a torch model. An inference server (vLLM or SGLang
behind verl's agent loop, or any async callable) answers one request with a whole turn instead:
`await generate(prompt_ids, sampling_params) -> (token_ids, logprobs or None, entropies or None)`. `ServerEngine`
plays the course's environments through such a callable with the same turn rule, the functions of `rollout`
(`stop_rule`, `advance`, `send_turn`): trim at the stop, append with mask 1, sent or cut, anchor before `env.step`,
snapshot for forks, the observation with mask 0 through the prompt format, the total cap. So verl's agent loop
(`integrations.course_verl`), its tree worker (`integrations.verl_trees`) and step mode (`step_mode.rollout_steps`) play
exactly the episodes the course's own engine plays, for a word-level or a BPE tokenizer alike (tests:
tests/integrations/test_verl_export.py replays the course's rollouts through it token for token).

It has the interface `tree_rollout.sample_trees` drives (`rollout`, `fork`, `run`, `config`, `tokenizer`). The
sequences of one `run` are played concurrently on an asyncio event loop: the caller's (`loop`, when the engine is
driven from a worker thread while the loop serves the server calls) or a new one.

Log-probs and entropies: a server that returns no log-probs (verl then recomputes them) leaves 0.0 in their place
and sets `logprobs_missing`, which `integrations.course_verl.output_fields` turns into verl's
`response_logprobs=None`. A
server that returns no entropies gets `-log p` of the sampled token, an unbiased one-sample estimate of the entropy
at that position (its expectation over the sampled token is the entropy), which ARPO's and AEPO's branch rules read.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from course_lib.engine.prompt_format import resolve as resolve_format
from course_lib.engine.rollout import (
    SamplingConfig,
    Trajectory,
    advance,
    fork_trajectory,
    start_trajectories,
    stop_rule,
)
from course_lib.envs.base import TextEnv

Generate = Callable[[list[int], dict[str, Any]], Awaitable[tuple[list[int], list[float] | None, list[float] | None]]]
"""`await generate(prompt_ids, sampling_params)` -> the new token ids, their log-probs (None when the server returned
none) and their entropies (None when unknown): one call of an inference server for one turn."""


def turn_sampling_params(
    base: dict[str, Any] | None, stop_ids: Sequence[int], max_tokens: int, stop_strings: Sequence[str] = ()
) -> dict[str, Any]:
    """A server's sampling params for one turn: the caller's (temperature, top_p, logprobs ...) plus the turn's limits.

    `stop_token_ids` and `max_tokens` are read by both of verl's servers (vLLM's `SamplingParams`; SGLang takes
    `max_tokens` as `max_new_tokens`); vLLM keeps the stop token as the last generated id. `ignore_eos` is set
    because EOS ends a turn only where the engine's stop rule lists it among `stop_ids` (a checkpoint's tokenizer;
    the course's word-level models treat `<eos>` as an ordinary token). A tag a BPE tokenizer splits into pieces is
    asked for as a `stop` string, kept in the output (vLLM's `include_stop_str_in_output`); the engine trims the turn
    at the stop itself either way, so a server that ignores these keys only generates a few tokens too many."""
    params = {**(base or {}), "stop_token_ids": sorted(stop_ids), "max_tokens": int(max_tokens), "ignore_eos": True}
    if stop_strings:
        params.update(stop=list(stop_strings), include_stop_str_in_output=True)
    return params


class ServerEngine:
    """The course's engine over an inference server: `rollout`, `fork` and `run`, as `rollout.RolloutEngine`."""

    def __init__(
        self,
        generate: Generate,
        tokenizer,
        config: SamplingConfig,
        sampling_params: dict[str, Any] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        max_response_tokens: int | None = None,
    ):
        """`max_response_tokens`: a cap on the tokens after the prompt (verl's `rollout.response_length`, which its
        padded tensors hold), on top of `config.max_total_tokens`."""
        self.generate, self.tokenizer, self.config = generate, tokenizer, config
        self.sampling_params, self.loop = dict(sampling_params or {}), loop
        self.max_response_tokens = max_response_tokens
        self.format = resolve_format(config.prompt_format)
        self.stop_ids, self.stop_strings = stop_rule(tokenizer, config)
        self.logprobs_missing = False
        """Whether a turn came back without log-probs (0.0 stands in for them)."""
        self.timings = {"generate": 0.0, "env": 0.0}
        """Seconds spent awaiting the server and in the turn rule (mostly `env.step`), over the engine's life."""

    def rollout(self, envs: Sequence[TextEnv], seeds: Sequence[int], group_ids=None, generator=None):
        """Reset `envs[i]` with `seeds[i]` and play each episode to its end (as `RolloutEngine.rollout`)."""
        return self.run(start_trajectories(self, envs, seeds, group_ids), generator)

    def fork(self, trajectory: Trajectory, steps: int, parent: int | None = None) -> Trajectory:
        """`trajectory` cut after the observation of step `steps`, with its environment as it was then (the same
        cut `RolloutEngine.fork` makes)."""
        return fork_trajectory(self, trajectory, steps, parent)

    def run(self, trajectories: list[Trajectory], generator=None) -> list[Trajectory]:
        """Continue every trajectory to the end of its episode, all at once on the server (`generator` is unused:
        the server samples)."""

        async def together():
            await asyncio.gather(*(self.play(t) for t in trajectories))

        if self.loop is None:
            asyncio.run(together())
        else:  # called from a worker thread while the loop serves the server calls
            asyncio.run_coroutine_threadsafe(together(), self.loop).result()
        return trajectories

    async def play_episode(self, env: TextEnv, seed: int, max_prompt_tokens: int | None = None) -> Trajectory:
        """Reset `env` with `seed` and play it to its end. A prompt longer than `max_prompt_tokens` raises ValueError
        before any generation (cutting it would change the task)."""
        [t] = start_trajectories(self, [env], [seed])
        if max_prompt_tokens is not None and len(t.token_ids) > max_prompt_tokens:
            raise ValueError(f"a prompt of {len(t.token_ids)} tokens exceeds the {max_prompt_tokens} allowed")
        await self.play(t)
        return t

    async def play(self, t: Trajectory) -> None:
        """Play `t` (its prefix ends at a turn boundary) turn by turn: each turn asks the server for at most
        `max_turn_tokens` (fewer where the cap is closer), and `rollout.advance` applies the turn rule."""
        cap, config = self.config.max_total_tokens, self.config
        if self.max_response_tokens is not None:
            cap = min(cap, sum(1 for turn in t.turn_ids if turn < 0) + self.max_response_tokens)
        status = "sent"
        while status == "sent" and not (t.terminated or t.truncated):
            if len(t.token_ids) >= cap:  # no room for a token: the prompt (or a fork's prefix) fills the cap
                t.truncated = t.cut = True
                return
            budget = min(config.max_turn_tokens, cap - len(t.token_ids))
            params = turn_sampling_params(self.sampling_params, self.stop_ids, budget, self.stop_strings)
            start = time.perf_counter()
            ids, logprobs, entropies = await self.generate(list(t.token_ids), params)
            self.timings["generate"] += time.perf_counter() - start
            ids = list(ids[:budget])
            if logprobs is None:
                self.logprobs_missing = True
                logprobs = [0.0] * len(ids)
            elif len(logprobs) < len(ids):
                raise ValueError(f"the server returned {len(logprobs)} log-probs for {len(ids)} tokens")
            if entropies is None:  # one-sample estimate: E[-log p(x)] over x ~ p is the entropy
                entropies = [-float(p) for p in logprobs]
            start = time.perf_counter()
            status = advance(self, t, ids, logprobs, entropies, budget, cap)
            self.timings["env"] += time.perf_counter() - start

"""The course's tool tasks on verl's agent loop: one course environment episode per verl `run()`.

verl (tested with verl 0.9.1) trains multi-turn agents through `verl.experimental.agent_loop`: for each dataset row
it instantiates the `AgentLoopBase` subclass named by the row's `agent_name` column and awaits
`run(sampling_params, **row)`, which must return an `AgentLoopOutput` (pydantic) holding `prompt_ids`, and
`response_ids` / `response_mask` / `response_logprobs` in which the tokens the policy generated (mask 1) and the
tokens the environment returned (mask 0) alternate in order. Tokens come from an inference server through
`server_manager.generate(request_id=..., prompt_ids=..., sampling_params=...)`, which returns a `TokenOutput` with
`token_ids` and `log_probs`. When the output's `reward_score` is set, verl does not run its reward function for it.

This module has three layers:

- `play_episode`: the course's turn semantics (those of `course_lib.rollout.RolloutEngine`, one sequence at a time)
  on top of any async `generate(prompt_ids, sampling_params) -> (token_ids, logprobs)` callable. It needs no verl,
  so the main environment tests it against the course's own rollouts.
- `CourseEnvAgentLoop`, registered in verl as `AGENT_NAME`: a thin `AgentLoopBase` subclass that calls
  `play_episode` with verl's server manager. It is defined only when verl is installed (verl pins a transformers
  older than the course's main environment, so it lives in its own virtual environment; see `make test-verl`);
  importing this module without verl gives everything else.
- `export_parquet` and the command line `python -m course_lib.integrations.verl export ...`: a chapter's tasks as
  the parquet file verl's `RLHFDataset` reads, and `agent_loop_config_text` / `write_agent_loop_config`: the yaml
  that `actor_rollout_ref.rollout.agent.agent_loop_config_path` points to.

The survey's methods beyond GRPO live beside this module: `verl_gigpo` (GiGPO's estimator, trajectory and step
mode), `verl_filters` (StarPO-S's and RAGEN-2's group filters, AEPO's balanced clip), `verl_patch` (the one patch
of `compute_advantage` they need, installed in verl's Ray processes by a setup hook), `verl_trees` (ARPO's and
AEPO's trees through an agent-loop manager), `verl_monitor` (chapter 12's MI stop with rollback to a verl
checkpoint) and `verl_launch` (each method's overrides; `python -m course_lib.integrations.verl launch --method M`
prints the command).

Prompts: verl's own loops apply the tokenizer's chat template to the row's `prompt` messages. The course's
word-level tokenizers have no chat template, and the course's prompt is `[bos] + encode(reset observation)`, so
`CourseEnvAgentLoop` ignores the messages and rebuilds the prompt ids itself by resetting the row's environment
with the row's seed (`extra_info`). The `prompt` column still holds the reset observation as a user message:
`RLHFDataset` requires the column, and it keeps the dataset readable. Keep `data.filter_overlong_prompts=False`
(the default): that filter applies the chat template and would drop every row.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from course_lib.chapters import chapter_key
from course_lib.envs.base import TextEnv, distinct_seeds
from course_lib.rollout import SamplingConfig, Trajectory
from course_lib.tokenizer import decode, encode, tag_id

AGENT_NAME = "course_env_agent"
"""The `agent_name` every exported row carries, and the name the agent loop is registered under."""
AGENT_LOOP_TARGET = "course_lib.integrations.verl.CourseEnvAgentLoop"
"""The class verl's hydra instantiates for `AGENT_NAME` (the `_target_` of the agent-loop yaml)."""
DEFAULT_COUNT = 256
"""Rows per exported split when no count is given."""

Generate = Callable[[list[int], dict[str, Any]], Awaitable[tuple[list[int], list[float] | None]]]
"""`await generate(prompt_ids, sampling_params)` -> the new token ids and their log-probs (None when the server
returned none): one call of an inference server, as verl's `server_manager.generate` is one."""


# Chapters ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChapterTasks:
    """What the export and the agent loop need of a tool chapter: its environment for any split, its held-out seeds,
    and the sampling limits the chapter trains with (cpu preset, as `chapters.tool_tasks`)."""

    key: str
    """`"ch00"`, `"ch03"` ... `"ch06"`."""
    env_name: str
    base: str
    """The chapter's base checkpoint (`data.load_base`): the model and tokenizer verl would start from."""
    sampling: SamplingConfig
    make_env: Callable[[str], TextEnv]
    """`make_env(split)`: a new environment of `split`, configured as the chapter trains."""
    held_out_seeds: Callable[[str, int], list[int]]
    """`held_out_seeds(split, count)`: the chapter's distinct evaluation seeds of a held-out split."""


@functools.cache
def chapter_tasks(chapter: str | int) -> ChapterTasks:
    """The tool task of `chapter`: one of `chapters.tool_tasks()` (00, 03, 04, 05, 06), or 08, ARPO's search task
    (also chapters 11's and 12's, whose trees and filters `verl_trees` and `verl_patch` bring to verl)."""
    # Imported here: the chapter modules pull in the whole course, which the yaml and parquet helpers do not need.
    from course_lib.chapters import ch00_tool_agent as ch00
    from course_lib.chapters import ch03_planner_r1 as ch03
    from course_lib.chapters import ch04_torl as ch04
    from course_lib.chapters import ch05_toolrl as ch05
    from course_lib.chapters import ch06_artist as ch06
    from course_lib.chapters import tool_tasks
    from course_lib.envs.function_calling import FunctionCallingEnv

    key = chapter_key(chapter)
    if key == "ch08":  # ARPO's two-hop search task, which chapters 11 (AEPO) and 12 (the capstone) train on too
        from course_lib.chapters import ch08_arpo as ch08

        c08 = ch08.preset("cpu")
        make_env = functools.partial(_split_env, ch08, c08)
        held_out = lambda split, count: (  # noqa: E731
            ch08.test_seeds(count, c08) if split == "test" else distinct_seeds(lambda: make_env(split), count)
        )
        return ChapterTasks(key, c08.env_name, c08.base, c08.sampling, make_env, held_out)
    tasks = tool_tasks()
    if key not in tasks:
        raise KeyError(f"chapter {key} has no tool task; chapters: {sorted([*tasks, 'ch08'])}")
    task = tasks[key]

    def test_only(seeds: Callable[[int], list[int]], make_env: Callable[[str], TextEnv]):
        # The chapters cache the seeds of their `test` split; any other held-out split gets the same rule.
        def held_out(split: str, count: int) -> list[int]:
            return seeds(count) if split == "test" else distinct_seeds(lambda: make_env(split), count)

        return held_out

    c03, c05, c06 = ch03.preset("cpu"), ch05.preset("cpu"), ch06.preset("cpu")
    if key == "ch00":
        make_env = ch00.make_env
        held_out = test_only(ch00.test_seeds, make_env)
    elif key == "ch03":
        make_env = functools.partial(_split_env, ch03, c03)
        held_out = test_only(lambda n: ch03.test_seeds(n, c03.max_slack, c03.constrain_share), make_env)
    elif key == "ch04":
        make_env = ch04.make_env
        held_out = test_only(ch04.test_seeds, make_env)
    elif key == "ch05":
        make_env = functools.partial(FunctionCallingEnv, mix=c05.task_mix)

        def held_out(split: str, count: int) -> list[int]:  # chapter 05 evaluates on `test` and `novel`
            return ch05.test_seeds(count, split, c05.task_mix)

    else:
        make_env = functools.partial(_split_env, ch06, c06)
        held_out = test_only(ch06.test_seeds, make_env)
    return ChapterTasks(key, task.label, task.base, task.sampling, make_env, held_out)


def _split_env(module, config, split: str) -> TextEnv:
    """`module.make_env(split, config)`: chapters 03 and 06 build their environment from their preset."""
    return module.make_env(split, config)


def task_seeds(chapter: str | int, split: str, count: int) -> list[int]:
    """Seeds of `count` tasks: the first `count` seeds of the training split (as the course's trainer draws its
    prompts, a problem may repeat), or the chapter's `count` distinct held-out seeds of any other split."""
    tasks = chapter_tasks(chapter)
    return list(range(count)) if split == "train" else tasks.held_out_seeds(split, count)


# The turn logic, without verl ----------------------------------------------------------------------------------
@dataclass
class EpisodeResult:
    """One episode played through `play_episode`, in the layout of verl's `AgentLoopOutput` plus the course's
    step bookkeeping (what `course_lib.rollout.Trajectory` records)."""

    env: TextEnv
    seed: int
    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    """1 on tokens the policy generated, 0 on observation tokens (verl's `response_mask`)."""
    response_logprobs: list[float] | None = field(default_factory=list)
    """Sampling log-probs of the policy tokens, 0.0 on observation tokens; None when the server gave none."""
    turn_ids: list[int] = field(default_factory=list)
    """Per response token: the step whose action or observation it is (as `Trajectory.turn_ids`)."""
    rewards: list[float] = field(default_factory=list)
    infos: list[dict[str, Any]] = field(default_factory=list)
    anchors: list[Any] = field(default_factory=list)
    """The anchor of the state each action was taken in (GiGPO's grouping key), one per step."""
    action_spans: list[tuple[int, int]] = field(default_factory=list)
    """`[start, end)` of each step's action within `response_ids` (the unsent action of a cut sequence included)."""
    terminated: bool = False
    truncated: bool = False
    cut: bool = False
    """The token cap ended the sequence while the episode was still running (then also `truncated`)."""
    observations: int = 0
    """Observations appended to the response (none after the last step, nor where the cap left no room)."""
    generate_seconds: float = 0.0
    env_seconds: float = 0.0

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))

    @property
    def success(self) -> bool:
        return bool(self.infos and self.infos[-1].get("success", False))

    @property
    def num_steps(self) -> int:
        """Actions the environment received."""
        return len(self.rewards)

    @property
    def chat_turns(self) -> int:
        """verl's `num_turns`: messages in the conversation (the prompt, each action, each observation appended)."""
        return 1 + len(self.action_spans) + self.observations

    def as_trajectory(self) -> Trajectory:
        """The episode as a course `Trajectory`, so `rollout.expected_tokens` and `rollout.alignment_errors` check it
        (entropies are unknown to a server and left at 0)."""
        logprobs = self.response_logprobs or [0.0] * len(self.response_ids)
        return Trajectory(
            env=self.env,
            token_ids=[*self.prompt_ids, *self.response_ids],
            loss_mask=[0] * len(self.prompt_ids) + list(self.response_mask),
            logprobs=[0.0] * len(self.prompt_ids) + list(logprobs),
            entropies=[0.0] * (len(self.prompt_ids) + len(self.response_ids)),
            turn_ids=[-1] * len(self.prompt_ids) + list(self.turn_ids),
            seed=self.seed,
            rewards=list(self.rewards),
            infos=list(self.infos),
            anchors=list(self.anchors),
            terminated=self.terminated,
            truncated=self.truncated,
            cut=self.cut,
        )


def turn_sampling_params(base: dict[str, Any] | None, stop_ids: Sequence[int], max_tokens: int) -> dict[str, Any]:
    """verl's sampling params for one turn: the caller's (temperature, top_p, logprobs ...) plus the turn's limits.

    `stop_token_ids` and `max_tokens` are read by both of verl's servers (vLLM's `SamplingParams`; SGLang takes
    `max_tokens` as `max_new_tokens`); vLLM keeps the stop token as the last generated id. `ignore_eos` is set
    because the course's rollout treats `<eos>` as an ordinary token: only a stop tag or the turn's length ends a
    turn.
    """
    return {**(base or {}), "stop_token_ids": sorted(stop_ids), "max_tokens": int(max_tokens), "ignore_eos": True}


async def play_episode(
    env: TextEnv,
    seed: int,
    tokenizer,
    generate: Generate,
    sampling: SamplingConfig,
    sampling_params: dict[str, Any] | None = None,
    max_response_tokens: int | None = None,
    max_prompt_tokens: int | None = None,
) -> EpisodeResult:
    """Reset `env` with `seed` and play it to the end with `generate`, turn by turn, as `RolloutEngine` does.

    The prompt is `[bos] + encode(reset observation)`. Each turn asks for at most `sampling.max_turn_tokens` new
    tokens (fewer when the sequence's `sampling.max_total_tokens` cap, or `max_response_tokens` of response, is
    closer) and stops at the first of `sampling.stop_tags`; tokens the server returns past the stop tag or the
    budget are dropped. A turn that ends at a stop tag, fills its `max_turn_tokens`, or that the server ended on its
    own is decoded and sent to `env.step`; a turn the total cap cut short is not (the sequence is then `cut`). A
    malformed action is the environment's business: it answers with feedback and a penalty, like any other step.
    The observation is appended as ids with mask 0, up to the cap. Returns the tokens in verl's layout with the
    environment's rewards, infos and anchors. A prompt longer than `max_prompt_tokens` raises ValueError before
    any generation (cutting it would change the task).
    """
    stop_ids = {tag_id(tokenizer, tag) for tag in sampling.stop_tags}
    obs, _ = env.reset(seed=seed)
    result = EpisodeResult(env=env, seed=seed, prompt_ids=[tokenizer.bos_token_id, *encode(tokenizer, obs)])
    if max_prompt_tokens is not None and len(result.prompt_ids) > max_prompt_tokens:
        raise ValueError(f"a prompt of {len(result.prompt_ids)} tokens exceeds the {max_prompt_tokens} allowed")
    limit = sampling.max_total_tokens
    if max_response_tokens is not None:
        limit = min(limit, len(result.prompt_ids) + max_response_tokens)

    def length() -> int:
        return len(result.prompt_ids) + len(result.response_ids)

    if length() >= limit:  # no room for a single token: the prompt alone fills the cap
        result.truncated = result.cut = True
        return result
    while True:
        step = result.num_steps
        budget = min(sampling.max_turn_tokens, limit - length())
        start = time.perf_counter()
        token_ids, logprobs = await generate(
            [*result.prompt_ids, *result.response_ids], turn_sampling_params(sampling_params, stop_ids, budget)
        )
        result.generate_seconds += time.perf_counter() - start
        token_ids = [int(t) for t in token_ids[:budget]]
        stop_at = next((i for i, t in enumerate(token_ids) if t in stop_ids), None)
        if stop_at is not None:
            token_ids = token_ids[: stop_at + 1]
        if logprobs is None or result.response_logprobs is None:
            result.response_logprobs = None  # one turn without log-probs: verl then recomputes them all
        elif len(logprobs) < len(token_ids):
            raise ValueError(f"the server returned {len(logprobs)} log-probs for {len(token_ids)} tokens")
        else:
            result.response_logprobs += [float(p) for p in logprobs[: len(token_ids)]]
        result.action_spans.append((len(result.response_ids), len(result.response_ids) + len(token_ids)))
        _extend(result, token_ids, mask=1, turn=step)

        sent = stop_at is not None or len(token_ids) >= sampling.max_turn_tokens or len(token_ids) < budget
        if not sent:  # the total cap cut this turn: the environment never sees it (RolloutEngine's `cut`)
            result.truncated = result.cut = True
            return result
        result.anchors.append(env.anchor())
        start = time.perf_counter()
        obs, reward, terminated, truncated, info = env.step(decode(tokenizer, token_ids))
        result.env_seconds += time.perf_counter() - start
        result.rewards.append(reward)
        result.infos.append(info)
        result.terminated, result.truncated = terminated, truncated
        if terminated or truncated:
            return result
        observation = encode(tokenizer, obs) if obs else []
        room = limit - length()
        _extend(result, observation[:room], mask=0, turn=step)
        result.observations += bool(observation[:room])
        if length() >= limit:
            result.truncated = result.cut = True
            return result


def _extend(result: EpisodeResult, token_ids: list[int], mask: int, turn: int) -> None:
    result.response_ids += token_ids
    result.response_mask += [mask] * len(token_ids)
    result.turn_ids += [turn] * len(token_ids)
    if mask == 0 and result.response_logprobs is not None:
        result.response_logprobs += [0.0] * len(token_ids)


def episode_extra_fields(result: EpisodeResult) -> dict[str, Any]:
    """What `AgentLoopOutput.extra_fields` carries: verl turns every key into a per-row column of the batch's
    `non_tensor_batch`, where a patched advantage estimator (GiGPO's) can find the step anchors and boundaries."""
    return {
        "success": result.success,
        "env_steps": result.num_steps,
        "step_rewards": list(result.rewards),
        "step_valid": [bool(info.get("valid", True)) for info in result.infos],
        "anchors": list(result.anchors),
        "action_spans": [list(span) for span in result.action_spans],
        "turn_ids": list(result.turn_ids),
        "terminated": result.terminated,
        "truncated": result.truncated,
        "cut": result.cut,
        # verl's default keys, so that rows of this loop and of verl's tool loop concatenate
        "turn_scores": list(result.rewards),
        "tool_rewards": [],
    }


def output_fields(result: EpisodeResult) -> dict[str, Any]:
    """The keyword arguments of verl's `AgentLoopOutput` for one played episode (what `CourseEnvAgentLoop.run`
    returns; the tree and step-mode layouts build theirs from it too)."""
    return {
        "prompt_ids": result.prompt_ids,
        "response_ids": result.response_ids,
        "response_mask": result.response_mask,
        "response_logprobs": result.response_logprobs,
        "reward_score": result.total_reward,
        "num_turns": result.chat_turns,
        "metrics": {"generate_sequences": result.generate_seconds, "tool_calls": result.env_seconds},
        "extra_fields": episode_extra_fields(result),
    }


# The verl agent loop (only where verl is installed) ------------------------------------------------------------
def verl_available() -> bool:
    """Whether `import verl` would find verl (then `CourseEnvAgentLoop` is defined)."""
    spec = importlib.util.find_spec("verl")
    # Run as a script from its own folder (`python verl.py`), this file would shadow the package: not verl.
    return spec is not None and Path(spec.origin or "").resolve() != Path(__file__).resolve()


if verl_available():
    # Not wrapped in try/except: where verl is installed but broken, the error should say so.
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

    @register(AGENT_NAME)
    class CourseEnvAgentLoop(AgentLoopBase):
        """verl agent loop playing one course environment episode per `run()`.

        verl builds it per row with `hydra.utils.instantiate` from the agent-loop yaml
        (`agent_loop_config_text`) and calls `run(sampling_params, **row)`, the row being an `RLHFDataset` item of
        `export_parquet`'s file: `extra_info` names the chapter, split and seed. `self.tokenizer` is the tokenizer
        of `actor_rollout_ref.model.path` (a course base checkpoint's); `self.server_manager.generate` is verl's
        vLLM/SGLang client. The response is capped by `rollout.response_length` on top of the chapter's own caps,
        so it always fits verl's padded tensors.
        """

        async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
            """`kwargs` are the row's fields (`extra_info`, `data_source`, `raw_prompt`, `index` ...)."""
            extra = dict(kwargs["extra_info"])
            tasks = chapter_tasks(extra["chapter"])
            sampling = SamplingConfig(
                temperature=float(sampling_params.get("temperature", tasks.sampling.temperature)),
                max_turn_tokens=int(extra.get("max_turn_tokens", tasks.sampling.max_turn_tokens)),
                max_total_tokens=int(extra.get("max_total_tokens", tasks.sampling.max_total_tokens)),
                stop_tags=tuple(extra.get("stop_tags", tasks.sampling.stop_tags)),
            )
            # One id per episode: verl's client routes every turn of it to the same server (prefix cache).
            request_id = uuid.uuid4().hex

            async def generate(prompt_ids: list[int], params: dict[str, Any]) -> tuple[list[int], list[float] | None]:
                out = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=prompt_ids, sampling_params=params
                )
                return list(out.token_ids), (list(out.log_probs) if out.log_probs else None)

            result = await play_episode(
                tasks.make_env(str(extra["split"])),
                int(extra["seed"]),
                self.tokenizer,
                generate,
                sampling,
                sampling_params,
                max_response_tokens=int(self.rollout_config.response_length),
                # verl left-pads prompts to rollout.prompt_length (set by data.max_prompt_length): refuse longer ones
                max_prompt_tokens=int(self.rollout_config.prompt_length),
            )
            return AgentLoopOutput(**output_fields(result))


# The dataset and the agent-loop yaml ----------------------------------------------------------------------------
def sequence_lengths(chapter: str | int, count: int = DEFAULT_COUNT) -> tuple[int, int]:
    """verl's `data.max_prompt_length` and `data.max_response_length` for a chapter: its longest prompt (`[bos]` and
    the reset observation) over the first `count` training seeds and `count` held-out ones, and its
    `max_total_tokens`, which no sequence outgrows (so a response is always shorter)."""
    from course_lib import data

    tasks = chapter_tasks(chapter)
    tokenizer = data.load_base(tasks.base)[1]
    longest = 0
    for split, seeds in (("train", range(count)), ("test", tasks.held_out_seeds("test", count))):
        env = tasks.make_env(split)
        for seed in seeds:
            longest = max(longest, 1 + len(encode(tokenizer, env.reset(seed=seed)[0])))
    return longest, tasks.sampling.max_total_tokens


def export_rows(chapter: str | int, split: str, count: int, tree: dict[str, Any] | None = None) -> dict[str, list]:
    """Columns of `count` tasks of a chapter's split, as verl's `RLHFDataset` reads them.

    `prompt` is the reset observation as one user message (see the module docstring: the agent loop rebuilds the
    prompt ids from `extra_info`'s seed); `reward_model.ground_truth` is the problem's key (the environment itself
    computes the reward, which the loop returns); `extra_info` says which environment to build and how long a
    sequence may grow; with `tree` (`TreeConfig` fields, e.g. `{"rule": "arpo"}`), also `tree`, the settings
    `verl_trees.TreeAgentLoopWorker` grows each prompt's tree with.
    """
    tasks = chapter_tasks(chapter)
    seeds = task_seeds(chapter, split, count)
    env = tasks.make_env(split)
    columns: dict[str, list] = {name: [] for name in ("data_source", "prompt", "agent_name", "reward_model")}
    columns["extra_info"] = []
    for index, seed in enumerate(seeds):
        obs, _ = env.reset(seed=seed)
        columns["data_source"].append(f"course_lib/{tasks.key}/{tasks.env_name}")
        columns["prompt"].append([{"role": "user", "content": obs}])
        columns["agent_name"].append(AGENT_NAME)
        columns["reward_model"].append({"style": "rule", "ground_truth": str(env.problem_key())})
        columns["extra_info"].append(
            {
                "index": index,
                "seed": int(seed),
                "split": split,
                "env": tasks.env_name,
                "chapter": tasks.key,
                "base": tasks.base,
                "max_turn_tokens": tasks.sampling.max_turn_tokens,
                "max_total_tokens": tasks.sampling.max_total_tokens,
                "stop_tags": list(tasks.sampling.stop_tags),
                **({"tree": dict(tree)} if tree else {}),
            }
        )
    return columns


def export_parquet(
    chapter: str | int, split: str, out_dir: str | Path, count: int = DEFAULT_COUNT, tree: dict[str, Any] | None = None
) -> Path:
    """Write `count` tasks of a chapter's split to `out_dir/<chapter>_<split>.parquet` (for `data.train_files` or
    `data.val_files`) through `datasets`; returns the file's path."""
    from datasets import Dataset, disable_progress_bars

    disable_progress_bars()  # one small file: a progress bar would only clutter notebook and CLI output
    key = chapter_key(chapter)
    path = Path(out_dir) / f"{key}_{split}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_dict(export_rows(key, split, count, tree)).to_parquet(str(path))
    return path


def agent_loop_config_text() -> str:
    """The yaml that `actor_rollout_ref.rollout.agent.agent_loop_config_path` points to: a list of `{name,
    _target_}` entries, which verl's agent-loop workers register (they do not import this module themselves)."""
    return f"- name: {AGENT_NAME}\n  _target_: {AGENT_LOOP_TARGET}\n"


def write_agent_loop_config(path: str | Path) -> Path:
    """Write `agent_loop_config_text()` to `path`; returns it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(agent_loop_config_text())
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m course_lib.integrations.verl", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="a chapter's tasks as a parquet file for verl's RLHFDataset")
    export.add_argument("--chapter", required=True, help="tool chapter: 00, 03, 04, 05, 06 or 08")
    export.add_argument("--split", default="train", help="train, or a held-out split (test; novel for 05)")
    export.add_argument("--out", required=True, help="folder for <chapter>_<split>.parquet")
    export.add_argument("--count", type=int, default=DEFAULT_COUNT, help="number of tasks")
    export.add_argument("--tree", choices=("arpo", "aepo"), help="grow each prompt's samples as ARPO's or AEPO's tree")
    export.add_argument("--global-samples", type=int, help="the tree's global samples per prompt (default n // 2)")
    config = commands.add_parser("agent-config", help="write the agent-loop yaml for agent_loop_config_path")
    config.add_argument("--out", required=True, help="path of the yaml file")
    launch = commands.add_parser(
        "launch", help="print the verl command of a method (course_lib.integrations.verl_launch)"
    )
    launch.add_argument(
        "--method", required=True, help="grpo, gigpo, arpo, aepo, starpo_s, snr_top_p, entropy_balanced"
    )
    launch.add_argument("--chapter", default="00", help="tool chapter of the exported tasks (00, 03-06, 08)")
    launch.add_argument("--data", default="verl_data", help="folder of the export and agent_loops.yaml")
    launch.add_argument("--prompts", type=int, default=32, help="data.train_batch_size")
    launch.add_argument("--group", type=int, default=8, help="actor_rollout_ref.rollout.n")
    args = parser.parse_args(argv)
    if args.command == "export":
        tree = None
        if args.tree:
            tree = {"rule": args.tree, **({"global_samples": args.global_samples} if args.global_samples else {})}
        print(export_parquet(args.chapter, args.split, args.out, args.count, tree))
    elif args.command == "launch":
        from course_lib.integrations.verl_launch import command

        key = chapter_key(args.chapter)
        prompt_length, response_length = sequence_lengths(key)
        print(command(args.method, chapter=key, data_dir=args.data, model_path=f"data/{chapter_tasks(key).base}",
                      prompt_length=prompt_length, response_length=response_length,
                      prompts=args.prompts, group=args.group))  # fmt: skip
    else:
        print(write_agent_loop_config(args.out))


if __name__ == "__main__":
    main()

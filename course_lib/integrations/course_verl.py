"""The course's tool tasks on verl's agent loop: one course environment episode per verl `run()`.

verl (tested with verl 0.9.1) trains multi-turn agents through `verl.experimental.agent_loop`: for each dataset row
it instantiates the `AgentLoopBase` subclass named by the row's `agent_name` column and awaits
`run(sampling_params, **row)`, which must return an `AgentLoopOutput` (pydantic) holding `prompt_ids`, and
`response_ids` / `response_mask` / `response_logprobs` in which the tokens the policy generated (mask 1) and the
tokens the environment returned (mask 0) alternate in order. Tokens come from an inference server through
`server_manager.generate(request_id=..., prompt_ids=..., sampling_params=...)`, which returns a `TokenOutput` with
`token_ids` and `log_probs`. When the output's `reward_score` is set, verl does not run its reward function for it.

This module has three layers:

- `play_episode`: one episode through `server_engine.ServerEngine`, the course's turn rule (`rollout.advance`, the
  one `RolloutEngine` applies) over any async `generate(prompt_ids, sampling_params) -> (token_ids, logprobs)`
  callable, returned as a course `Trajectory`; `output_fields` lays it out as verl's `AgentLoopOutput`. It needs no
  verl, so the main environment tests it against the course's own rollouts.
- `CourseEnvAgentLoop`, registered in verl as `AGENT_NAME`: a thin `AgentLoopBase` subclass that calls
  `play_episode` with verl's server manager. It is defined only when verl is installed (verl pins a transformers
  older than the course's main environment, so it lives in its own virtual environment; see `make test-verl`);
  importing this module without verl gives everything else.
- `export_parquet` and the command line `python -m course_lib.integrations.course_verl export ...`: a chapter's tasks as
  the parquet file verl's `RLHFDataset` reads, and `agent_loop_config_text` / `write_agent_loop_config`: the yaml
  that `actor_rollout_ref.rollout.agent.agent_loop_config_path` points to.

The survey's methods beyond GRPO live beside this module: `verl_gigpo` (GiGPO's estimator, trajectory and step
mode), `verl_filters` (StarPO-S's and RAGEN-2's group filters, AEPO's balanced clip), `verl_patch` (the one patch
of `compute_advantage` they need, installed in verl's Ray processes by a setup hook), `verl_trees` (ARPO's and
AEPO's trees through an agent-loop manager), `verl_monitor` (chapter 12's MI stop with rollback to a verl
checkpoint) and `verl_launch` (each method's overrides; `python -m course_lib.integrations.course_verl launch --method
M` prints the command).

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
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from course_lib.chapters import chapter_key
from course_lib.engine.rollout import SamplingConfig, Trajectory
from course_lib.engine.server_engine import ServerEngine
from course_lib.envs.base import TextEnv
from course_lib.tasks.tool_task import ToolTask
from course_lib.tokenizer import encode

AGENT_NAME = "course_env_agent"
"""The `agent_name` every exported row carries, and the name the agent loop is registered under."""
AGENT_LOOP_TARGET = "course_lib.integrations.course_verl.CourseEnvAgentLoop"
"""The class verl's hydra instantiates for `AGENT_NAME` (the `_target_` of the agent-loop yaml)."""
DEFAULT_COUNT = 256
"""Rows per exported split when no count is given."""

Generate = Callable[[list[int], dict[str, Any]], Awaitable[tuple[list[int], list[float] | None]]]
"""`await generate(prompt_ids, sampling_params)` -> the new token ids and their log-probs (None when the server
returned none): one call of an inference server, as verl's `server_manager.generate` is one."""


# Chapters ------------------------------------------------------------------------------------------------------
@functools.cache
def chapter_tasks(chapter: str | int) -> ToolTask:
    """The training task of `chapter` that an agent loop over whole episodes can play: every chapter's `task`
    (`chapters.tasks()`) but a step-mode one (00, 03, 04, 05, 06, and 08, ARPO's search task, which chapters 11
    (AEPO) and 12 (the capstone) train on too, and whose trees and filters `verl_trees` and `verl_patch` bring to
    verl)."""
    from course_lib import chapters  # imported here: the chapter modules pull in the whole course

    key = chapter_key(chapter)
    playable = {k: task for k, task in chapters.tasks().items() if not task.step_mode}
    if key not in playable:
        raise KeyError(f"chapter {key} has no tool task; chapters: {sorted(playable)}")
    return playable[key]


def task_seeds(chapter: str | int, split: str, count: int) -> list[int]:
    """Seeds of `count` tasks: the first `count` seeds of the training split (as the course's trainer draws its
    prompts, a problem may repeat), or the chapter's `count` distinct held-out seeds of any other split."""
    tasks = chapter_tasks(chapter)
    return list(range(count)) if split == "train" else tasks.held_out_seeds(split, count)


# The turn logic, without verl ----------------------------------------------------------------------------------
async def play_episode(
    env: TextEnv,
    seed: int,
    tokenizer,
    generate: Generate,
    sampling: SamplingConfig,
    sampling_params: dict[str, Any] | None = None,
    max_response_tokens: int | None = None,
    max_prompt_tokens: int | None = None,
) -> Trajectory:
    """Reset `env` with `seed` and play it to the end with `generate`, turn by turn, as `RolloutEngine` does: the
    episode as a course `Trajectory` (entropies unknown to a server are `-log p`; `server_engine`).

    `server_engine.ServerEngine` plays it: each turn asks for at most `sampling.max_turn_tokens` new tokens (fewer
    when the sequence's `sampling.max_total_tokens` cap, or `max_response_tokens` of response, is closer) and
    stops at the first of `sampling.stop_tags`; `rollout.advance` trims the turn, sends it or marks the sequence
    `cut`, and appends the observation. A malformed action is the environment's business: it answers with feedback
    and a penalty, like any other step. A prompt longer than `max_prompt_tokens` raises ValueError before any
    generation. To read the server's timings and whether it returned log-probs, hold the engine (`episode_engine`)."""
    engine = episode_engine(generate, tokenizer, sampling, sampling_params, max_response_tokens)
    return await engine.play_episode(env, seed, max_prompt_tokens)


def episode_engine(
    generate: Generate,
    tokenizer,
    sampling: SamplingConfig,
    sampling_params: dict[str, Any] | None = None,
    max_response_tokens: int | None = None,
) -> ServerEngine:
    """A `ServerEngine` over verl's two-value `generate` (token ids and log-probs; verl's server returns no
    entropies)."""

    async def turn(prompt_ids: list[int], params: dict[str, Any]):
        token_ids, logprobs = await generate(prompt_ids, params)
        return token_ids, logprobs, None

    return ServerEngine(turn, tokenizer, sampling, sampling_params, max_response_tokens=max_response_tokens)


def response_layout(t: Trajectory) -> tuple[int, list[tuple[int, int]], int]:
    """The prompt's length, `[start, end)` of each step's action within the response (the unsent action of a cut
    sequence included) and the number of observations appended to it (none after the last step, nor where the cap
    left no room)."""
    prompt = sum(1 for turn in t.turn_ids if turn < 0)
    rows = list(zip(t.turn_ids[prompt:], t.loss_mask[prompt:], strict=True))
    spans, observations = [], 0
    for turn in range(max((k for k, _ in rows), default=-1) + 1):
        actions = [position for position, (k, m) in enumerate(rows) if k == turn and m]
        if actions:
            spans.append((actions[0], actions[-1] + 1))
        observations += any(k == turn and not m for k, m in rows)
    return prompt, spans, observations


def episode_extra_fields(t: Trajectory) -> dict[str, Any]:
    """What `AgentLoopOutput.extra_fields` carries: verl turns every key into a per-row column of the batch's
    `non_tensor_batch`, where a patched advantage estimator (GiGPO's) can find the step anchors and boundaries."""
    prompt, spans, _ = response_layout(t)
    return {
        "success": t.success,
        "env_steps": t.num_turns,
        "step_rewards": list(t.rewards),
        "step_valid": [bool(info.get("valid", True)) for info in t.infos],
        "anchors": list(t.anchors),
        "action_spans": [list(span) for span in spans],
        "turn_ids": list(t.turn_ids[prompt:]),
        "terminated": t.terminated,
        "truncated": t.truncated,
        "cut": t.cut,
        # verl's default keys, so that rows of this loop and of verl's tool loop concatenate
        "turn_scores": list(t.rewards),
        "tool_rewards": [],
    }


def output_fields(t: Trajectory, engine: ServerEngine | None = None) -> dict[str, Any]:
    """The keyword arguments of verl's `AgentLoopOutput` for one played episode (what `CourseEnvAgentLoop.run`
    returns; the tree and step-mode layouts build theirs from it too). With the `engine` that played it (alone):
    its timings as verl's metrics, and `response_logprobs=None` where the server returned none (verl then
    recomputes them all). `num_turns` is verl's count of messages: the prompt, each action, each observation."""
    prompt, spans, observations = response_layout(t)
    missing = engine is not None and engine.logprobs_missing
    timings = engine.timings if engine is not None else {}
    return {
        "prompt_ids": t.token_ids[:prompt],
        "response_ids": t.token_ids[prompt:],
        "response_mask": t.loss_mask[prompt:],
        "response_logprobs": None if missing else t.logprobs[prompt:],
        "reward_score": t.total_reward,
        "num_turns": 1 + len(spans) + observations,
        "metrics": (
            {"generate_sequences": timings["generate"], "tool_calls": timings["env"]} if engine is not None else {}
        ),
        "extra_fields": episode_extra_fields(t),
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

            engine = episode_engine(
                generate, self.tokenizer, sampling, sampling_params,
                max_response_tokens=int(self.rollout_config.response_length),
            )  # fmt: skip
            trajectory = await engine.play_episode(
                tasks.make_env(str(extra["split"])),
                int(extra["seed"]),
                # verl left-pads prompts to rollout.prompt_length (set by data.max_prompt_length): refuse longer ones
                max_prompt_tokens=int(self.rollout_config.prompt_length),
            )
            return AgentLoopOutput(**output_fields(trajectory, engine))


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
        columns["data_source"].append(f"course_lib/{tasks.chapter}/{tasks.label}")
        columns["prompt"].append([{"role": "user", "content": obs}])
        columns["agent_name"].append(AGENT_NAME)
        columns["reward_model"].append({"style": "rule", "ground_truth": str(env.problem_key())})
        columns["extra_info"].append(
            {
                "index": index,
                "seed": int(seed),
                "split": split,
                "env": tasks.label,
                "chapter": tasks.chapter,
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
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__.split("\n")[0])
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

"""A course environment trained by TRL's `GRPOTrainer` (trl 1.16.0), with the chapter's base, tokenizer and reward.

    python -m course_lib.integrations.course_trl --chapter 00 --steps 3

TRL generates single-turn completions itself; a multi-turn tool episode comes in through its `rollout_func` hook
(experimental in TRL 1.16). `GRPOTrainer` calls `rollout_func(prompts, trainer)` with each prompt of the batch
repeated `num_generations` times in a row; `course_rollout` plays every copy to the end in the chapter's
environment with the course's rollout engine and the trainer's current weights, and returns per completion:

- `prompt_ids`: BOS and the first observation, as the course tokenizes it;
- `completion_ids`: every later token in order, the policy's actions and the environment's observations alike;
- `logprobs`: the sampling log-probs (0 on observation tokens);
- `env_mask`: 1 on the policy's tokens, 0 on the environment's; TRL multiplies it into its loss mask, so tool
  output is never trained on (it honours `env_mask` only when no `tools`/`environment_factory` are set);
- `env_reward`: the episode's total reward. TRL forwards any extra key to the reward functions, and the single
  reward function here (`env_reward`) returns it, so the chapter's reward is the only reward source.

From there TRL does the rest of a GRPO step its own way: group-normalised advantages (`scale_rewards="group"`,
std + 1e-4), its "dapo" loss (a token mean over the batch, clip 0.2), AdamW. TRL's tool-calling path
(`environment_factory`) is not used: it needs a chat template TRL recognises, which a word-level tokenizer trained
from nothing does not have.

Chapters 07 and 08 train their own method (07: GiGPO in step mode, 08: ARPO's tree; `--method` picks grpo, gigpo,
arpo, aepo, starpo_s or snr instead) through the course's `GRPOTrainer` subclass (`trl_chapters`, `trl_methods`,
`trl_rollouts`), whose advantages, filters and loss are the course loop's:

    python -m course_lib.integrations.course_trl --chapter 07 --steps 2

Chapter 05's task is single-turn, TRL's home ground: `native_trainer` lets TRL generate the completion and scores it
with the chapter's environment in a reward function (the benchmark `python -m course_lib.lab.bench trl` uses both).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import copy
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from course_lib import data
from course_lib.chapters import chapter_key, tool_tasks
from course_lib.engine.rollout import RolloutEngine, SamplingConfig, Trajectory
from course_lib.tasks.tool_task import ToolTask
from course_lib.tokenizer import decode, is_word_level, pieces, single_token_id, tag_id

# `rollout_func` is experimental in TRL 1.16 and says so once per trainer; the course knows.
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from trl import GRPOConfig, GRPOTrainer  # noqa: E402  (after the variable above)
from trl import __version__ as trl_version  # noqa: E402

TESTED_TRL = "1.16.0"
"""The TRL version this module was written and tested against (`pip install -e .[trl]` pins it)."""
if trl_version != TESTED_TRL:  # `rollout_func` is experimental: its contract may change between releases
    warnings.warn(f"{__name__} was tested with trl {TESTED_TRL}, not {trl_version}", stacklevel=1)
REPORT_TO = ("tensorboard", "trackio", "wandb")
"""Trackers `--report-to` passes to TRL (transformers' integrations of the same names; each needs its package)."""


def tool_chapters() -> tuple[str, ...]:
    """The tool tasks of the course (`chapters.tool_tasks`) that TRL can train, by chapter number (00, 03 ... 06)."""
    return tuple(key.removeprefix("ch") for key in tool_tasks())


def method_chapters() -> tuple[str, ...]:
    """Chapters whose own method TRL trains through the course's trainer subclass (`trl_chapters`; a task with a
    `method`): 07's GiGPO in step mode, 08's ARPO tree."""
    from course_lib import chapters  # every chapter module

    return tuple(key.removeprefix("ch") for key, task in chapters.tasks().items() if task.method is not None)


METHOD_NAMES = ("grpo", "gigpo", "arpo", "aepo", "starpo_s", "snr")
"""`--method` on chapters 07 and 08 (`trl_chapters.METHODS`)."""


@dataclass
class TRLSettings:
    """One TRL run: `prompts` distinct training tasks x `group` samples per optimizer step."""

    steps: int = 3
    prompts: int = 8
    group: int = 8
    learning_rate: float = 5e-4
    """Chapter 00's GRPO learning rate; TRL's default (1e-6) is meant for pretrained billion-parameter models."""
    seed: int = 0
    logging_steps: int = 1
    """TRL logs (and averages its metrics) every this many steps; the command line prints every step."""
    gpu: bool = False
    """Train on the GPU(s) in bfloat16 where supported (`--gpu`); the default is the CPU in float32."""
    report_to: tuple[str, ...] = ()
    """TRL's (transformers') trackers, e.g. `("tensorboard",)` (`--report-to`); none by default."""
    save_steps: int = 0
    """Save a trainer checkpoint (weights, optimizer, scheduler, RNG) every this many steps (`--save-steps`) into
    `output_dir`; 0 saves nothing, as before."""
    output_dir: str | None = None
    """Where TRL writes its checkpoints and tracker logs (`--output-dir`); None: a fresh temporary folder, removed
    when the process exits unless something asked to keep files there (`save_steps`, `report_to`)."""


def chapter_task(chapter: str) -> ToolTask:
    """The tool task of chapter `chapter` ("00", "03" ... "06")."""
    key = chapter_key(chapter)
    tasks = tool_tasks()
    if key not in tasks:
        raise KeyError(f"no tool task for chapter {chapter!r}; TRL can train chapters {', '.join(tool_chapters())}")
    return tasks[key]


def left_padded(tokenizer):
    """A copy of the course tokenizer that pads on the left, as `GRPOTrainer` requires for generation."""
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.padding_side = "left"
    return tokenizer


PROMPT_MARK = "\u2063#"
"""Joins a first observation and a seed into a prompt's text when another problem already shows that observation
(`training_prompts`): invisible separator, `#`."""


def training_prompts(task: ToolTask, count: int, first_seed: int = 0, at_most: bool = False) -> dict[str, int]:
    """`count` distinct problems of the task's training split (by `problem_key()`), each as a prompt text with the
    first seed that poses it: the seeds `envs.base.distinct_seeds` picks.

    TRL hands `rollout_func` only the prompt text, so the text is the problem's key, and the rollout plays the
    problem's seed (the model sees the environment's own first observation). A problem's text is its first
    observation, unless a problem already taken shows the same observation (a hidden goal, which `problem_key`
    names and the text does not): then `PROMPT_MARK` and the seed are appended, so that no problem is lost to
    another's text. Seeds are scanned upward from `first_seed` and repeated problems skipped; a task with fewer than
    `count` problems in `100 * count` seeds is a ValueError saying so, or, with `at_most`, gives the ones it has."""
    prompts: dict[str, int] = {}
    problems: set = set()
    env, seed = task.make_env(), first_seed
    while len(prompts) < count:
        if seed - first_seed >= 100 * count:
            if at_most:
                break
            raise ValueError(
                f"the task has only {len(prompts)} distinct problems (by problem_key()) in {100 * count} seeds, "
                f"{count} asked for: ask for fewer prompts or steps, or check that the environment's problem_key() "
                "tells its problems apart (TextEnv's default is the reset text)"
            )
        observation, _ = env.reset(seed=seed)
        key = env.problem_key()
        if key not in problems:
            problems.add(key)
            prompts[observation if observation not in prompts else f"{observation}{PROMPT_MARK}{seed}"] = seed
        seed += 1
    return prompts


def completion_fields(trajectory: Trajectory) -> dict:
    """The four per-token fields TRL's `rollout_func` returns for one course row: prompt ids (up to the first
    action), completion ids, sampling log-probs (0 on observation tokens) and `env_mask`."""
    prompt = trajectory.prefix_length(0)
    return {
        "prompt_ids": trajectory.token_ids[:prompt],
        "completion_ids": trajectory.token_ids[prompt:],
        "logprobs": trajectory.logprobs[prompt:],
        "env_mask": trajectory.loss_mask[prompt:],
    }


def split_trajectory(trajectory: Trajectory) -> dict:
    """One course trajectory as TRL's rollout fields: `completion_fields` and the episode's reward, `env_reward`."""
    return {**completion_fields(trajectory), "env_reward": trajectory.total_reward}


def course_rollout(
    task: ToolTask,
    tokenizer,
    seeds: dict[str, int],
    generator: torch.Generator,
    sampling: SamplingConfig | None = None,
    keep: list[Trajectory] | None = None,
) -> Callable[[list[str], GRPOTrainer], dict[str, list]]:
    """A `rollout_func` for `GRPOTrainer`: each prompt (repeated `num_generations` times) played in a fresh
    environment of `task` with the seed `seeds[prompt]`, sampled by the course's engine from the trainer's model.
    With `keep`, each call's trajectories replace its contents (for checks against the environment's transcript)."""

    def rollout(prompts: list[str], trainer: GRPOTrainer) -> dict[str, list]:
        unknown = [p for p in prompts if p not in seeds]
        if unknown:
            raise KeyError(f"rollout_func got a prompt that is not in its dataset: {unknown[0]!r}")
        model = trainer.accelerator.unwrap_model(trainer.model)
        engine = RolloutEngine(model, tokenizer, sampling or task.sampling)
        groups: dict[str, int] = {}
        group_ids = [groups.setdefault(p, len(groups)) for p in prompts]
        envs = [task.make_env() for _ in prompts]
        trajectories = engine.rollout(envs, [seeds[p] for p in prompts], group_ids, generator=generator)
        if keep is not None:
            keep[:] = trajectories
        fields = [split_trajectory(t) for t in trajectories]
        return {key: [f[key] for f in fields] for key in fields[0]}

    return rollout


def env_reward(prompts, completions, env_reward: Sequence[float], **kwargs) -> list[float]:
    """TRL reward function: the environment's episode reward, forwarded by `course_rollout` (key `env_reward`)."""
    return [float(r) for r in env_reward]


def env_scored_reward(task: ToolTask, tokenizer, seeds: dict[str, int]) -> Callable[..., list[float]]:
    """TRL reward function for a single-turn task whose completion TRL generated: the completion's token ids
    decoded (tags kept; TRL's own decoding drops special tokens, and the course's tags are special tokens) and
    played as the one action of a fresh environment reset with the prompt's seed."""

    def score(prompts, completions, completion_ids, **kwargs) -> list[float]:
        rewards = []
        for prompt, ids in zip(prompts, completion_ids, strict=True):
            env = task.make_env()
            env.reset(seed=seeds[prompt.removeprefix(tokenizer.bos_token + " ")])
            _, reward, *_ = env.step(decode(tokenizer, ids))
            rewards.append(float(reward))
        return rewards

    score.__name__ = "env_scored_reward"
    return score


def grpo_config(settings: TRLSettings, output_dir: str, max_completion_length: int, **overrides) -> GRPOConfig:
    """TRL's `GRPOConfig` for a tiny CPU model: one optimizer step per batch of `prompts x group` completions;
    `overrides` are further `GRPOConfig` fields (the course's clip for its methods, `trl_chapters`)."""
    return GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=settings.prompts * settings.group,
        num_generations=settings.group,
        max_steps=settings.steps,
        learning_rate=settings.learning_rate,
        lr_scheduler_type="constant",
        max_completion_length=max_completion_length,
        temperature=1.0,
        beta=0.0,
        use_cpu=not settings.gpu,
        bf16=settings.gpu and torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
        gradient_checkpointing=False,
        logging_steps=settings.logging_steps,
        save_strategy="steps" if settings.save_steps else "no",
        save_steps=settings.save_steps or 500,  # read only when saving (500 is transformers' own default)
        report_to=list(settings.report_to) or "none",
        disable_tqdm=True,
        seed=settings.seed,
        **overrides,
    )


def temporary_output_dir(keep: bool = False) -> str:
    """A fresh `course-trl-*` folder in the system's temporary directory for a trainer's `output_dir`, which
    `GRPOConfig` requires even when nothing is saved; removed when the process exits unless `keep` (the trainer
    saves checkpoints or tracker logs there, and the command prints where)."""
    path = tempfile.mkdtemp(prefix="course-trl-")
    if not keep:
        atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _trainer(
    model, tokenizer, prompts: dict[str, int], reward, settings: TRLSettings, max_completion: int,
    trainer_class: type[GRPOTrainer] = GRPOTrainer, config_overrides: dict | None = None, **kwargs,
):  # fmt: skip
    from datasets import Dataset, disable_progress_bars

    disable_progress_bars()
    dataset = Dataset.from_dict({"prompt": list(prompts)})
    output_dir = settings.output_dir or temporary_output_dir(keep=bool(settings.save_steps or settings.report_to))
    with quiet_deprecations():
        return trainer_class(
            model=model,
            reward_funcs=reward,
            args=grpo_config(settings, output_dir, max_completion, **(config_overrides or {})),
            train_dataset=dataset,
            processing_class=left_padded(tokenizer),
            **kwargs,
        )


def dataset_prompts(task: ToolTask, settings: TRLSettings) -> dict[str, int]:
    """The trainer's dataset: one epoch of `settings.steps` batches of `settings.prompts` distinct training prompts
    (`training_prompts`), which TRL's sampler shuffles."""
    return training_prompts(task, settings.prompts * max(settings.steps, 1))


def rollout_trainer(
    task: ToolTask | str,
    settings: TRLSettings,
    model=None,
    tokenizer=None,
    keep: list[Trajectory] | None = None,
) -> GRPOTrainer:
    """`GRPOTrainer` on a tool task (a `ToolTask`, or a chapter's key: `chapter_task`) through `course_rollout`
    (multi-turn, env tokens masked); `keep` receives each step's trajectories."""
    task = task if isinstance(task, ToolTask) else chapter_task(task)
    if model is None:
        model, tokenizer = data.load_base(task.base)
    prompts = dataset_prompts(task, settings)
    generator = torch.Generator().manual_seed(settings.seed)
    rollout = course_rollout(task, tokenizer, prompts, generator, keep=keep)
    stop_at_tags(model, tokenizer, task, warn=False)  # the course's engine generates, and stops at strings itself
    max_completion = task.sampling.max_total_tokens
    return _trainer(model, tokenizer, prompts, env_reward, settings, max_completion, rollout_func=rollout)


def native_trainer(task: ToolTask | str, settings: TRLSettings, model=None, tokenizer=None) -> GRPOTrainer:
    """`GRPOTrainer` generating by itself on a single-turn task (chapter 05's; a `ToolTask` or a chapter's key): the
    prompt is BOS and the question, as the course tokenizes it; generation stops at the task's stop tags or after
    `max_turn_tokens`."""
    task = task if isinstance(task, ToolTask) else chapter_task(task)
    if model is None:
        model, tokenizer = data.load_base(task.base)
    seeds = dataset_prompts(task, settings)
    if marked := [text for text in seeds if PROMPT_MARK in text]:
        raise ValueError(
            f"TRL generates from the prompt's text alone, and {marked[0]!r} shows a first observation another "
            "problem shows too: a single-turn task needs a text that names its problem"
        )
    # The course tokenizer adds no special tokens, so BOS is part of the prompt's text (a single token).
    prompts = {f"{tokenizer.bos_token} {text}": seed for text, seed in seeds.items()}
    stop_at_tags(model, tokenizer, task)
    reward = env_scored_reward(task, tokenizer, seeds)
    return _trainer(model, tokenizer, prompts, reward, settings, task.sampling.max_turn_tokens)


def stop_at_tags(model, tokenizer, task: ToolTask, warn: bool = True) -> None:
    """Make the chapter's stop tags end-of-sequence ids of `model`'s generation config: TRL's generation stops at
    them, and its statistics count a completion ending in one as finished rather than truncated.

    Only a tag that is one token can be an end-of-sequence id. The course's tokenizers have every tag as one token
    (`tag_id` raises, naming the pieces, if one is missing); a checkpoint's BPE tokenizer splits them, and TRL's own
    `generate` call passes no tokenizer, so `stop_strings` cannot stand in: there generation stops at EOS (a chat
    model ends its message with it) and, with `warn`, a warning names the tags it cannot stop at."""
    if is_word_level(tokenizer):
        stop_ids = [tag_id(tokenizer, tag) for tag in task.sampling.stop_tags]
    else:
        single = {tag: single_token_id(tokenizer, tag) for tag in task.sampling.stop_tags}
        stop_ids = [token for token in single.values() if token is not None]
        if (split := [tag for tag, token in single.items() if token is None]) and warn:
            warnings.warn(
                f"TRL's generation cannot stop at {split}: they are several tokens of this tokenizer "
                f"({[pieces(tokenizer, tag) for tag in split]}); it stops at EOS and the length cap",
                stacklevel=2,
            )
    model.generation_config.eos_token_id = [t for t in (tokenizer.eos_token_id, *stop_ids) if t is not None]


def last_step(trainer: GRPOTrainer) -> dict[str, float]:
    """The last logged step's loss and mean reward (TRL logs every step here)."""
    logged = [row for row in trainer.state.log_history if "loss" in row and "reward" in row]
    if not logged:
        raise RuntimeError("TRL logged no training step")
    return {"loss": float(logged[-1]["loss"]), "reward": float(logged[-1]["reward"])}


def checkpoint_task(
    path: str,
    chapter: str | None = None,
    env: str | None = None,
    settings: TRLSettings | None = None,
    observation_role: str = "tool",
):
    """`(task, model, tokenizer)` for a checkpoint of the user's (any causal LM with a chat template, from disk):
    the chapter's tool task, or any registered environment by name (`env`, train split; its turns end at its
    `stop_tags`), sampled in the model's chat format (observations in `observation_role`'s turns) with token budgets
    measured on this tokenizer (`checkpoint.measured_sampling`)."""
    from course_lib import envs
    from course_lib.rl import checkpoint

    model, tokenizer = checkpoint.load_checkpoint(path)
    if env is not None:
        if env not in envs.names():
            raise KeyError(f"unknown environment {env!r}; choose from {envs.names()}")
        # turns end at what ends the environment's actions (`TextEnv.stop_tags`; none declared: at EOS or the cap)
        stops = tuple(envs.make(env, split="train").stop_tags)
        sampling = SamplingConfig(stop_tags=stops, end_at_eos=True if not stops else None)
        task = ToolTask(env, base=str(path), sampling=sampling, make_env=lambda: envs.make(env, split="train"))
    else:
        task = chapter_task(chapter or "00")
    # the budgets are measured on up to 32 problems' first observations (the texts the model sees)
    prompts = [text.split(PROMPT_MARK)[0] for text in training_prompts(task, 32, at_most=True)]
    sampling = checkpoint.measured_sampling(task.sampling, tokenizer, prompts, observation_role)
    needed = f"the task's episodes of up to {sampling.max_total_tokens} tokens in this tokenizer"
    checkpoint.check_context(model, sampling.max_total_tokens, needed, path)
    return ToolTask(task.label, str(path), sampling, task.make_env), model, tokenizer


def train(
    chapter: str,
    settings: TRLSettings,
    model_path: str | None = None,
    env: str | None = None,
    observation_role: str = "tool",
) -> dict[str, float]:
    """Train chapter `chapter`'s base (or the checkpoint at `model_path`, on `env` if given) for `settings.steps`
    TRL GRPO steps through `course_rollout`."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()
    if model_path is None:
        if env is not None:
            raise ValueError("--env needs --model: the course has a base only for its chapters' tasks")
        trainer = rollout_trainer(chapter, settings)
    else:
        task, model, tokenizer = checkpoint_task(model_path, chapter, env, settings, observation_role)
        trainer = rollout_trainer(task, settings, model, tokenizer)
    quiet_train(trainer)
    print_steps(trainer)
    if settings.report_to or settings.save_steps:
        print(f"TRL's checkpoints and tracker logs are under {trainer.args.output_dir}")
    return {"steps": trainer.state.global_step, **last_step(trainer)}


def print_steps(trainer: GRPOTrainer) -> None:
    """One line per logged step: loss, mean reward, policy tokens per completion, seconds; for the course's methods
    (`trl_methods`) also the rows trained (step mode: one per environment step) and the share a filter kept."""
    for row in trainer.state.log_history:
        if "loss" in row and "reward" in row:
            course = (
                f"  rows {row['course/rows']:.0f}, kept {row['course/kept_rows']:.2f}" if "course/rows" in row else ""
            )
            print(
                f"step {row['step']}: loss {row['loss']:.4f}  reward {row['reward']:.4f}  "
                f"policy tokens per completion {row['completions/mean_length']:.1f}{course}  {row['step_time']:.2f} s"
            )


def quiet_train(trainer: GRPOTrainer) -> None:
    """`trainer.train()` without TRL's printed log dictionaries or transformers' deprecation warnings (the numbers
    stay in `trainer.state.log_history`)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    with quiet_deprecations():
        trainer.train()


@contextlib.contextmanager
def quiet_deprecations():
    """Silence transformers' and peft's `FutureWarning`s about their own APIs, which TRL calls (e.g.
    `is_gradient_checkpointing`); they are not about the run."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        yield


def launch_command(chapter: str = "00", gpus: int = 8, steps: int = 500, prompts: int = 32, group: int = 16) -> str:
    """The command that trains chapter `chapter` under TRL on `gpus` GPUs of one machine with `accelerate`: one
    process per GPU, each generating and training on its own `prompts x group` completions per step (so the batch
    grows with the GPUs). For several machines add accelerate's `--num_machines`, `--machine_rank` and
    `--main_process_ip`, or run it under DeepSpeed/FSDP with an `accelerate config` file."""
    return (
        f"accelerate launch --multi_gpu --num_processes {gpus} -m course_lib.integrations.course_trl --gpu "
        f"--chapter {chapter} --steps {steps} --prompts {prompts} --group {group}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__.splitlines()[0])
    parser.add_argument("--chapter", default="00", choices=tool_chapters() + method_chapters())
    parser.add_argument(
        "--method", choices=METHOD_NAMES,
        help="chapters 07 and 08: the course method to train (default: the chapter's own, gigpo or arpo)",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--mi-every", type=int, default=0, metavar="K",
        help="chapter 08: chapter 12's MI monitor every K steps, stopping and rolling back on a drop (0: off)",
    )  # fmt: skip
    parser.add_argument("--prompts", type=int, help="distinct training tasks per step (default 8; 07, 08: theirs)")
    parser.add_argument("--group", type=int, help="samples per task, TRL's num_generations (default 8; 07, 08: theirs)")
    parser.add_argument("--learning-rate", type=float, help="default 5e-4 (07, 08: the chapter's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gpu", action="store_true", help="train on the GPU(s), in bfloat16 where supported")
    parser.add_argument("--model", help="a checkpoint folder (any causal LM with a chat template) instead of the base")
    parser.add_argument("--env", help="with --model: any course environment by name instead of the chapter's task")
    parser.add_argument(
        "--env-module", action="append", default=[], metavar="MODULE",
        help="a module to import first, one that registers an environment of yours (envs.register) for --env; "
        "repeatable",
    )  # fmt: skip
    from course_lib.rl import checkpoint  # lazily: it imports peft

    checkpoint.add_observation_role_argument(parser)
    parser.add_argument(
        "--report-to", nargs="+", default=[], choices=REPORT_TO, metavar="TRACKER",
        help=f"TRL's trackers ({', '.join(REPORT_TO)}), logging under --output-dir; none by default",
    )  # fmt: skip
    parser.add_argument("--save-steps", type=int, default=0, help="save a checkpoint every N steps (0: never)")
    parser.add_argument("--output-dir", help="TRL's checkpoints and logs (default: a new temporary folder)")
    args = parser.parse_args(argv)
    if args.save_steps < 0:
        parser.error("--save-steps must be >= 0")
    from course_lib import envs

    try:
        envs.import_modules(args.env_module)  # before --env is looked up: it may name one they register
        if args.env:
            envs.check_name(args.env)
    except ValueError as error:
        parser.error(str(error))
    if args.chapter in method_chapters() or args.method or args.mi_every:
        return main_method(parser, args)
    settings = TRLSettings(
        args.steps, args.prompts or 8, args.group or 8, args.learning_rate or 5e-4, args.seed, gpu=args.gpu,
        report_to=tuple(args.report_to), save_steps=args.save_steps, output_dir=args.output_dir,
    )  # fmt: skip
    if args.env and not args.model:
        parser.error("--env needs --model: the course has a base only for its chapters' tasks")
    if args.observation_role and not args.model:
        parser.error("--observation-role applies to a checkpoint: give --model")
    result = train(args.chapter, settings, args.model, args.env, args.observation_role or "tool")
    print(f"trl_grpo_steps={result['steps']} loss={result['loss']:.4f} reward={result['reward']:.4f}")
    return 0


def main_method(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """`--chapter 07|08 [--method M]`: the course's method through `trl_chapters` (chapter's base only)."""
    owned = method_chapters()
    if args.chapter not in owned:
        parser.error(f"--method and --mi-every need --chapter {' or '.join(owned)}")
    if args.model or args.env or args.report_to or args.save_steps or args.output_dir or args.observation_role:
        parser.error("--model, --env, --observation-role, --report-to, --save-steps and --output-dir are for chapters "
                     "00-06")  # fmt: skip
    from course_lib.integrations import trl_chapters

    settings = trl_chapters.chapter_settings(
        args.chapter, args.steps, args.prompts, args.group, args.learning_rate, args.seed, args.gpu
    )
    if args.mi_every < 0 or (args.mi_every and args.chapter != "08"):
        parser.error("--mi-every takes K >= 0, on chapter 08 (chapter 12's monitor watches its task)")
    trainer, method = trl_chapters.train_method(args.chapter, args.method, settings, args.mi_every)
    print_steps(trainer)
    result = last_step(trainer)
    last = f"trl_{method}_steps={trainer.state.global_step} loss={result['loss']:.4f} reward={result['reward']:.4f}"
    monitor = next((c for c in trainer.callback_handler.callbacks if hasattr(c, "stopped_at")), None)
    if monitor is not None:
        print("MI monitor: " + ", ".join(f"step {step} {mi:.4f}" for step, mi in monitor.history))
        print(f"threshold {monitor.threshold:.4f}; " + (
            "no stop" if monitor.stopped_at is None else f"stopped at step {monitor.stopped_at}, weights rolled back"
        ))  # fmt: skip
        last += f" mi_stopped_at={'none' if monitor.stopped_at is None else monitor.stopped_at}"
    print(last)
    return 0


if __name__ == "__main__":
    sys.exit(main())

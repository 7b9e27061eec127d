"""What the chapters' bases share: the task set's splits (`task_splits`), a base warm-started on demonstrations
(`warm_start_base`) and written as a `data/` artifact (`write_base`), the model a run starts from (`base_for`: the
committed base, or a checkpoint warm-started on the chapter's demonstrations), a config forked onto another
environment (`on_environment`) and a task's cached held-out seeds (`held_out_seeds`)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from course_lib import course_config, data

TASK_SPLITS: Mapping[str, int] = {"train": 2000, "test": 200}
"""Draws per split of a chapter's task set (`task_splits`)."""


def task_splits(
    draw: Callable[[int, str], object],
    columns: Callable[[list], dict[str, list]],
    sizes: Mapping[str, int] = TASK_SPLITS,
) -> dict[str, dict[str, list]]:
    """`{split: {"seed": [0, ..., n - 1], **columns(problems)}}`, `problems` being `draw(seed, split)` for
    the first n seeds of each split: the columns `data.write_task_set` saves."""
    splits = {}
    for split, count in sizes.items():
        problems = [draw(seed, split) for seed in range(count)]
        splits[split] = {"seed": list(range(count)), **columns(problems)}
    return splits


def write_base(
    name: str, build_base: Callable[..., object], data_dir: Path, seed: int, progress: bool, scale: str = "cpu"
) -> None:
    """Artifact `name`: `build_base(folder, seed=seed, scale=scale, progress=progress)` (the base of
    `preset(scale)`) written and recorded in the manifest."""
    data.write_artifact(
        name, lambda folder: build_base(folder, seed=seed, scale=scale, progress=progress), seed, data_dir, scale
    )


def warm_start_base(
    out_dir: str | Path,
    words: Iterable[str],
    model_preset: str,
    max_positions: int,
    texts: Callable[[], Sequence[tuple[str, str]]],
    sft,
    seed: int,
    progress: bool = False,
) -> list[dict[str, float]]:
    """A base checkpoint warm-started on `(prompt, completion)` demonstrations: a tokenizer over `words`,
    then `warm_start.warm_start_and_save` on `demonstration_examples(tokenizer, texts())` (drawn after the
    model is built, in `warm_start_and_save`'s fixed order, so a rebuild writes byte-identical files)."""
    from course_lib.rl.warm_start import demonstration_examples, warm_start_and_save
    from course_lib.tokenizer import build_tokenizer

    tokenizer = build_tokenizer(words)

    def examples():
        return demonstration_examples(tokenizer, texts())

    return warm_start_and_save(out_dir, tokenizer, model_preset, max_positions, examples, sft, seed, progress)


BuildBase = Callable[..., list[dict]]
"""`build_base(out_dir, seed=0, scale="cpu", progress=True, config=None)`: a chapter's base, warm-started and saved
into `out_dir` (its training history returned)."""


def base_builder(
    preset: Callable[[str], object],
    vocabulary: Callable[[], Iterable[str]],
    max_positions: int,
    demonstrations: Callable[[object, int], Sequence[tuple[str, str]]],
) -> BuildBase:
    """The `build_base` of a base warm-started on a task's demonstrations (`warm_start_base`): a word-level tokenizer
    over `vocabulary()`, a model of `config.model_preset` with `max_positions` positions, trained by `config.sft` on
    `demonstrations(config, seed)`, `config` being `preset(scale)` unless given."""

    def build_base(out_dir: str | Path, seed: int = 0, scale: str = "cpu", progress: bool = True, config=None):
        config = config or preset(scale)
        texts = functools.partial(demonstrations, config, seed)
        return warm_start_base(
            out_dir, vocabulary(), config.model_preset, max_positions, texts, config.sft, seed, progress
        )

    return build_base


def base_data(name: str, build_base: BuildBase) -> Callable[..., None]:
    """A chapter's `build_data(data_dir, seed=0, progress=True, scale="cpu")` when its data is one base, written as
    artifact `name` (`python -m course_lib.data build chNN [--scale gpu]`)."""

    def build_data(data_dir: Path, seed: int = 0, progress: bool = True, scale: str = "cpu") -> None:
        write_base(name, build_base, data_dir, seed, progress, scale)

    return build_data


def base_for(
    base_name: str,
    config,
    texts: Callable[[], Sequence[tuple[str, str]]],
    seed: int = 0,
    demonstrated: tuple[str, str] | None = None,
):
    """`(model, tokenizer, config)` a chapter's run starts from: its committed base (`data.load_base(base_name)`)
    and `config` unchanged; or, when the run session names a checkpoint (`rl.session`: a chapter command's `--model`,
    `checkpoint.using`, or `COURSE_MODEL`), that checkpoint warm-started with LoRA on the chapter's demonstrations
    `texts()` in the chat format (`course_lib.rl.checkpoint`), and `config`
    with its sampling in the chat format, its budgets measured on those demonstrations.

    `demonstrated`, `(environment the demonstrations are of, environment the run trains on)`: a chapter forked onto
    another environment (its own base folder) has no demonstrations of that environment to warm a checkpoint on, so
    a checkpoint there is refused with a ValueError naming both."""
    from transformers import AutoConfig

    from course_lib.engine.prompt_format import ChatFormat
    from course_lib.rl import checkpoint

    path = checkpoint.model_path()
    if path is not None and demonstrated is not None and demonstrated[0] != demonstrated[1]:
        raise ValueError(f"--model warm-starts on {demonstrated[0]}'s demonstrations; {demonstrated[1]} has none here")
    if path is None:
        model, tokenizer = data.load_base(base_name, course_config.device())
        return model, tokenizer, config
    lora = not checkpoint.full_finetune()
    # a LoRA adapter at the chapter's rate (3e-3 for a from-scratch model) would overshoot; capped at 1e-3
    sft = dataclasses.replace(config.sft, learning_rate=min(config.sft.learning_rate, 1e-3)) if lora else config.sft
    # a real vocabulary's logits: forwards of a bounded number of logits, with the same gradient (micro_batch)
    vocabulary = AutoConfig.from_pretrained(path, local_files_only=True).vocab_size
    budget = checkpoint.micro_batch_tokens(vocabulary, course_config.device())
    sft = dataclasses.replace(sft, micro_batch_tokens=sft.micro_batch_tokens or budget)
    if hasattr(config, "grpo") and not config.grpo.micro_batch_tokens:
        config = dataclasses.replace(config, grpo=dataclasses.replace(config.grpo, micro_batch_tokens=budget))
    demonstrations = texts()
    role = checkpoint.observation_role()
    # the budgets in this tokenizer's tokens, checked against the model's positions before any warm-start step
    sampling = checkpoint.chat_sampling(config.sampling, checkpoint.load_tokenizer(path), demonstrations[:512], role)
    needed = (
        f"the chapter's episodes of up to {sampling.max_total_tokens} tokens in this tokenizer "
        f"(sampling.max_total_tokens, {config.sampling.max_total_tokens} words, scaled to its tokens per word)"
    )
    checkpoint.check_context(path, sampling.max_total_tokens, needed, path)
    model, tokenizer, history = checkpoint.warm_start(
        path, demonstrations, sft, seed, lora=lora, device=course_config.device(),
        prompt_format=ChatFormat(observation_role=role),
    )  # fmt: skip
    kind = "LoRA" if lora else "full"
    print(f"{path}: {kind} warm start on the chapter's demonstrations, loss {history[0]['loss']:.3f} -> "
          f"{history[-1]['loss']:.3f} over {sft.steps} steps; turns of up to {sampling.max_turn_tokens} tokens, "
          f"episodes of up to {sampling.max_total_tokens}", flush=True)  # fmt: skip
    return model, tokenizer, dataclasses.replace(config, sampling=sampling)


def on_environment(config, own_env: str, own_sampling, make_env: Callable[[], object], chapter: str, say: bool = True):
    """`config` (a chapter's, with `env_name` and `sampling`) with the stop tags of the environment it runs on.

    A chapter's sampling is sized for its own environment: its stop tags end that environment's actions. On its own
    environment `config` comes back as it is. Forked onto another (`env_name`), stop tags other than the chapter's
    own (`own_sampling.stop_tags`) were set for the fork and are kept; the chapter's own are replaced by the
    environment's `TextEnv.stop_tags` (said in a printed line, unless `say` is False), or, when it declares none,
    refused with a ValueError naming what to set: turns would otherwise run to the turn cap, never stopping where the
    environment's actions end. The caps (`max_turn_tokens`, `max_total_tokens`) stay the config's."""
    if config.env_name == own_env:
        return config
    tags = tuple(config.sampling.stop_tags)
    if tags != tuple(own_sampling.stop_tags):
        return config
    env = make_env()
    declared = tuple(getattr(env, "stop_tags", ()))
    if declared == tags:
        return config
    if not declared:
        raise ValueError(
            f"{chapter} on {config.env_name} would stop its turns at {tags}, {own_env}'s: set sampling.stop_tags to "
            f"the strings that end an action of {config.env_name} (--set sampling.stop_tags=..., and review "
            f"sampling.max_turn_tokens={config.sampling.max_turn_tokens} and sampling.max_total_tokens="
            f"{config.sampling.max_total_tokens}, sized for {own_env}), or declare them as "
            f"{type(env).__name__}.stop_tags"
        )
    sampling = dataclasses.replace(config.sampling, stop_tags=declared)
    if say:
        print(f"{chapter} on {config.env_name}: turns stop at {declared}, {config.env_name}'s stop_tags, not "
              f"{own_env}'s {tags}; turns of up to {sampling.max_turn_tokens} tokens and episodes of up to "
              f"{sampling.max_total_tokens} as the chapter's config says (sampling.*)", flush=True)  # fmt: skip
    return dataclasses.replace(config, sampling=sampling)


def held_out_seeds(make_test_env: Callable[[], object], cache: int = 8) -> Callable[[int], list[int]]:
    """A chapter's `test_seeds(count)`: the test split's first `count` seeds with pairwise different problems
    (`envs.base.distinct_seeds` on `make_test_env`), cached, as every evaluation during training asks again."""
    from course_lib.envs.base import distinct_seeds

    @functools.lru_cache(maxsize=cache)
    def test_seeds(count: int) -> list[int]:
        return distinct_seeds(make_test_env, count)

    return test_seeds


def own_environments_only(config, say: bool = False, *, owns: dict[str, str], chapter: str, instead: str):
    """`config`, a chapter's `validate` for a chapter that cannot be forked: `owns` maps each of its settings (an
    attribute of `config` holding an `env_name`) to the environment it runs on. Another environment there is refused
    before anything runs, with a ValueError naming each setting changed and `instead`, what to fork."""
    changed = [f"{name}.env_name={getattr(config, name).env_name!r}" for name, own in owns.items()
               if getattr(config, name).env_name != own]  # fmt: skip
    if changed:
        where = " and ".join(f"{own} ({name})" for name, own in owns.items())
        raise ValueError(
            f"{chapter} runs on {where} only: its experts, identity checks and leakage audit read those "
            f"environments' states, so {', '.join(changed)} cannot apply; {instead}"
        )
    return config

"""Your own checkpoint in place of a chapter's base: any Hugging Face causal LM with a chat template.

`COURSE_MODEL=<folder>` (or a chapter command's `--model <folder>`; `--model smollm2` names the course's real model,
built once by `python -m course_lib.data build smollm2`) makes a chapter load that checkpoint with the
real `from_pretrained` path instead of its committed word-level base, and warm-start it on the chapter's own
demonstrations rendered through the model's chat template (`demonstration_examples`): a LoRA adapter by default,
trained on the policy's turns only, the tool responses and the template's glue masked as RL masks them. RL,
evaluation and claims then run as usual, with the rollouts in the chat format (`chat_sampling`).

The course runs without the hub: the folder must be on disk (`local_files_only`). `course_lib.course.standins` builds a
stand-in (random-init weights, a byte-level BPE tokenizer with a ChatML template) for tests and the appendix.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from torch.optim.optimizer import register_optimizer_step_post_hook
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from course_lib import real_models
from course_lib.engine.prompt_format import ChatFormat, chat_name
from course_lib.engine.rollout import SamplingConfig, pad_id
from course_lib.rl import session
from course_lib.rl.warm_start import TOOL_RESPONSE, SFTConfig, Turns, _turns, completion_text, supervised_warm_start
from course_lib.tokenizer import encode

LOGITS_PER_FORWARD = 512 * 49_152
"""The most logits (tokens x vocabulary) one forward of a checkpoint's warm start or update holds: 512 tokens of
SmolLM2's vocabulary, where one LoRA update on 32 x 110 tokens peaks at 2.92 GB against 11.18 GB for the whole batch
(`python -m course_lib.lab.bench update`). A small vocabulary (a stand-in's 600 tokens) gets a budget that holds
any of the course's batches, so it runs in one pass as before."""


GPU_LOGITS_FACTOR = 16
"""On a GPU a forward holds `GPU_LOGITS_FACTOR` times `LOGITS_PER_FORWARD` (8,192 tokens of SmolLM2's vocabulary,
about 6.4 GB of logits and their log-softmax): a GPU's memory is tens of GB, and a 135M model there is bound by the
count of sequential forwards, so the CPU's budget (15 micro-batches per warm-start step of the gpu preset) would
cost minutes for nothing. Not yet measured on a GPU."""


def micro_batch_tokens(vocabulary: int, device: str = "cpu") -> int:
    """The padded-token budget of a checkpoint's forwards (`SFTConfig`/`GRPOConfig.micro_batch_tokens`) for a model
    with `vocabulary` output logits per token: `LOGITS_PER_FORWARD // vocabulary` on a CPU, `GPU_LOGITS_FACTOR` times
    that on a CUDA `device`; at least 1."""
    logits = LOGITS_PER_FORWARD * (GPU_LOGITS_FACTOR if str(device).startswith("cuda") else 1)
    return max(1, logits // max(1, vocabulary))


def model_path() -> Path | None:
    """The checkpoint folder the run session names (`session.current().model`: a command's `--model`, or
    `COURSE_MODEL`), or None (the chapter's own base). A real model's name (`smollm2`, `course_lib.real_models`)
    resolves to its cached, hash-checked folder."""
    value = session.current().model
    if not value:
        return None
    if value in real_models.MODELS:
        return real_models.path(value)
    path = Path(value).expanduser()
    if not (path / "config.json").exists():
        raise FileNotFoundError(
            f"{session.MODEL_VARIABLE}={value}: no config.json there. The course reads checkpoints from disk only; "
            "save one with `model.save_pretrained(folder)` and `tokenizer.save_pretrained(folder)`"
        )
    return path


def full_finetune() -> bool:
    """Whether the session warm-starts every weight, not a LoRA adapter (`--full-finetune`). A random-init stand-in
    needs it (its frozen random embeddings leave an adapter little to work with); a pretrained checkpoint does not."""
    return session.current().full_finetune


def observation_role() -> str:
    """The chat role the environment's observations take in the checkpoint's template (`--observation-role`): `tool`
    by default; `user` for a template without a tool role."""
    return session.current().observation_role


def add_observation_role_argument(parser) -> None:
    """`--observation-role ROLE` on a command that takes `--model` (a chapter's and TRL's): `observation_role`."""
    parser.add_argument(
        "--observation-role", metavar="ROLE",
        help="with --model: the chat role the environment's observations take (default tool; user for a chat "
        "template without a tool role)",
    )  # fmt: skip


@contextlib.contextmanager
def using(path: str | Path, full_finetune: bool = False, observation_role: str = "tool") -> Iterator[Path]:
    """Run chapters on the checkpoint at `path` inside the block, as `--model path` (and `--full-finetune`,
    `--observation-role`) do on the command line: `with checkpoint.using(folder): results = ch00.run(0)` (a run
    session, `session.using`)."""
    with session.using(model=str(path), full_finetune=full_finetune, observation_role=observation_role):
        yield model_path()


def load_tokenizer(path: str | Path):
    """The tokenizer of the checkpoint at `path`, from disk, its pad token EOS when it has none. A tokenizer without a
    chat template cannot render the chapter's turns: that is an error, with what to do."""
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"{path}: the tokenizer has no chat template; set `tokenizer.chat_template` and save it")
    if tokenizer.pad_token_id is None and tokenizer.eos_token_id is not None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


POSITION_FIELDS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length", "seq_length")
"""Where a `transformers` config names its position table's size (Llama, Qwen: the first; GPT-2: `n_positions`)."""


def context_length(model_or_path) -> int | None:
    """How many positions the model (or the checkpoint at a path) has: its config's `max_position_embeddings`
    (`POSITION_FIELDS`), or None when its config names none."""
    if isinstance(model_or_path, (str, Path)):
        config = AutoConfig.from_pretrained(model_or_path, local_files_only=True)
    else:
        config = getattr(model_or_path, "config", None)
    for name in POSITION_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def check_context(model_or_path, tokens: int, needed: str, where: str | Path) -> None:
    """Refuse (ValueError, both numbers named) a model with fewer positions than `tokens`, what a run's longest
    sequence may take (`needed` says what it is): past its table a learned position embedding raises an IndexError
    deep inside the model (GPT-2) and a rotary one runs on, untrained, without a word (Llama)."""
    limit = context_length(model_or_path)
    if limit is not None and tokens > limit:
        raise ValueError(
            f"{where} has {limit} positions (its config's max_position_embeddings), fewer than {needed}, which a "
            "sequence would run past; use a checkpoint with more positions, or a smaller episode budget (a chapter's "
            "--set sampling.max_total_tokens=..., counted in the course's words)"
        )


def load_checkpoint(path: str | Path, device: torch.device | str = "cpu"):
    """`(model, tokenizer)` of a saved causal LM, from disk (`local_files_only`): `load_tokenizer`'s tokenizer."""
    tokenizer = load_tokenizer(path)
    # Full fine-tuning trains every weight and Adam's states in the checkpoint's dtype: float32, not a bfloat16
    # checkpoint's own (LoRA keeps the base as saved; peft holds the adapter in float32).
    dtype = torch.float32 if full_finetune() else "auto"
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype).to(device)
    model.eval()
    return model, tokenizer


def split_turns(completion: str | Turns) -> list[tuple[str, str]]:
    """A demonstration's completion as `(action, observation)` turns. Turns (`warm_start.Turns`: the environment's own,
    `env.demonstration()`) are returned as they are; a text (actions and `<tool_response>` observations
    joined by spaces, as the tool chapters write them) is cut at its tool responses, the only observations a text can
    show, and the last turn's observation is empty."""
    if not isinstance(completion, str):
        return _turns(completion)
    turns, start = [], 0
    for match in TOOL_RESPONSE.finditer(completion):
        turns.append((completion[start : match.start()].strip(), match.group(0)))
        start = match.end()
    tail = completion[start:].strip()
    if tail or not turns:
        turns.append((tail, ""))
    return turns


def demonstration_examples(
    tokenizer, texts: Sequence[tuple[str, str | Turns]], prompt_format: ChatFormat | None = None
) -> list[tuple[list[int], list[int]]]:
    """`(ids, loss mask)` of each `(prompt, completion)` demonstration, built as the rollout engine builds an
    episode in the chat format: the format's prompt ids, then per turn (`split_turns`: the completion's own turns,
    or a text's tool responses) the action's ids (mask 1) and the format's ids of the observation (mask 0: the
    assistant turn's close, the observation's turn and the next opening)."""
    prompt_format = prompt_format or ChatFormat()
    examples = []
    for prompt, completion in texts:
        ids = prompt_format.prompt_ids(tokenizer, prompt)
        mask = [0] * len(ids)
        for action, observation in split_turns(completion):
            action_ids = encode(tokenizer, action)
            ids += action_ids
            mask += [1] * len(action_ids)
            if observation:
                glue = prompt_format.observation_ids(tokenizer, observation, action_ids[-1] if action_ids else None)
                ids += glue
                mask += [0] * len(glue)
        examples.append((ids, mask))
    return examples


def add_adapter(model: torch.nn.Module, rank: int = 16, alpha: int = 32, top_layers: int = 0) -> torch.nn.Module:
    """A LoRA adapter on every linear layer but the output head (peft's `all-linear`, which works for any family's
    module names), or with `top_layers` > 0 on the linear layers of the last `top_layers` decoder blocks only (the
    backward then stops at the lowest adapted block: 2x faster updates on SmolLM2 with the top 8 of 30); the base is
    frozen and, with the adapter disabled, is the reference policy."""
    targets: str | list[str] = "all-linear"
    if top_layers:
        blocks = [int(match.group(1)) for name, _ in model.named_modules() if (match := BLOCK.search(name))]
        if not blocks or top_layers > max(blocks) + 1:
            raise ValueError(f"top_layers={top_layers}, but the model has {max(blocks, default=-1) + 1} decoder blocks")
        first = max(blocks) + 1 - top_layers
        targets = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)
                   and (match := BLOCK.search(name)) and int(match.group(1)) >= first]  # fmt: skip
    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=targets, task_type="CAUSAL_LM")
    with warnings.catch_warnings():
        # peft calls a transformers 5.x API that is deprecated; the warning is not about this model.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, config)


BLOCK = re.compile(r"\.layers\.(\d+)\.")
"""A decoder block's index in a module's name (`model.layers.7.self_attn.q_proj`: 7), as transformers names them."""


def warm_start(
    path: str | Path,
    texts: Sequence[tuple[str, str | Turns]],
    sft: SFTConfig,
    seed: int,
    lora: bool = True,
    device: torch.device | str = "cpu",
    prompt_format: ChatFormat | None = None,
    lora_top_layers: int = 0,
):
    """`(model, tokenizer, history)`: the checkpoint at `path`, with a LoRA adapter (on the last `lora_top_layers`
    blocks only when positive: `add_adapter`) or fully (`lora=False`) fitted on
    the chapter's demonstrations `texts` in the chat format (`prompt_format`, `ChatFormat()` by default). Seeded, so a
    rerun gives the same adapter."""
    from course_lib import course_config

    generator = course_config.seed_everything(seed)
    model, tokenizer = load_checkpoint(path, device)
    if lora:
        model = add_adapter(model, top_layers=lora_top_layers)
    examples = demonstration_examples(tokenizer, texts, prompt_format)
    longest = max((len(ids) for ids, _ in examples), default=0)
    check_context(model, longest, f"the longest demonstration, {longest} tokens in its chat format", path)
    # A chapter command's run (its observers print RL's progress) says what the warm start does: minutes, on a real
    # model, before RL's first line.
    say = bool(session.current().observers)
    if say:
        blocks = f"the top {lora_top_layers}" if lora_top_layers else "all"
        adapter = f"LoRA on {blocks} blocks" if lora else "every weight"
        print(f"  warm start: {sft.steps} steps of {sft.batch_size} of {len(examples)} demonstrations ({adapter})",
              flush=True)  # fmt: skip
    started = time.perf_counter()
    with _progress_lines(sft.steps, started) if say else contextlib.nullcontext():
        history = supervised_warm_start(model, examples, pad_id(tokenizer), sft, generator)
    if say:
        print(f"  warm start done in {(time.perf_counter() - started) / 60:.1f} min: loss {history[0]['loss']:.3f} -> "
              f"{history[-1]['loss']:.3f}", flush=True)  # fmt: skip
    return model, tokenizer, history


@contextlib.contextmanager
def _progress_lines(steps: int, started: float, parts: int = 4):
    """Print a line at each quarter of a warm start's `steps` optimizer steps (done, minutes so far, minutes left).
    Counted by a global optimizer hook rather than inside `supervised_warm_start`, whose source is part of a kept
    adapter's key (`rl.adapter_cache.TRAINING_SOURCES`): the lines must not change which adapters are kept."""
    marks = {max(1, round(steps * part / parts)) for part in range(1, parts)}
    done = 0

    def count(optimizer, args, kwargs) -> None:
        nonlocal done
        done += 1
        if done in marks:
            spent = (time.perf_counter() - started) / 60
            print(f"  warm start: step {done} of {steps}, {spent:.1f} min, about {spent * (steps - done) / done:.1f} "
                  "min left", flush=True)  # fmt: skip

    handle = register_optimizer_step_post_hook(count)
    try:
        yield
    finally:
        handle.remove()


def chat_sampling(
    sampling: SamplingConfig, tokenizer, texts: Sequence[tuple[str, str | Turns]], observation_role: str = "tool"
) -> SamplingConfig:
    """The chapter's sampling in the chat format (observations in `observation_role`'s turns:
    `prompt_format.chat_name`), its token budgets scaled to this tokenizer.

    The chapter's budgets count the course's word-level tokens, one per whitespace-separated word (plus BOS). A BPE
    tokenizer spends several tokens per word and the template adds its glue, so each budget is multiplied by the
    most tokens per word measured on the chapter's demonstrations `texts`: for a turn, on the actions alone; for a
    sequence, on whole demonstrations rendered as the engine renders them (`demonstration_examples`). Step-mode
    prompts that carry a history window grow in words, and the budget grows with them."""
    examples = demonstration_examples(tokenizer, texts, ChatFormat(observation_role=observation_role))
    words = [len(prompt.split()) + len(completion_text(completion).split()) + 1 for prompt, completion in texts]
    per_word = max(len(ids) / count for (ids, _), count in zip(examples, words, strict=True))
    actions = [action for _, completion in texts for action, _ in split_turns(completion) if action.strip()]
    per_action_word = max((len(encode(tokenizer, a)) / len(a.split()) for a in actions), default=per_word)
    return dataclasses.replace(
        sampling,
        prompt_format=chat_name(observation_role),
        max_turn_tokens=math.ceil(sampling.max_turn_tokens * max(per_action_word, 1.0)),
        max_total_tokens=math.ceil(sampling.max_total_tokens * max(per_word, 1.0)),
    )


def measured_sampling(
    sampling: SamplingConfig, tokenizer, texts: Sequence[str], observation_role: str = "tool"
) -> SamplingConfig:
    """`chat_sampling` for a task with no demonstrations at hand (TRL's `--env`): the task's prompts `texts` as
    demonstrations with empty completions, and half again as margin on the turn budget (actions were not seen)."""
    scaled = chat_sampling(sampling, tokenizer, [(text, "") for text in texts], observation_role)
    return dataclasses.replace(scaled, max_turn_tokens=math.ceil(1.5 * scaled.max_turn_tokens))

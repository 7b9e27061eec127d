"""Local stand-ins for a real checkpoint: a byte-level BPE tokenizer with a ChatML template and random-init
models of several `transformers` families, built without the hub (issue 30, the "Bring your own model" appendix).

A user who forks a chapter will point it at a small instruction model (a Qwen, Llama or SmolLM checkpoint). What
such a checkpoint changes for the course is its tokenizer, not its weights: byte-level BPE instead of one token
per word, a chat template, special tokens that end turns. So the stand-in copies those properties and nothing
else:

- `train_bpe_tokenizer`: byte-level BPE trained with `tokenizers` on the environments' own text
  (`environment_texts`), Qwen2's pre-tokenizer regex (digits one by one) or Llama 3's (digits in threes) or
  GPT-2's, no BOS by default (Qwen2) or one (Llama), `<|im_end|>` as EOS (an instruct model's: EOS ends a turn),
  `<|endoftext|>` as pad, and a ChatML `chat_template`. The course's tags (`<tool_call>`, `</answer>`, ...) are
  NOT special tokens: they are ordinary text split into several pieces, which is what breaks single-token stops.
- `build_standin`: a random-init `AutoModelForCausalLM` of a family (`FAMILIES`) sized about 100k parameters,
  saved with `save_pretrained` with its tokenizer, so `from_pretrained(folder)` is the path a user takes.

The multi-turn pitfalls such a tokenizer exposes, each measured here on the environments' real episodes
(`environment_episodes`: the demonstrators of chapters 00, 07 and 08 played in their environments):

1. Retokenization drift (`retokenization_drift`): a trainer that re-encodes the whole transcript does not always
   get the ids the turns had when each was encoded (or generated) on its own, because BPE merges and the
   pre-tokenizer's regex cross turn boundaries. Whether they do depends on what joins the turns: nothing (the
   observation's ids appended right after the policy's), a newline, a space, or a chat template whose special
   tokens isolate every turn (then the drift is zero by construction).
2. Resegmentation (`resegmentation_drift`): a sampled turn's ids need not be the tokenizer's own segmentation of
   their text (`<`, `answer` instead of `<answer`); decoding and re-encoding silently changes the sequence whose
   log-probabilities the trainer then computes.
3. Multi-token stops that end mid-token (`stop_overshoot`): when a piece such as `>\\n` straddles the end of
   `</tool_call>`, a turn cut at the stop string ends inside a token.
4. Tags as text (`pieces`): `</tool_call>` is several tokens (`<`, `/`, `tool`, `_call`, `>`), so a stop cannot be
   one token id, and a cut at `max_turn_tokens` can split a tag across two turns.
5. Templates that re-render earlier turns (`template_breaks`, `chat_template(strip_reasoning=True)`): Qwen3's
   drops an earlier assistant turn's `<think>` once another message follows, so rendering the finished
   conversation is not the sequence the policy was sampled on.

Measured (`default_tokenizer()`: Qwen2 regex, 600 tokens, trained on 300 of `environment_texts` with seed 0;
held-out `environment_episodes(32, seed=1)` per chapter; turns encoded one by one vs the transcript at once):

    joined by      ch00 episodes / boundaries   ch07               ch08
    nothing        32/32  54/54                 0/32  0/1106       32/32  160/160
    newline        32/32  54/54                 32/32 553/1106     32/32  160/160
    space          0/32   0/54                  0/32  0/1106       0/32   0/160
    ChatML         0/32   0/54                  0/32  0/1106       0/32   0/160

With newlines every boundary after a turn that ends in a tag drifts (`>` and `\\n` become one piece `>\\n`), and
the stops end inside that piece: 11 of 43 stops in ch00 (its tool calls), 553 of 553 in ch07, 64 of 96 in ch08;
none with a space. Joined by nothing, `><` is one pre-token, so `<tool` loses its merge (ch00: 1,044 ids per
turn, 1,098 at once). Canonical turns survive decode -> encode (692 of 692); 8-token turns sampled (temperature
1, generator seed 0) from a random-init qwen2 stand-in on ch00's ChatML prompts do not in 28 of 32, and 27 of 32
are not even valid UTF-8. With a reasoning-stripping template and a `<think>` in each assistant turn, 11 of 32
ch00 episodes (those with a tool call), 32 of 32 ch07 and ch08 episodes render non-incrementally; plain ChatML:
none.

Shapes: ids are Python lists of ints (`[T]`); logits of the saved models are `[B, T, V]` with `V` the
tokenizer's size.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoModelForCausalLM, PretrainedConfig, PreTrainedModel, PreTrainedTokenizerFast

from course_lib.envs.base import Dialogue
from course_lib.tasks import demonstrators
from course_lib.tokenizer import pieces  # noqa: F401  (re-exported: the pitfalls' `pieces`)

PAD, IM_START, IM_END, BOS = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>"
ROLES = ("system", "user", "assistant", "tool")

SPLIT_PATTERNS: dict[str, str | None] = {
    # Qwen2's pre-tokenizer: letters with one leading non-letter, digits ONE at a time, punctuation runs.
    "qwen2": (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
        r"|\s+(?!\S)|\s+"
    ),
    # Llama 3's: the same shape with digits in groups of up to three.
    "llama3": (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
        r"|\s+(?!\S)|\s+"
    ),
    # GPT-2's, built into the ByteLevel pre-tokenizer (a space attaches to the following word or number).
    "gpt2": None,
}
"""Pre-tokenizer regexes by name (`train_bpe_tokenizer(split=...)`)."""


def _chatml(per_message: str = "", content: str = "message['content']") -> str:
    """ChatML's Jinja source; `per_message` runs first in the loop and may set the `content` expression."""
    return (
        "{%- if add_bos and bos_token %}{{- bos_token }}{%- endif %}"
        "{%- for message in messages %}"
        "{%- if message['role'] not in " + str(list(ROLES)) + " %}"
        "{{- raise_exception('ChatML roles are system, user, assistant and tool, not ' + message['role']) }}"
        "{%- endif %}"
        + per_message
        + "{{- '<|im_start|>' + message['role'] + '\\n' + "
        + content
        + " + '<|im_end|>\\n' }}"
        "{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )


CHATML_TEMPLATE = _chatml()
"""ChatML as Qwen writes it: `<|im_start|>role\\n...<|im_end|>\\n` per message, `<|im_start|>assistant\\n` as the
generation prompt; any other role raises. `add_bos` is set per tokenizer (Llama's templates start with BOS)."""

STRIP_REASONING = (
    "{%- set content = message['content'] %}"
    "{%- if message['role'] == 'assistant' and not loop.last and '</think>' in content %}"
    "{%- set content = content.split('</think>')[-1].lstrip() %}"
    "{%- endif %}"
)
"""Qwen3's habit, reduced to its effect: an assistant turn's `<think>...</think>` is dropped once another message
follows it, so re-rendering a conversation changes the earlier turns the policy was sampled on."""


def chat_template(bos: bool, strip_reasoning: bool = False) -> str:
    """`CHATML_TEMPLATE` with its BOS switch set: the template, not the encoder, adds BOS to a rendered chat
    (`apply_chat_template` encodes without special tokens), as Llama 3's does. With `strip_reasoning`, earlier
    assistant turns lose their reasoning (`STRIP_REASONING`), the pitfall `template_breaks` counts."""
    template = _chatml(STRIP_REASONING, "content") if strip_reasoning else CHATML_TEMPLATE
    return ("{%- set add_bos = true %}" if bos else "{%- set add_bos = false %}") + template


# Text of the environments ---------------------------------------------------------------------------------------
def environment_episodes(count: int, seed: int = 0, tasks: Sequence[str] | None = None) -> list[Dialogue]:
    """`count` episodes per task of `tasks` (keys of `course_lib.tasks.demonstrators()`, default all: chapters 00, 07
    and 08's), task after task, played by the tasks' own demonstrators in their training environments (deterministic
    for `seed`)."""
    sources = demonstrators()
    return [episode for task in tasks or sources for episode in sources[task](count, seed)]


def transcript(episode: Dialogue, separator: str = " ") -> str:
    """The episode as one text, its turns joined by `separator` (the course's word-level transcripts use a
    space)."""
    return separator.join(content for _, content in episode)


RENDERINGS = ("space", "newline", "chatml")
"""How `environment_texts` writes an episode: turns joined by a space (the course's transcripts), by a newline
(the usual tool-loop transcript, `</tool_call>\\n<tool_response>`), or as the text a ChatML rendering holds between
its special tokens (`role\\ncontent` per message, a newline between messages)."""


def render_text(episode: Dialogue, rendering: str) -> str:
    """`episode` as training text in `rendering` (one of `RENDERINGS`)."""
    if rendering == "space":
        return transcript(episode, " ")
    if rendering == "newline":
        return transcript(episode, "\n")
    if rendering == "chatml":
        return "\n".join(f"{role}\n{content}" for role, content in episode)
    raise KeyError(f"unknown rendering {rendering!r}; choose from {RENDERINGS}")


@functools.lru_cache(maxsize=8)
def _texts(count: int, seed: int) -> tuple[str, ...]:
    sources = demonstrators()
    per_task = -(-count // len(sources))
    by_task = [environment_episodes(per_task, seed, (task,)) for task in sources]
    # Round-robin over tasks, so that any prefix of the list holds every environment's text; each task's episodes
    # cycle through the renderings.
    return tuple(
        render_text(episodes[i], RENDERINGS[i % len(RENDERINGS)]) for i in range(per_task) for episodes in by_task
    )[:count]


def environment_texts(count: int, seed: int = 0) -> list[str]:
    """`count` texts to train a tokenizer on: whole episodes (prompts, actions, observations) of chapters 00, 07
    and 08, taken in turn, each written in one of `RENDERINGS` in turn, so the tokenizer learns the merges real
    ones have across turn boundaries (`>\\n`). Deterministic for `seed`; cached."""
    return list(_texts(count, seed))


# Tokenizer ------------------------------------------------------------------------------------------------------
def train_bpe_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 600,
    bos: bool = False,
    split: str = "qwen2",
    min_frequency: int = 2,
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on `texts`, with Qwen2's conventions unless told otherwise.

    `vocab_size` counts the 256 bytes, the merges and the special tokens (`<|endoftext|>` pad, `<|im_start|>`,
    `<|im_end|>` EOS, and `<|begin_of_text|>` when `bos`). With `bos` the encoder prepends BOS to every text and
    the chat template starts with it, as Llama 3 does; without it nothing is prepended, as Qwen2 does. `split`
    names the pre-tokenizer's regex (`SPLIT_PATTERNS`). The course's tags stay ordinary text, several pieces each.
    Deterministic: the same texts give the same vocabulary and merges.
    """
    if split not in SPLIT_PATTERNS:
        raise KeyError(f"unknown pre-tokenizer split {split!r}; choose from {sorted(SPLIT_PATTERNS)}")
    specials = [PAD, IM_START, IM_END] + ([BOS] if bos else [])
    core = Tokenizer(models.BPE())
    core.normalizer = normalizers.NFC()
    pattern = SPLIT_PATTERNS[split]
    if pattern is None:
        core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        core.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    core.decoder = decoders.ByteLevel()
    # Offsets stay on the original characters (no trimming of the spaces a piece carries): masks built from the
    # offset mapping then cover exactly the characters of each turn.
    core.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(list(texts), trainer=trainer)
    return _wrapped(core, bos)


def _wrapped(core: Tokenizer, bos: bool) -> PreTrainedTokenizerFast:
    """`core` as a transformers tokenizer with the stand-ins' special tokens and ChatML template (BOS as Llama's
    when `bos`)."""
    extra = {"bos_token": BOS, "add_bos_token": True} if bos else {}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=IM_END,
        pad_token=PAD,
        additional_special_tokens=[IM_START],
        clean_up_tokenization_spaces=False,
        **extra,
    )
    tokenizer.chat_template = chat_template(bos)
    return tokenizer


# Models ---------------------------------------------------------------------------------------------------------
FAMILIES = {
    "qwen2": ("Qwen2Config", True, False),
    "qwen3": ("Qwen3Config", True, False),
    "llama": ("LlamaConfig", True, True),
    "mistral": ("MistralConfig", False, True),
    "gpt2": ("GPT2Config", True, False),
    "phi3": ("Phi3Config", False, False),
    "olmo2": ("Olmo2Config", False, False),
}
"""Family -> (config class, tied embeddings, BOS by default). Tying follows the family's small checkpoints
(Qwen2.5-0.5B, Qwen3-0.6B, Llama-3.2-1B and SmolLM2 tie; Mistral-7B, Phi-3-mini and OLMo-2 do not; GPT-2 always
does); BOS follows their tokenizers (Llama's and Mistral's prepend one, Qwen's and GPT-2's chat use none).
`KVDecoder` supports llama, qwen2 and mistral; qwen3, gpt2, phi3 and olmo2 are the families it does not."""


def standin_config(
    family: str, tokenizer: PreTrainedTokenizerFast, hidden: int = 64, layers: int = 2, max_positions: int = 256
) -> PretrainedConfig:
    """The family's `transformers` config at stand-in size: `hidden` wide, `layers` deep, 4 heads of
    `hidden // 4` (2 key-value heads where the family groups them), an MLP twice as wide, vocabulary
    `len(tokenizer)`, the tokenizer's BOS/EOS/pad ids."""
    import transformers

    if family not in FAMILIES:
        raise KeyError(f"unknown family {family!r}; choose from {sorted(FAMILIES)}")
    class_name, tied, _ = FAMILIES[family]
    if hidden % 4:
        raise ValueError(f"hidden must be a multiple of 4 heads, got {hidden}")
    ids = dict(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=tied,
    )
    if family == "gpt2":
        sizes = dict(n_embd=hidden, n_layer=layers, n_head=4, n_inner=2 * hidden, n_positions=max_positions)
    else:
        sizes = dict(
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=hidden // 4,
            intermediate_size=2 * hidden,
            max_position_embeddings=max_positions,
        )
        if family == "mistral":
            sizes["sliding_window"] = None
    return getattr(transformers, class_name)(**sizes, **ids)


TOKENIZER_TEXTS = 300
"""How many `environment_texts` (seed 0) `default_tokenizer` is trained on."""


@functools.lru_cache(maxsize=4)
def _default_tokenizer_json(bos: bool) -> str:
    return train_bpe_tokenizer(environment_texts(TOKENIZER_TEXTS), bos=bos).backend_tokenizer.to_str()


def default_tokenizer(bos: bool = False) -> PreTrainedTokenizerFast:
    """The stand-ins' tokenizer when none is given: 600 tokens trained on `TOKENIZER_TEXTS` of `environment_texts`
    (a fresh object each call, trained once per process)."""
    return _wrapped(Tokenizer.from_str(_default_tokenizer_json(bos)), bos)


def build_standin_model(
    family: str,
    tokenizer: PreTrainedTokenizerFast,
    hidden: int = 64,
    layers: int = 2,
    seed: int = 0,
    max_positions: int = 256,
) -> PreTrainedModel:
    """A random-init model of `family` (`standin_config`), initialised under `seed` without touching the global
    random state, in eval mode."""
    config = standin_config(family, tokenizer, hidden, layers, max_positions)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model.eval()


def build_standin(
    out_dir: str | Path,
    family: str = "qwen2",
    tokenizer: PreTrainedTokenizerFast | None = None,
    hidden: int = 64,
    layers: int = 2,
    seed: int = 0,
    max_positions: int = 256,
) -> Path:
    """Build a stand-in checkpoint of `family` and save it (model and tokenizer, `save_pretrained`) in `out_dir`:
    `AutoModelForCausalLM.from_pretrained(out_dir)` and `AutoTokenizer.from_pretrained(out_dir)` load it. Without a
    tokenizer, `default_tokenizer` with the family's BOS convention. The same arguments write the same files."""
    tokenizer = tokenizer if tokenizer is not None else default_tokenizer(bos=FAMILIES[family][2])
    out = Path(out_dir)
    model = build_standin_model(family, tokenizer, hidden, layers, seed, max_positions)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


# Multi-turn pitfalls, measured ----------------------------------------------------------------------------------
def _encode(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    return tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids


def turn_texts(tokenizer: PreTrainedTokenizerFast, episode: Dialogue, separator: str | None = " ") -> list[str]:
    """The text each turn contributes to the transcript, so that their concatenation is the transcript.

    With a `separator`: turn 0's content, then `separator + content` for every later turn (the separator goes with
    the turn it precedes, where a byte-level tokenizer's `Ġ` goes). With `separator=None`: what the chat template
    adds for each message, `render(messages[:k + 1])` minus `render(messages[:k])` (BOS, if any, with the first).
    A template that re-renders earlier turns differently once later ones follow (one that strips an earlier
    turn's reasoning) has no such pieces: ValueError naming the turn.
    """
    if separator is not None:
        return [content if i == 0 else separator + content for i, (_, content) in enumerate(episode)]
    messages = [{"role": role, "content": content} for role, content in episode]
    texts, before = [], ""
    for k in range(1, len(messages) + 1):
        rendered = tokenizer.apply_chat_template(messages[:k], tokenize=False)
        if not rendered.startswith(before):
            raise ValueError(f"the chat template renders turns 0..{k - 2} differently once turn {k - 1} follows")
        texts.append(rendered[len(before) :])
        before = rendered
    return texts


def retokenization_drift(
    tokenizer: PreTrainedTokenizerFast, episodes: Sequence[Dialogue], separator: str | None = " "
) -> dict[str, int]:
    """How often re-encoding the whole transcript gives other ids than encoding each turn on its own.

    The engine appends each turn's ids as they were made (the policy's sampled, the observation's encoded once);
    a trainer that re-tokenizes encodes the transcript at once. Same text (`turn_texts`), ids compared. Returns
    counts: `episodes`, `drifted_episodes` (whole differs from concatenated turns), `boundaries` (adjacent turn
    pairs), `drifted_boundaries` (the pair encoded together differs from the two encoded apart),
    `tokens_per_turn`, `tokens_whole`.
    """
    counts = dict.fromkeys(
        ("episodes", "drifted_episodes", "boundaries", "drifted_boundaries", "tokens_per_turn", "tokens_whole"), 0
    )
    for episode in episodes:
        texts = turn_texts(tokenizer, episode, separator)
        encoded = [_encode(tokenizer, text) for text in texts]
        per_turn = [i for ids in encoded for i in ids]
        whole = _encode(tokenizer, "".join(texts))
        counts["episodes"] += 1
        counts["drifted_episodes"] += per_turn != whole
        counts["tokens_per_turn"] += len(per_turn)
        counts["tokens_whole"] += len(whole)
        for left in range(len(texts) - 1):
            counts["boundaries"] += 1
            pair = _encode(tokenizer, texts[left] + texts[left + 1])
            counts["drifted_boundaries"] += pair != encoded[left] + encoded[left + 1]
    return counts


def template_breaks(tokenizer: PreTrainedTokenizerFast, episodes: Sequence[Dialogue]) -> dict[str, int]:
    """How many episodes the chat template renders non-incrementally: rendering the first k + 1 messages does not
    extend the rendering of the first k (`turn_texts` raises). A trainer that renders the finished conversation
    then scores other earlier turns than the ones the policy saw and wrote. Returns `episodes` and `broken`."""
    broken = 0
    for episode in episodes:
        try:
            turn_texts(tokenizer, episode, None)
        except ValueError:
            broken += 1
    return {"episodes": len(episodes), "broken": broken}


def resegmentation_drift(tokenizer: PreTrainedTokenizerFast, sequences: Iterable[Sequence[int]]) -> dict[str, int]:
    """How many id sequences (sampled turns, `[T]` each) do not survive decode -> encode: `sequences`, `changed`
    (re-encoding their text gives other ids: the trainer would score a sequence the policy never sampled),
    `lossy` (the decoded text holds U+FFFD: the ids are not valid UTF-8, so the text is not even what the model
    wrote), `tokens`."""
    counts = dict.fromkeys(("sequences", "changed", "lossy", "tokens"), 0)
    for ids in sequences:
        ids = list(ids)
        text = tokenizer.decode(ids)
        counts["sequences"] += 1
        counts["tokens"] += len(ids)
        counts["changed"] += _encode(tokenizer, text) != ids
        counts["lossy"] += "\ufffd" in text
    return counts


def stop_overshoot(
    tokenizer: PreTrainedTokenizerFast,
    episodes: Sequence[Dialogue],
    stops: Sequence[str] = ("</tool_call>", "</answer>", "</action>"),
    separator: str = " ",
) -> dict[str, int]:
    """Where a multi-token stop string ends inside a token. In each transcript (turns joined by `separator`),
    every occurrence of a stop in an assistant turn is looked up in the encoding of the whole text (character
    offsets); `overshoot` counts those whose last character lies in a token that goes on past the stop string, so
    a turn cut at the stop would have to end inside a token. Returns `stops` (occurrences) and `overshoot`."""
    counts = {"stops": 0, "overshoot": 0}
    for episode in episodes:
        texts = turn_texts(tokenizer, episode, separator)
        encoding = tokenizer.backend_tokenizer.encode("".join(texts), add_special_tokens=False)
        start = 0
        for (role, _), text in zip(episode, texts):
            if role == "assistant":
                for stop in stops:
                    at = text.find(stop)
                    while at >= 0:
                        end = start + at + len(stop)  # one past the stop's last character
                        token_end = next(e for s, e in encoding.offsets if s < end <= e)
                        counts["stops"] += 1
                        counts["overshoot"] += token_end > end
                        at = text.find(stop, at + 1)
            start += len(text)
    return counts


def with_reasoning(episodes: Sequence[Dialogue]) -> list[Dialogue]:
    """The episodes with a short `<think> ... </think>` before every assistant turn, as a reasoning model writes."""
    return [
        [(role, f"<think> plan </think> {content}" if role == "assistant" else content) for role, content in episode]
        for episode in episodes
    ]

"""Word-level tokenizers wrapped as `transformers.PreTrainedTokenizerFast` (all chapters).

A tiny model cannot reliably copy long digit strings one character at a time: in a feasibility run a
2-layer, 128-wide model with one token per digit, after 1,200 supervised steps, still could not copy
the operands into a calculator call, and GRPO then raised tool use to 100% with accuracy near 0%. So
every task family gets a word-level vocabulary: one token per entity, number or symbol. Text is
canonical when its tokens are separated by single spaces; canonical text round-trips exactly
through `encode` and `decode`, which is what lets the rollout engine append observations as token
ids and still reproduce the text the environment produced.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit
from transformers import PreTrainedTokenizerFast

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
TAGS = (
    "<question>", "</question>",
    "<think>", "</think>",
    "<tool_call>", "</tool_call>",
    "<tool_response>", "</tool_response>",
    "<answer>", "</answer>",
    "<response>", "</response>",
    "<feedback>", "</feedback>",
)  # fmt: skip
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS, *TAGS)


def build_tokenizer(words: Iterable[str]) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over the special tokens followed by `words` (deduplicated, in order).

    Unknown words map to `<unk>`. Tags such as `<tool_call>` are single tokens, so a stop "string"
    is one token id.
    """
    vocab: dict[str, int] = {}
    for token in (*SPECIAL_TOKENS, *words):
        if not token or any(ch.isspace() for ch in token):
            raise ValueError(f"vocabulary words must be non-empty and contain no spaces: {token!r}")
        vocab.setdefault(token, len(vocab))
    core = Tokenizer(WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        additional_special_tokens=list(TAGS),
        clean_up_tokenization_spaces=False,
    )
    tokenizer.padding_side = "right"
    return tokenizer


def canonical(text: str) -> str:
    """The canonical form of `text`: tokens separated by single spaces."""
    return " ".join(text.split())


def is_word_level(tokenizer: PreTrainedTokenizerFast) -> bool:
    """True for the course's own tokenizers (`build_tokenizer`): one token per whitespace-separated word, tags single
    tokens. Any other (a checkpoint's byte-level BPE, SentencePiece) splits text into pieces a word never maps to."""
    return isinstance(tokenizer.backend_tokenizer.model, WordLevel)


_warned_unknown: set[str] = set()


def encode(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    """Token ids of `text`, without adding BOS/EOS.

    Calls the Rust tokenizer directly: the rollout engine encodes every observation, and the
    Python wrapper's bookkeeping would cost more than the encoding itself. A word that a word-level tokenizer maps
    to `<unk>` warns once (per word): the model would otherwise read a word it cannot see without anyone knowing.
    """
    ids = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
    unknown = tokenizer.unk_token_id
    if unknown is not None and unknown in ids and is_word_level(tokenizer):
        _warn_unknown(tokenizer, text)
    return ids


def encode_with_offsets(tokenizer: PreTrainedTokenizerFast, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """`encode`'s ids and each token's `(start, end)` character span in `text` (the tokenizer's offset mapping),
    so that a mask can be drawn on the text and land right for any tokenizer."""
    encoding = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False)
    if tokenizer.unk_token_id is not None and tokenizer.unk_token_id in encoding.ids and is_word_level(tokenizer):
        _warn_unknown(tokenizer, text)
    return encoding.ids, encoding.offsets


def _warn_unknown(tokenizer: PreTrainedTokenizerFast, text: str) -> None:
    vocab = tokenizer.get_vocab()
    for word in text.split():
        if word not in vocab and word not in _warned_unknown:
            _warned_unknown.add(word)
            warnings.warn(f"{word!r} is not in the word-level vocabulary: it is encoded as {UNK}", stacklevel=3)


def decode(tokenizer: PreTrainedTokenizerFast, ids: Iterable[int]) -> str:
    """Text of `ids`, special tokens kept, by the tokenizer's own decoder (Rust side, no clean-up): for the course's
    word-level tokenizers the tokens joined by single spaces; for a byte-level BPE exactly the bytes the pieces
    spell. Equal to `tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)`."""
    return tokenizer.backend_tokenizer.decode(list(ids), skip_special_tokens=False)


def pieces(tokenizer: PreTrainedTokenizerFast, text: str) -> list[str]:
    """The pieces `text` encodes to, as readable text: each piece decoded on its own (a byte-level piece that is
    part of a multi-byte character shows as U+FFFD). What an error about a tag that is not one token shows."""
    ids = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
    return [tokenizer.backend_tokenizer.decode([i], skip_special_tokens=False) for i in ids]


def tag_id(tokenizer: PreTrainedTokenizerFast, tag: str) -> int:
    """The id of a single-token tag such as `</tool_call>`; a `KeyError` naming the pieces the tokenizer splits it
    into when it is not one token."""
    token_id = tokenizer.convert_tokens_to_ids(tag)
    if token_id is None or token_id == tokenizer.unk_token_id:
        raise KeyError(f"{tag!r} is not a token of this tokenizer: it encodes as {pieces(tokenizer, tag)}")
    return token_id


def single_token_id(tokenizer: PreTrainedTokenizerFast, text: str) -> int | None:
    """The id of `text` when the tokenizer encodes it as exactly one token, else None."""
    ids = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
    return ids[0] if len(ids) == 1 and ids[0] != tokenizer.unk_token_id else None

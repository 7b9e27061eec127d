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


def encode(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    """Token ids of `text`, without adding BOS/EOS.

    Calls the Rust tokenizer directly: the rollout engine encodes every observation, and the
    Python wrapper's bookkeeping would cost more than the encoding itself.
    """
    return tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids


def decode(tokenizer: PreTrainedTokenizerFast, ids: Iterable[int]) -> str:
    """Text of `ids`, special tokens kept, in canonical form (equal to `tokenizer.decode`)."""
    return " ".join(tokenizer.convert_ids_to_tokens(list(ids)))


def tag_id(tokenizer: PreTrainedTokenizerFast, tag: str) -> int:
    """The id of a single-token tag such as `</tool_call>`."""
    token_id = tokenizer.convert_tokens_to_ids(tag)
    if token_id is None or token_id == tokenizer.unk_token_id:
        raise KeyError(f"{tag!r} is not a token of this tokenizer")
    return token_id

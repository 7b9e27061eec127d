"""The local stand-ins of a real checkpoint (`course_lib.course.standins`): a byte-level BPE tokenizer trained on the
environments' text with a ChatML template, and random-init models of several families saved and reloaded with
`from_pretrained`; and the multi-turn pitfalls measured on them."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from course_lib.course import standins
from course_lib.course.standins import BOS, FAMILIES, IM_END, IM_START, PAD
from course_lib.tokenizer import TAGS


@pytest.fixture(scope="module")
def texts():
    return standins.environment_texts(300)


@pytest.fixture(scope="module")
def tok(texts):
    """Qwen2-like: no BOS, `<|im_end|>` EOS."""
    return standins.train_bpe_tokenizer(texts, vocab_size=600)


@pytest.fixture(scope="module")
def tok_bos(texts):
    """Llama-like: BOS prepended."""
    return standins.train_bpe_tokenizer(texts, vocab_size=600, bos=True, split="llama3")


@pytest.fixture(scope="module")
def episodes():
    """Held-out episodes: another seed than the tokenizer's training text."""
    return standins.environment_episodes(20, seed=1)


def encode(tokenizer, text):
    return tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids


def test_environment_text_covers_the_three_chapters(texts, episodes):
    """Round-robin over chapters 00, 07 and 08; episodes are chat messages with the roles the template knows."""
    assert len(texts) == 300
    assert texts[0].startswith("<question>") and "</question>" in texts[0]  # ch00
    assert texts[1].startswith("at r") and "</action>" in texts[1]  # ch07
    assert texts[2].startswith("<question>") and "search" in texts[2]  # ch08
    assert standins.environment_texts(300) == texts and standins.environment_texts(300, seed=1) != texts
    assert len(episodes) == 60
    assert {role for episode in episodes for role, _ in episode} == {"user", "assistant", "tool"}
    assert all(episode[0][0] == "user" and episode[-1][0] in ("assistant", "user") for episode in episodes)


def test_tokenizer_size_and_special_tokens(tok, tok_bos):
    """600 tokens; ChatML markers, EOS and pad are special single tokens; BOS only in the Llama-like one."""
    assert len(tok) == 600 and len(tok_bos) == 600
    assert tok.eos_token == IM_END and tok.pad_token == PAD and tok.bos_token is None
    assert tok_bos.bos_token == BOS
    for special in (IM_START, IM_END, PAD):
        assert special in tok.all_special_tokens
        assert len(encode(tok, special)) == 1
    assert tok.unk_token is None  # byte-level: every text has a spelling


def test_tags_are_several_ordinary_pieces(tok):
    """No course tag is a token: each is split into several BPE pieces that spell it exactly."""
    vocab = tok.get_vocab()
    for tag in TAGS:
        parts = standins.pieces(tok, tag)
        assert len(parts) > 1, (tag, parts)
        assert "".join(parts) == tag
        assert tag not in vocab and tag not in tok.all_special_tokens


def test_round_trip_is_exact(tok, tok_bos, episodes):
    """Byte-level: decode(encode(text)) is the text, for every held-out episode and for text never seen."""
    for episode in episodes:
        for separator in (" ", "", "\n"):
            text = standins.transcript(episode, separator)
            assert tok.decode(encode(tok, text)) == text
            assert tok_bos.decode(encode(tok_bos, text)) == text
    odd = "Zürich — 東京 🙂  two  spaces\n\ttab <tool_call>x</tool_call>"
    assert tok.decode(encode(tok, odd)) == odd


def test_bos_only_when_asked(tok, tok_bos):
    """Qwen2-like: nothing prepended; Llama-like: one BOS, by the encoder and by the template alike."""
    text = "<answer> 52 </answer>"
    assert tok(text).input_ids == encode(tok, text)
    bos = tok_bos.convert_tokens_to_ids(BOS)
    assert tok_bos(text).input_ids == [bos, *encode(tok_bos, text)]
    chat = tok_bos.apply_chat_template([{"role": "user", "content": text}], tokenize=True, return_dict=False)
    assert chat[0] == bos and chat.count(bos) == 1


MESSAGES = [
    {"role": "system", "content": "Use the calculator."},
    {"role": "user", "content": "<question> 347 + 512 </question>"},
    {"role": "assistant", "content": "<tool_call> 347 + 512 </tool_call>"},
    {"role": "tool", "content": "<tool_response> 859 </tool_response>"},
]


def test_chat_template_is_chatml(tok, tok_bos):
    """system/user/assistant/tool turns and the generation prompt, exactly as ChatML writes them."""
    expected = (
        "<|im_start|>system\nUse the calculator.<|im_end|>\n"
        "<|im_start|>user\n<question> 347 + 512 </question><|im_end|>\n"
        "<|im_start|>assistant\n<tool_call> 347 + 512 </tool_call><|im_end|>\n"
        "<|im_start|>tool\n<tool_response> 859 </tool_response><|im_end|>\n"
    )
    assert tok.apply_chat_template(MESSAGES, tokenize=False) == expected
    prompt = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert prompt == expected + "<|im_start|>assistant\n"
    assert tok_bos.apply_chat_template(MESSAGES, tokenize=False) == BOS + expected
    ids = tok.apply_chat_template(MESSAGES, tokenize=True, add_generation_prompt=True, return_dict=False)
    assert ids == encode(tok, prompt)
    assert ids.count(tok.convert_tokens_to_ids(IM_START)) == 5 and ids.count(tok.eos_token_id) == 4
    with pytest.raises(Exception, match="roles"):
        tok.apply_chat_template([{"role": "narrator", "content": "x"}], tokenize=False)


def test_tokenizer_training_is_deterministic(texts, tok):
    assert standins.train_bpe_tokenizer(texts).backend_tokenizer.to_str() == tok.backend_tokenizer.to_str()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_saves_and_reloads(family, tok, tmp_path):
    """Each family builds at about 100k parameters, tied as the family ties, and reloads through the user's path
    (`AutoModelForCausalLM` / `AutoTokenizer.from_pretrained`) with the same tokenizer and identical logits."""
    folder = standins.build_standin(tmp_path / family, family, tokenizer=tok)
    model = standins.build_standin_model(family, tok)
    loaded = AutoModelForCausalLM.from_pretrained(folder).eval()
    loaded_tok = AutoTokenizer.from_pretrained(folder)
    assert loaded.config.model_type == family and loaded.config.vocab_size == 600
    tied = loaded.get_output_embeddings().weight.data_ptr() == loaded.get_input_embeddings().weight.data_ptr()
    assert tied == FAMILIES[family][1]
    assert 50_000 < sum(p.numel() for p in loaded.parameters()) < 200_000
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    ids = loaded_tok(text, return_tensors="pt").input_ids  # [1, T]
    assert ids[0].tolist() == encode(tok, text)
    assert loaded_tok.chat_template == tok.chat_template and loaded_tok.bos_token is None
    assert loaded_tok.eos_token_id == tok.eos_token_id and loaded_tok.pad_token_id == tok.pad_token_id
    with torch.no_grad():
        before, after = model(ids).logits, loaded(ids).logits  # [1, T, 600]
    assert after.shape == (1, ids.shape[1], 600)
    assert torch.equal(before, after)


def test_llama_default_tokenizer_has_bos(tmp_path):
    """Without a tokenizer, a family gets the default one with its BOS convention."""
    folder = standins.build_standin(tmp_path / "llama", "llama")
    loaded_tok = AutoTokenizer.from_pretrained(folder)
    assert loaded_tok.bos_token == BOS
    assert loaded_tok("x").input_ids[0] == loaded_tok.bos_token_id


def test_same_seed_same_files(tok, tmp_path):
    """Two builds with one seed write byte-identical files; another seed other weights."""
    first = standins.build_standin(tmp_path / "a", "qwen2", tokenizer=tok, seed=3)
    second = standins.build_standin(tmp_path / "b", "qwen2", tokenizer=tok, seed=3)
    names = sorted(p.name for p in first.iterdir())
    assert "model.safetensors" in names and "tokenizer.json" in names
    assert names == sorted(p.name for p in second.iterdir())
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    other = standins.build_standin_model("qwen2", tok, seed=4)
    same = standins.build_standin_model("qwen2", tok, seed=3)
    assert torch.equal(
        same.model.embed_tokens.weight, AutoModelForCausalLM.from_pretrained(first).model.embed_tokens.weight
    )
    assert not torch.equal(same.model.embed_tokens.weight, other.model.embed_tokens.weight)


# Multi-turn pitfalls ------------------------------------------------------------------------------------------------
def boundaries_after(episodes, predicate):
    """Adjacent turn pairs whose left turn's content satisfies `predicate`."""
    return sum(predicate(left) for episode in episodes for (_, left), _ in zip(episode, episode[1:]))


def test_chat_template_isolates_turns(tok, tok_bos, episodes):
    """ChatML's special tokens end every turn: the transcript encoded at once has exactly the ids of its turns
    encoded one by one, with or without BOS; the per-turn texts concatenate to the whole rendering."""
    for tokenizer in (tok, tok_bos):
        drift = standins.retokenization_drift(tokenizer, episodes, separator=None)
        assert drift["episodes"] == 60 and drift["boundaries"] == sum(len(e) - 1 for e in episodes)
        assert drift["drifted_episodes"] == drift["drifted_boundaries"] == 0
        assert drift["tokens_whole"] == drift["tokens_per_turn"]
        messages = [{"role": role, "content": content} for role, content in episodes[0]]
        whole = tokenizer.apply_chat_template(messages, tokenize=False)
        assert "".join(standins.turn_texts(tokenizer, episodes[0], None)) == whole


def test_newline_joined_turns_drift_at_every_tag(tok, episodes):
    """Joined by newlines (the usual tool loop), every boundary after a turn ending in a tag drifts: Qwen2's
    regex glues `>` and the newline into one piece (`>\\n`) that neither turn has alone. Every episode drifts;
    boundaries after a grid observation (ending in a word) do not. Joined by spaces, nothing drifts."""
    drift = standins.retokenization_drift(tok, episodes, separator="\n")
    assert drift["drifted_episodes"] == 60
    assert drift["drifted_boundaries"] == boundaries_after(episodes, lambda text: text.endswith(">"))
    assert 0 < drift["drifted_boundaries"] < drift["boundaries"]
    assert drift["tokens_whole"] < drift["tokens_per_turn"]
    assert "\n" not in standins.pieces(tok, "</tool_call>\n<tool_response>")  # the newline is inside `>\n`
    spaced = standins.retokenization_drift(tok, episodes, separator=" ")
    assert spaced["drifted_episodes"] == spaced["drifted_boundaries"] == 0


def test_stops_end_inside_a_token_when_a_newline_follows(tok, episodes):
    """`</tool_call>` followed by a newline ends inside the piece `>\\n`: every stop that another turn follows
    overshoots; a stop at the episode's end, or followed by a space, does not."""
    stops = ("</tool_call>", "</answer>", "</action>")
    followed = sum(
        role == "assistant" and content.endswith(stops)
        for episode in episodes
        for (role, content), _ in zip(episode, episode[1:])
    )
    newline = standins.stop_overshoot(tok, episodes, stops, separator="\n")
    assert newline["stops"] > followed > 0 and newline["overshoot"] == followed
    assert standins.stop_overshoot(tok, episodes, stops, separator=" ")["overshoot"] == 0


def test_resegmentation(tok, episodes):
    """Canonical turns survive decode -> encode; the same text sampled piece by piece does not."""
    turns = [encode(tok, content) for episode in episodes for role, content in episode if role == "assistant"]
    assert standins.resegmentation_drift(tok, turns) == {
        "sequences": len(turns), "changed": 0, "lossy": 0, "tokens": sum(map(len, turns)),
    }  # fmt: skip
    text = "<answer> 52 </answer>"
    by_character = [i for character in text for i in encode(tok, character)]
    assert tok.decode(by_character) == text and by_character != encode(tok, text)
    cut = encode(tok, "東")[:1]  # a multi-byte character cut after its first byte
    assert standins.resegmentation_drift(tok, [by_character, cut]) == {
        "sequences": 2, "changed": 2, "lossy": 1, "tokens": len(by_character) + 1,
    }  # fmt: skip


def test_template_that_strips_reasoning_breaks_prefixes(tok, episodes):
    """Qwen3-like: an earlier assistant turn's reasoning is dropped once another message follows, so rendering
    the conversation is not incremental; the plain ChatML template is."""
    thinking = [
        [(role, f"<think> plan </think> {content}" if role == "assistant" else content) for role, content in episode]
        for episode in episodes
    ]
    assert standins.template_breaks(tok, thinking) == {"episodes": 60, "broken": 0}
    stripping = standins.train_bpe_tokenizer(standins.environment_texts(60))
    stripping.chat_template = standins.chat_template(bos=False, strip_reasoning=True)
    # Broken: exactly the episodes with an assistant turn that another message follows (not chapter 00's direct
    # answers, whose one assistant turn is the last).
    followed = sum(any(role == "assistant" for role, _ in episode[:-1]) for episode in episodes)
    assert 0 < followed < 60
    assert standins.template_breaks(stripping, thinking) == {"episodes": 60, "broken": followed}
    assert standins.template_breaks(stripping, episodes) == {"episodes": 60, "broken": 0}
    with pytest.raises(ValueError, match="differently"):
        standins.turn_texts(stripping, thinking[0], None)


def test_offsets_are_character_offsets(tok):
    """The offset mapping (what masks are built from) indexes characters of the original text: pieces of one
    multi-byte character share its span, and the piece `>\\n` spans the end of one turn and the start of the next."""
    text = "Zürich 東 <tool_call> 1 + 2 </tool_call>\n<tool_response>"
    offsets = tok(text, return_offsets_mapping=True)["offset_mapping"]
    assert [tuple(span) for span in offsets] == tok.backend_tokenizer.encode(text, add_special_tokens=False).offsets
    assert all(a <= c and b <= d for (a, b), (c, d) in zip(offsets, offsets[1:]))
    assert {text[a:b] for a, b in offsets if b - a == 1} >= {"ü", "東", "Z"}
    assert sum(text[a:b] == "東" for a, b in offsets) == 3  # three UTF-8 bytes, three pieces, one character
    turn_end = text.index("\n")
    assert (turn_end - 1, turn_end + 1) in [tuple(span) for span in offsets]  # `>\n` straddles the boundary

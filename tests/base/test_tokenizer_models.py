"""Word-level tokenizer round trips; model save/load; LoRA and the reference policy."""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers import AutoTokenizer

from course_lib import models
from course_lib import tokenizer as course_tokenizer
from course_lib.tokenizer import TAGS, build_tokenizer, canonical, decode, encode, tag_id

TEXT = (
    "<question> 347 + 512 </question> <tool_call> 347 + 512 </tool_call> <tool_response> 859 </tool_response> "
    "<answer> 859 </answer> <feedback> invalid action </feedback>"
)


def test_round_trip_and_single_token_tags(tokenizer):
    """Canonical text decodes back exactly; each tag and number is one token."""
    ids = encode(tokenizer, TEXT)
    assert decode(tokenizer, ids) == TEXT
    assert len(ids) == len(TEXT.split())
    assert tokenizer.unk_token_id not in ids
    for tag in TAGS:
        assert encode(tokenizer, tag) == [tag_id(tokenizer, tag)]
    assert decode(tokenizer, encode(tokenizer, "  1 \n +   2 ")) == canonical("  1 \n +   2 ") == "1 + 2"


def test_unknown_words_map_to_unk(tokenizer, monkeypatch):
    """Words outside the vocabulary (and numbers above 1998) become <unk>, with a warning naming each word once;
    unknown tags raise, naming the pieces the tokenizer makes of them."""
    monkeypatch.setattr(course_tokenizer, "_warned_unknown", set())
    unk = tokenizer.unk_token_id
    with pytest.warns(UserWarning) as caught:
        assert encode(tokenizer, "hello 1999 -5 999") == [unk, unk, unk, encode(tokenizer, "999")[0]]
    assert sorted(str(w.message).split("'")[1] for w in caught) == ["-5", "1999", "hello"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same word again: no second warning
        encode(tokenizer, "hello 999")
    with pytest.raises(KeyError, match=r"'<nope>' is not a token of this tokenizer: it encodes as \['<unk>'\]"):
        tag_id(tokenizer, "<nope>")
    with pytest.raises(ValueError):
        build_tokenizer(["two words"])


def test_tokenizer_save_and_autotokenizer_load(tokenizer, tmp_path):
    """save_pretrained / AutoTokenizer.from_pretrained keeps the vocabulary and special tokens."""
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.get_vocab() == tokenizer.get_vocab()
    assert encode(loaded, TEXT) == encode(tokenizer, TEXT)
    assert decode(loaded, encode(loaded, TEXT)) == TEXT
    ids = (loaded.pad_token_id, loaded.unk_token_id, loaded.bos_token_id, loaded.eos_token_id)
    assert ids == (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)


def logits(model, tokenizer) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([[tokenizer.bos_token_id, *encode(tokenizer, TEXT)]])).logits


def test_model_save_load_identical_logits(make_model, tokenizer, tmp_path):
    """models.save then models.load gives the same logits and an eval-mode model."""
    model = make_model()
    models.save(model, tokenizer, tmp_path)
    loaded, loaded_tokenizer = models.load(tmp_path)
    assert not loaded.training
    assert torch.equal(logits(loaded, loaded_tokenizer), logits(model, tokenizer))
    with pytest.raises(KeyError):
        models.build_model(tokenizer, "huge")


def test_lora_and_reference_policy(make_model, tokenizer):
    """LoRA trains far fewer parameters; with the adapter disabled the model is exactly the base."""
    model = make_model()
    base = logits(model, tokenizer)
    full = models.count_parameters(model)
    peft_model = models.add_lora(model, rank=2)
    trainable = models.count_parameters(peft_model, trainable_only=True)
    assert 0 < trainable < full / 20
    assert torch.equal(logits(peft_model, tokenizer), base)  # LoRA B starts at zero
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_()
    adapted = logits(peft_model, tokenizer)
    assert (adapted - base).abs().max() > 1e-2
    with models.reference_policy(peft_model) as reference:
        assert torch.equal(logits(reference, tokenizer), base)
    assert torch.equal(logits(peft_model, tokenizer), adapted)  # the adapter is back on


def test_reference_policy_needs_peft(make_model):
    with pytest.raises(TypeError), models.reference_policy(make_model()):
        pass

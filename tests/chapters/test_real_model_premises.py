"""Chapter 16's measurements (the survey's premises on a real model), checked on a stand-in: a random-init Llama with
the stand-ins' byte-level BPE tokenizer and ChatML template, so the real model's code paths run in seconds. The
recorded numbers come from SmolLM2 (`python -m course_lib.chapters.ch16_real_model --record`)."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.chapters import ch16_real_model as ch16
from course_lib.course import standins
from course_lib.course.claims import evaluate_all
from course_lib.diagnostics import teacher_forced_logp
from course_lib.tokenizer import encode


@pytest.fixture(scope="module")
def standin():
    tokenizer = standins.default_tokenizer()
    model = standins.build_standin_model("llama", tokenizer, hidden=64, layers=2, seed=0, max_positions=512)
    return model, tokenizer


def test_the_reasoning_span_is_the_text_between_the_tags(standin):
    _, tokenizer = standin
    ids = encode(tokenizer, "sure <think> you r2 c3 go down </think> <answer> down </answer>")
    start, stop = ch16.reasoning_span(tokenizer, ids)
    assert tokenizer.decode(ids[start:stop]).strip() == "you r2 c3 go down"
    assert "<think>" in tokenizer.decode(ids[:start]) and "<think>" not in tokenizer.decode(ids[start:])
    assert ch16.reasoning_span(tokenizer, encode(tokenizer, "<think> go down and never close")) is None
    assert ch16.reasoning_span(tokenizer, encode(tokenizer, "<think></think> <answer> up </answer>")) is None
    assert ch16.reasoning_span(tokenizer, encode(tokenizer, "</think> <think>")) is None


def test_a_template_that_strips_earlier_reasoning_is_caught(standin):
    _, tokenizer = standin
    messages = [
        {"role": "user", "content": "you r1 c1 goal r4 c4"},
        {"role": "assistant", "content": "<think> go down </think> <answer> down </answer>"},
        {"role": "tool", "content": "you r2 c1 goal r4 c4"},
        {"role": "assistant", "content": "<think> go down </think> <answer> down </answer>"},
    ]
    assert ch16.template_keeps_turns(tokenizer, messages)
    tokenizer.chat_template = standins.chat_template(bos=False, strip_reasoning=True)
    assert not ch16.template_keeps_turns(tokenizer, messages)


def test_scores_over_prompt_caches_equal_teacher_forcing_every_pair(standin):
    """The prompt's cache repeated for every reasoning (`reuse_prompts`, P3's scorer on a real vocabulary) gives the
    log-probs of a full forward of each pair, as a mean and as a sum."""
    model, tokenizer = standin
    generator = torch.Generator().manual_seed(0)
    vocabulary = len(tokenizer)
    prompts = [torch.randint(3, vocabulary, (n,), generator=generator).tolist() for n in (5, 9, 7)]
    reasonings = [torch.randint(3, vocabulary, (n,), generator=generator).tolist() for n in (1, 4, 6, 3)]
    for aggregate in ("mean", "sum"):
        expected = teacher_forced_logp(model, prompts, reasonings, aggregate)
        got = teacher_forced_logp(model, prompts, reasonings, aggregate, reuse_prompts=True)
        assert got.shape == (4, 3)
        torch.testing.assert_close(got, expected, atol=1e-5 * (6 if aggregate == "sum" else 1), rtol=0)


def test_sampled_turns_stop_and_carry_the_entropy_they_were_drawn_from(standin):
    model, tokenizer = standin
    prefixes = [encode(tokenizer, text) for text in ("<question> 12 + 30 </question>", "you r1 c1 goal r4 c4 holes")]
    turns = ch16.sample_turns(model, tokenizer, prefixes, 12, torch.Generator().manual_seed(1), ("</answer>",))
    again = ch16.sample_turns(model, tokenizer, prefixes, 12, torch.Generator().manual_seed(1), ("</answer>",))
    assert turns == again, "a seeded generator gives the same turns"
    for prefix, (ids, entropies) in zip(prefixes, turns, strict=True):
        assert 1 <= len(ids) == len(entropies) <= 12
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prefix + ids])).logits[0, len(prefix) - 1 : -1].double()
        logprobs = torch.log_softmax(logits, dim=-1)
        full = -(logprobs.exp() * logprobs).sum(-1)
        torch.testing.assert_close(torch.tensor(entropies, dtype=torch.float64), full, atol=1e-4, rtol=0)
        assert all(0 <= e <= math.log(len(tokenizer)) + 1e-6 for e in entropies)


def test_every_premise_runs_on_a_standin(standin):
    """Each measurement end to end on a few problems (the stand-in writes noise: the numbers are not the point)."""
    model, tokenizer = standin
    config = ch16.Chapter16Config(prompts=4, tree_prompts=2, answer_tokens=6, think_tokens=8)
    arithmetic = ch16.arithmetic_premises(model, tokenizer, config, 0)
    assert 0 <= arithmetic["success_alone"] <= 1 and arithmetic["entropy_first_turn"] > 0
    assert 0 <= arithmetic["answer_tag_share_with_result"] <= 1
    assert arithmetic["entropy_after_tool_minus_first"] == pytest.approx(
        arithmetic["entropy_after_tool"] - arithmetic["entropy_first_turn"]
    )
    reasoning = ch16.reasoning_premise(model, tokenizer, config, 0)
    assert 0 <= reasoning["valid_share"] <= 1
    branching = ch16.branching_premise(model, tokenizer, config, 0)
    assert 0 <= branching["branch_share"] <= 1
    pitfalls = ch16.pitfall_checks(model, tokenizer, config, 0)
    assert pitfalls["exact_errors"] == 0 and pitfalls["policy_tokens"] > 0
    assert pitfalls["template_keeps_turns_share"] == 1.0
    numbers = ch16.claim_numbers({"arithmetic": arithmetic, "reasoning": reasoning, "branching": branching,
                                  "pitfalls": pitfalls})  # fmt: skip
    claims = {c.id: c for c in evaluate_all(ch16.CLAIMS, numbers)}
    assert claims["C16.5"].passed
    assert not {c.id: c for c in evaluate_all(ch16.CLAIMS, numbers | {"pitfalls_exact_errors": 1.0})}["C16.5"].passed

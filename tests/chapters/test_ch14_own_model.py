"""Chapter 14 (appendix): chapter 00 on a BPE stand-in, and the tokenizer pitfalls its claims count."""

from __future__ import annotations

import dataclasses
import os

import pytest

from course_lib.chapters import ch14_own_model as ch14
from course_lib.course import standins
from course_lib.rl import checkpoint, session


@pytest.fixture(scope="module")
def tokenizer():
    return standins.default_tokenizer()


def test_pitfalls_on_the_stand_ins_tokenizer(tokenizer):
    """Seed 0's counts, exact (the tokenizer is trained deterministically): newline-joined turns drift at most
    boundaries and space-joined ones at none; most stops end inside `>\\n`; the stripping template re-renders exactly
    the episodes whose assistant turn another message follows, and ChatML none."""
    p = ch14.pitfalls(tokenizer, 20, 0)
    assert p["episodes"] == 60 and p["drift_episodes"] == 60
    assert (p["drift_boundaries"], p["boundaries"], p["drift_space_boundaries"]) == (486, 834, 0)
    assert (p["overshoot"], p["overshoot_stops"]) == (397, 437)
    assert p["breaks_stripping"] == p["followed"] == 49 and p["breaks_chatml"] == 0


def test_with_reasoning_prefixes_only_assistant_turns():
    episode = [("user", "q"), ("assistant", "<answer> 1 </answer>"), ("tool", "t")]
    assert standins.with_reasoning([episode]) == [
        [("user", "q"), ("assistant", "<think> plan </think> <answer> 1 </answer>"), ("tool", "t")]
    ]


def test_using_sets_the_session_and_restores_it_and_leaves_the_environment_alone(tmp_path, monkeypatch):
    standins.build_standin(tmp_path, "qwen2")
    monkeypatch.setenv(session.MODEL_VARIABLE, "elsewhere")
    monkeypatch.delenv(session.FULL_FINETUNE_VARIABLE, raising=False)
    environment = dict(os.environ)
    with checkpoint.using(tmp_path, full_finetune=True) as path:
        assert path == tmp_path and checkpoint.model_path() == tmp_path and checkpoint.full_finetune()
        assert dict(os.environ) == environment, "the session is an object, not the environment"
    assert session.current() == session.RunSession(model="elsewhere"), "outside the block: the environment's"
    with pytest.raises(RuntimeError), checkpoint.using(tmp_path):
        raise RuntimeError("restored on errors too")
    assert session.current().model == "elsewhere" and dict(os.environ) == environment


@pytest.mark.slow
def test_a_short_run_measures_every_claim_number():
    """Shrunk budgets: the stand-in is written, warm-started (every weight), trained and evaluated; the exact checks
    hold at any budget (C14.3), the pitfalls are counted (C14.4, C14.5), and every claim gets a verdict."""
    config = ch14.preset("cpu")
    chapter00 = dataclasses.replace(
        config.chapter00,
        demonstrations=96,
        eval_tasks=8,
        sft=dataclasses.replace(config.chapter00.sft, steps=20, batch_size=8, warmup_steps=1),
        grpo=dataclasses.replace(
            config.chapter00.grpo, iterations=1, prompts_per_iteration=2, group_size=4, eval_every=1
        ),
    )
    config = dataclasses.replace(config, chapter00=chapter00, pitfall_episodes=4, logprob_batch=4)
    before = session.current()
    results = ch14.run(0, config)
    assert session.current() == before, "the session is restored"
    assert not hasattr(results["model"], "peft_config"), "every weight trained, no adapter"
    assert "model.safetensors" in results["files"] and "tokenizer.json" in results["files"]
    numbers = ch14.claim_numbers(results)
    assert all(isinstance(value, float) for value in numbers.values())
    assert numbers["checks_id_errors"] == numbers["checks_mask_errors"] == numbers["checks_text_errors"] == 0
    assert 0 <= numbers["logprob_error"] <= 1e-4
    verdicts = {claim.id: claim for claim in ch14.claims(results)}
    assert set(verdicts) == {spec.id for spec in ch14.CLAIMS}
    assert verdicts["C14.5"].passed

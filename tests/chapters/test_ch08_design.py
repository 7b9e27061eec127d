"""Chapter 08's designed setting (`course_lib.chapters.ch08_design`): the demonstrator, the tool-call count, the
re-search share and the pre-registered claim, by hand; no training."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from course_lib import chapters
from course_lib.chapters import ch08_arpo as ch08
from course_lib.chapters import ch08_design as design
from course_lib.course import designs
from course_lib.engine.rollout import RolloutEngine, Trajectory
from course_lib.envs.two_hop_qa import KB, question_pool
from course_lib.rl import seams


def ambiguous_question():
    return question_pool("train", True)[0]


def unambiguous_question():
    return question_pool("train", False)[0]


def test_research_actions_re_search_precisely_after_two_candidates():
    q = ambiguous_question()
    actions = design.research_actions(q, random.Random(0), research_share=1.0)
    assert actions == [
        f"<tool_call> search {q.name} {q.role} </tool_call>",
        f"<tool_call> search {q.name} in {q.city} {q.role} </tool_call>",
        f"<tool_call> search {q.bridge} {q.attribute} </tool_call>",
        f"<answer> {q.answer} </answer>",
    ]


def test_research_actions_guess_a_candidate_without_re_search():
    q = ambiguous_question()
    people = set()
    for seed in range(40):
        actions = design.research_actions(q, random.Random(seed), research_share=0.0)
        assert len(actions) == 3 and " in " not in actions[0]
        person = actions[1].split()[2:4]
        people.add(" ".join(person))
        assert actions[2] == f"<answer> {KB.people[' '.join(person)][q.attribute]} </answer>"
    assert people == set(q.candidates)  # both candidates, the wrong one included


def test_research_actions_leave_unambiguous_questions_alone():
    q = unambiguous_question()
    rng = random.Random(3)
    state = rng.getstate()
    actions = design.research_actions(q, rng, research_share=1.0)
    assert rng.getstate() == state  # no draw
    assert actions == [
        f"<tool_call> search {q.name} {q.role} </tool_call>",
        f"<tool_call> search {q.bridge} {q.attribute} </tool_call>",
        f"<answer> {q.answer} </answer>",
    ]


def test_demonstrations_re_search_about_their_share_and_never_first():
    texts = design.demonstration_texts(400, 0)
    re_searches = [c for _, c in texts if c.count("<tool_call>") == 3]
    ambiguous = [c for _, c in texts if " ; " in c]
    assert all(" in " not in c.split("</tool_call>")[0] for _, c in texts)  # the first search is never precise
    assert all(c in ambiguous for c in re_searches)
    share = len(re_searches) / len(ambiguous)
    assert 0.2 < share < 0.4, share  # RESEARCH_SHARE 0.3 on about 200 ambiguous demonstrations


def fake(infos: list[dict]) -> Trajectory:
    return Trajectory(env=None, token_ids=[], loss_mask=[], logprobs=[], entropies=[], turn_ids=[], infos=infos)


def test_executed_calls_by_hand():
    search, answer = {"tool_result": "x"}, {"success": True}
    full = fake([search, search, answer])  # 2 calls
    re_searched = fake([search, search, search, answer])  # 3 calls
    # a branch forked after step 1 shares the first call; one forked after step 2 shares both
    assert design.executed_calls([full, re_searched], [0, 0]) == 5
    assert design.executed_calls([full, re_searched], [1, 2]) == 1 + 1
    assert design.executed_calls([], []) == 0


def test_research_share_by_hand():
    amb = {"ambiguous": True}
    rows = [
        fake([{**amb, "tool_result": "a"}, {"tool_result": "b", "precise": True}, {}]),
        fake([{**amb, "tool_result": "a", "precise": False}, {"tool_result": "b"}, {}]),
        fake([{"ambiguous": False, "tool_result": "a", "precise": True}, {}]),  # unambiguous: not counted
    ]
    assert design.research_share(rows) == 0.5
    assert design.research_share(rows[2:]) != design.research_share(rows[2:])  # NaN


def test_claim_check_can_fail():
    ok = {"arpo_minus_grpo": -0.01, "train_calls_saved": 0.3}
    assert design.check(ok)
    assert design.check({**ok, "arpo_minus_grpo": -0.02})  # a tie at the margin holds
    assert not design.check({**ok, "arpo_minus_grpo": -0.05})
    assert not design.check({**ok, "train_calls_saved": 0.0})


def test_design_is_registered_and_planned_as_pre_registered():
    d = chapters.design("ch08")
    assert d is design.DESIGN and d.claim.kind == "finding" and d.claim.id == "C8.3d"
    assert (d.effect_key, d.margin, d.scaled_effect) == ("arpo_minus_grpo", -0.02, 0.03)
    assert d.claim.effects[1] == ("train_calls_saved", 0.0)
    # with t: n = 13 detects (2.179 + 0.873) 0.06 / sqrt(13) = 0.0508 > 0.05, n = 14 detects 0.0488 (the normal's
    # quantiles would have asked for 12); sd 0.15 -> capped at 20
    assert designs.seeds_needed(0.06, 0.03, -0.02) == 14
    assert designs.seeds_needed(0.15, 0.03, -0.02) == 20
    assert not set(d.pilot_seeds) & set(d.deciding_seeds(20))


def test_arms_differ_only_in_the_sampler():
    grpo, arpo = design.arm_config("grpo"), design.arm_config("arpo")
    assert dataclasses.replace(grpo, sampler=arpo.sampler) == arpo
    assert (arpo.tree.global_samples, arpo.tree.alpha, arpo.tree.beta) == (4, 0.5, 0.2)
    assert arpo.group_size == 8 and arpo.iterations == design.ITERATIONS


def test_counted_samplers_on_the_base():
    model, tokenizer = design.load_base()
    config = ch08.Chapter08Config()
    engine = RolloutEngine(model, tokenizer, dataclasses.replace(config.sampling, snapshot_envs=True))
    grpo = dataclasses.replace(design.arm_config("arpo"), prompts_per_iteration=2)
    seeds = [ch08.VARIANCE_SEED + p for p in range(2)]
    envs = [ch08.make_env("train", config) for _ in range(2 * grpo.group_size)]
    sample = seams.resolve("sampler", design.SAMPLERS["arpo"])
    tree = sample(engine, envs, seeds, grpo, torch.Generator().manual_seed(0))
    every = sum(sum("tool_result" in i for i in t.infos) for t in tree.rows)
    assert len(tree.rows) == 2 * grpo.group_size
    assert tree.stats["executed_calls"] <= every
    if tree.stats["tree_branches"]:
        assert tree.stats["executed_calls"] < every  # a branch shares at least its first call
    envs = [ch08.make_env("train", config) for _ in range(2 * grpo.group_size)]
    groups = seams.resolve("sampler", design.SAMPLERS["grpo"])(engine, envs, seeds, grpo, torch.Generator())
    assert groups.stats["executed_calls"] == sum(sum("tool_result" in i for i in t.infos) for t in groups.rows)


def test_base_hash_is_checked(tmp_path, monkeypatch):
    monkeypatch.setattr(design, "BASE_DIR", tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"not the base")
    with pytest.raises(Exception, match="does not hold"):
        design.load_base()

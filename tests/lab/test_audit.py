"""The leakage audit (`course_lib.course.leakage`) and the distinct held-out seeds every evaluation uses."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import pytest
import torch

from course_lib import chapters
from course_lib.chapters import ch01_rap as ch01
from course_lib.chapters import modules
from course_lib.course import leakage
from course_lib.envs.base import TextEnv, distinct_seeds
from course_lib.lab import audit
from course_lib.rl.train import GRPOConfig, policy_iteration
from course_lib.tasks import blocks_planning, key_door_grid, lake_reasoning, real_model

# Every overlap the audit finds on the committed data, per (chapter, split, what it is compared
# with, unit). Anything not listed must be 0.
PROBLEMS, TRIPLES = "problems", "held-out (tool, parameter, value) triples"
EXPECTED_OVERLAPS = {
    # Inherent: chapter 05's five chit-chat queries (no tool fits) occur in every split, so each
    # evaluation split holds all five, and training and the demonstrations ask them too.
    ("ch05", "test", "RL training draws", PROBLEMS): 5,
    ("ch05", "test", "warm-start demonstrations", PROBLEMS): 5,
    ("ch05", "novel", "RL training draws", PROBLEMS): 5,
    ("ch05", "novel", "warm-start demonstrations", PROBLEMS): 5,
    # Chapter 05's held-out (tool, parameter, value) triples: none in the demonstrations since the noise
    # draws only seen triples and ch05_base was rebuilt (before: all 31, in 1,628 of 20,000 demonstrations).
    # The test checks that count is 0 (the key must exist), so a triple that leaks again fails it.
    # Chapters 01 and 02 (which evaluates on chapter 01's test pool): none. The ch01 base's plan and step
    # corpora leave out every (state, goal) pair on an optimal path of a validation or test problem
    # (`blocks_lm.held_out_pairs`); before that rebuild, 590 of the test pool's 2,252 mid-path steps were
    # in the step corpus and 158 in the plan corpus (validation: 160 and 43 of 558).
    # Chapters 09 and 10 (FrozenLake, chapter 09's base): none, since maps are split by layout (goal, holes) and
    # ch09_base was rebuilt. Split by whole map, the observation (which leaves the start out) leaked: of the 128
    # held-out maps' 1,601 state observations, 426 were in the demonstrations and 481 (ch10: 304; 618 over its
    # seeds 0-7) on the RL draws' maps; 22 held-out first prompts were in the demonstrations; 58 of their 126
    # layouts were the demonstrations' and 35 (ch10: 22) the RL draws'. The audit counted 0: it compared maps.
}
STATES = leakage.STATES
LAYOUTS, FIRST_PROMPTS = leakage.LAYOUTS, leakage.FIRST_PROMPTS
LOOKUPS = "hop lookups of held-out questions (sub-problems)"


@pytest.fixture(scope="module")
def audits() -> list[leakage.SplitAudit]:
    return [split for run in audit.audits().values() for split in run()]


def test_the_surveys_audit_finds_a_planted_leak(monkeypatch):
    """Chapter 16's survey audit counts a held-out problem that is also trained on: here the "held-out" grids are
    the first demonstrations of seed 0 and the "held-out" word problems the first RL draws of seed 0."""
    door, words = real_model.TASKS["key_door"], real_model.TASKS["arithmetic"]
    monkeypatch.setitem(real_model.TASKS, "key_door", dataclasses.replace(
        door, test_env=door.train_env, held_out=lambda c, n: key_door_grid.demonstration_seeds(n, 0)))  # fmt: skip
    monkeypatch.setitem(real_model.TASKS, "arithmetic", dataclasses.replace(
        words, test_env=words.train_env, held_out=lambda c, n: leakage.grpo_task_seeds(8, 4, [0])[:n]))  # fmt: skip
    monkeypatch.setattr(leakage, "run_seeds", lambda chapter: (0,))
    grid = {o.against + " " + o.unit: o.count for o in leakage.survey_split("ch16", "key_door").overlaps}
    assert grid[f"warm-start demonstrations {PROBLEMS}"] == 64 and grid[f"warm-start demonstrations {STATES}"] > 0
    sums = {o.against: o.count for o in leakage.survey_split("ch16", "arithmetic").overlaps}
    assert sums["RL training draws"] == 32  # 8 iterations of 4 prompts: every draw of seed 0


@pytest.mark.slow
def test_committed_evaluations_have_no_repeated_problems_and_only_the_disclosed_overlaps(audits):
    assert {a.chapter for a in audits} == set(modules())
    skipped = {a.chapter for a in audits if a.skipped}
    # the appendix (without trl) and the pitfalls lab (no held-out split) may be skipped
    assert skipped <= {"ch13", "ch15"}, skipped
    audits = [a for a in audits if not a.skipped]
    for split in audits:
        assert split.size > 0 and split.duplicates == 0, split.lines()
    found = {(a.chapter, a.split, o.against, o.unit): o.count for a in audits for o in a.overlaps}
    assert set(EXPECTED_OVERLAPS) <= set(found)
    assert found[("ch05", "novel", "warm-start demonstrations", TRIPLES)] == 0
    assert {k: v for k, v in found.items() if v} == EXPECTED_OVERLAPS
    # Every overlap that remains is labelled (inherent or pending), none silently
    assert all(o.note for a in audits for o in a.overlaps if o.count)
    # Chapters 07, 09 and 10: no observation of any state a held-out problem can show is in the demonstrations or
    # on the RL draws' problems (key-and-door tasks and FrozenLake maps are held out by layout); chapters 09 and
    # 10 also share no layout and no first prompt. The keys must exist, so a leak fails this test.
    against_both = ("RL training draws", "warm-start demonstrations")
    for chapter in ("ch07", "ch09", "ch10"):
        for against in against_both:
            assert found[(chapter, "test", against, STATES)] == 0
    for chapter in ("ch09", "ch10"):
        assert found[(chapter, "test", "warm-start demonstrations", FIRST_PROMPTS)] == 0
        for against in against_both:
            assert found[(chapter, "test", against, LAYOUTS)] == 0
    for against in against_both:  # chapter 17 trains on chapter 07's grid
        assert found[("ch17", "test (grid)", against, STATES)] == 0
    for against in against_both:  # chapter 16's survey trains SmolLM2 on the grid, two-hop search and the lake
        assert found[("ch16", "test (key_door)", against, STATES)] == 0
        assert found[("ch16", "test (two_hop)", against, LOOKUPS)] == 0
        assert found[("ch16", "test (lake)", against, STATES)] == found[("ch16", "test (lake)", against, LAYOUTS)] == 0
    assert {a.split for a in audits if a.chapter == "ch16"} == {f"test ({name})" for name in real_model.TASKS}
    assert audit.leaked_states(audits) == {"ch07": 0, "ch09": 0, "ch10": 0, "ch16": 0, "ch17": 0}
    # How many sub-problems are counted, so that a unit that silently shrinks fails too: every state of the 200
    # held-out key-door tasks; every non-hole, non-goal cell of the 128 held-out maps (114 layouts); both forms of
    # hop 1 and both candidates' hop 2 of the 258 held-out questions (344 before the imprecise `NAME ROLE` lookups)
    totals = {(a.chapter, o.against, o.unit): o.total for a in audits for o in a.overlaps}
    assert totals[("ch07", "RL training draws", STATES)] == 10512
    for chapter in ("ch09", "ch10"):
        assert totals[(chapter, "RL training draws", STATES)] == 1427
        assert totals[(chapter, "RL training draws", LAYOUTS)] == 114
        assert totals[(chapter, "warm-start demonstrations", FIRST_PROMPTS)] == 128
    assert all(totals[(chapter, "RL training draws", LOOKUPS)] == 408 for chapter in ("ch08", "ch11", "ch12"))
    # chapter 16's 64 held-out grids, questions and maps: 4,752 grid states, 186 lookups, 737 lake states
    survey = {(a.split, o.unit): o.total for a in audits if a.chapter == "ch16" for o in a.overlaps}
    assert survey[("test (key_door)", STATES)] == 4752 and survey[("test (lake)", STATES)] == 737
    assert survey[("test (two_hop)", LOOKUPS)] == 186
    # Chapter 08: held out by company name, so no hop lookup of a held-out question (either form of hop 1, either
    # candidate's hop 2) is made in RL training or the demonstrations; chapters 11 and 12 likewise (11 with the
    # root variant's draws and base)
    for chapter in ("ch08", "ch11", "ch12"):
        for against in against_both:
            assert found[(chapter, "test", against, LOOKUPS)] == 0
    assert audit.totals(audits) == (len(modules()) - len(skipped), 0, sum(EXPECTED_OVERLAPS.values()))


def test_audit_prints_the_summary_line_last(capsys):
    audit.main(["ch00", "ch06"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "audit: chapters=2 duplicates=0 overlaps=0"
    assert lines[0].startswith("ch00 test: N=200 distinct=200 duplicates=0")


def test_summary_names_leaked_states_per_chapter_and_skipped_splits():
    states = [
        leakage.Overlap("RL training draws", STATES, 0, 9),
        leakage.Overlap("warm-start demonstrations", STATES, 2, 9),
    ]
    audits = [
        leakage.SplitAudit("ch05", "test", 4, 4, [leakage.Overlap("RL training draws", "problems", 1, 4, "inherent")]),
        leakage.SplitAudit("ch07", "test", 4, 4, states),
        leakage.SplitAudit("ch13", "test", 0, 0, skipped="trl is not installed"),
    ]
    assert audit.summary(audits) == (
        "audit: chapters=2 duplicates=0 overlaps=3 leaked_states=2 (ch07=2) skipped=ch13 test"
    )
    assert audits[2].lines() == ["ch13 test: skipped (trl is not installed)"]


def test_chapter13_is_skipped_without_trl(monkeypatch):
    monkeypatch.setitem(sys.modules, "trl", None)  # `find_spec` then reports trl missing
    (split,) = chapters.load("ch13").audit()
    assert split.chapter == "ch13" and "trl" in split.skipped and not split.overlaps


def test_run_seeds_are_every_seed_recorded_in_the_chapters_results_files(tmp_path, monkeypatch):
    from course_lib.course import recorded

    monkeypatch.setattr(recorded, "RESULTS_DIR", tmp_path)
    for name, seeds in (("ch07", [0, 1]), ("ch07_confirmation", [10, 11]), ("ch08", [5])):
        (tmp_path / f"{name}.json").write_text(json.dumps({"chapter": name, "seeds": {str(s): {} for s in seeds}}))
    assert leakage.run_seeds("ch07") == (0, 1, 10, 11)
    assert leakage.run_seeds("ch08") == (5,)
    assert leakage.run_seeds("ch09") == leakage.RUN_SEEDS  # nothing recorded: the default seeds


def test_question_lookups_hold_both_forms_of_hop_one_and_both_candidates_hop_two():
    from course_lib.envs.two_hop_qa import all_questions

    question = next(q for q in all_questions() if q.ambiguous)
    lookups = leakage.question_lookups([question])
    (precise, role), (bridge, attribute) = question.hop_lookups()
    assert lookups == {(precise, role), (question.name, role), *((p, attribute) for p in question.candidates)}
    assert (bridge, attribute) in lookups and len(question.candidates) == 2


def test_lake_observations_are_every_state_of_a_map_and_leave_the_start_out():
    lake = ((0, 0), (3, 3), ((1, 1), (2, 2)))
    seen = leakage.lake_observations([lake])
    assert len(seen) == 16 - 1 - 2 and "you r1 c1 goal r4 c4 holes r2 c2 r3 c3" in seen
    assert leakage.lake_observations([((0, 1), (3, 3), ((1, 1), (2, 2)))]) == seen


def test_episode_observations_are_what_the_environment_showed():
    from course_lib.chapters import ch09_ragen as ch09
    from course_lib.envs.reasoning import turn_text

    texts = lake_reasoning.demonstration_texts(30, seed=3)
    shown, env = set(), ch09.make_env("train")
    for (prompt, completion), task_seed in zip(texts, lake_reasoning.demonstration_seeds(30, 3), strict=True):
        assert prompt == env.reset(seed=task_seed)[0]
        shown.add(prompt)
        for turn in completion.split("</answer>")[:-1]:
            think, move = turn.split("<think>")[-1].split("</think>")
            observation, *_ = env.step(turn_text(think.split(), move.replace("<answer>", "").strip()))
            if not env.done:
                shown.add(observation)
    assert leakage.episode_observations(texts) == shown


# distinct_seeds on a toy environment with a known problem space -----------------------------------
class ModuloEnv(TextEnv):
    """Problem `seed % space`: seeds 0..space-1 are the distinct ones, then problems repeat."""

    def __init__(self, space: int):
        super().__init__()
        self.space = space

    def _reset(self, seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self.problem = seed % self.space
        return f"problem {self.problem}", {}

    def anchor(self) -> int:
        return self.problem


def test_distinct_seeds_skips_repeats_and_is_deterministic():
    assert distinct_seeds(lambda: ModuloEnv(5), 5) == [0, 1, 2, 3, 4]
    seeds = distinct_seeds(lambda: ModuloEnv(5), 3, start=4)
    assert seeds == [4, 5, 6]  # problems 4, 0, 1
    assert seeds == distinct_seeds(lambda: ModuloEnv(5), 3, start=4)
    assert distinct_seeds(lambda: ModuloEnv(5), 0) == []


def test_distinct_seeds_refuses_more_problems_than_the_split_holds():
    with pytest.raises(ValueError, match="only 5 distinct problems"):
        distinct_seeds(lambda: ModuloEnv(5), 6)


def test_blocksworld_problems_are_keyed_by_start_and_goal():
    from course_lib import envs

    env = envs.make("blocksworld", split="test", length=2)
    env.reset(options={"init": "a | b | hand empty", "goal": "b a"})
    first = env.problem_key()
    env.reset(options={"init": "a | b | hand empty", "goal": "a b"})
    assert env.transcript.observations[0] == "a | b | hand empty" and env.problem_key() != first


def test_chapter_test_seeds_give_distinct_problems():
    from course_lib.chapters import ch05_toolrl as ch05
    from course_lib.envs.function_calling import FunctionCallingEnv

    seeds = ch05.test_seeds(200, "test")
    keys = leakage.problem_keys(lambda: FunctionCallingEnv("test"), seeds)
    assert len(set(keys)) == 200
    # The first 200 seeds of this split repeat queries: the helper is what makes them distinct
    assert len(set(leakage.problem_keys(lambda: FunctionCallingEnv("test"), range(200)))) < 200


def test_chapter01_samples_distinct_test_problems_and_refuses_more_than_the_pool():
    for rows in ch01.test_problems(100, seed=0).values():
        assert len(rows) == len(set(rows)) == 100
    with pytest.raises(ValueError, match="distinct"):
        ch01.test_problems(blocks_planning.TEST_PER_LENGTH + 1, seed=0)


def test_committed_chapter01_test_rows_are_what_the_build_writes():
    validation = blocks_planning.validation_rows()
    rows = blocks_planning.distinct_test_rows(blocks_planning.TEST_PER_LENGTH, validation)
    expected = {n: [(i, g) for i, g, m in zip(rows["init"], rows["goal"], rows["length"], strict=True) if m == n]
                for n in ch01.LENGTHS}  # fmt: skip
    assert ch01.test_pool() == expected


# Overlap counting on toy examples with a known answer ----------------------------------------------
def test_count_overlap_counts_distinct_held_out_items_found_in_the_reference():
    assert leakage.count_overlap(["a", "b", "b", "c"], {"b", "c", "d"}) == 2
    assert leakage.count_overlap(["a"], ["b"]) == 0


def test_path_subproblems_are_the_states_strictly_inside_optimal_plans():
    # a and b on the table, goal a on b: pick-up a, stack a b; the one state in between holds a
    assert leakage.path_subproblems("a | b | hand empty", "b a") == {("b | hand a", "b a")}
    # b on a, goal both on the table: unstack b a, put-down b; in between the hand holds b
    assert leakage.path_subproblems("a b | hand empty", "a | b") == {("a | hand b", "a | b")}


def test_corpus_pairs_read_state_and_goal_back_from_prompts():
    rows = [("goal b a state a | b | hand empty act", "pick-up a eval good")]
    assert leakage.corpus_pairs(rows, "act") == {("a | b | hand empty", "b a")}


def test_grpo_task_seeds_are_the_seeds_training_resets_with():
    """The audit's copy of the task-seed rule must match `train.policy_iteration`'s."""

    class Captured(Exception):
        pass

    class Engine:
        def rollout(self, envs, seeds, groups, generator):
            raise Captured(seeds)

    config = GRPOConfig(iterations=3, prompts_per_iteration=4, group_size=2)
    model = torch.nn.Linear(1, 1)
    drawn = []
    for seed in (0, 2):
        for iteration in range(config.iterations):
            with pytest.raises(Captured) as caught:
                policy_iteration(model, Engine(), [], config, seed, iteration, torch.Generator(), None)
            drawn += list(dict.fromkeys(caught.value.args[0]))
    assert drawn == leakage.grpo_task_seeds(config.iterations, config.prompts_per_iteration, (0, 2))

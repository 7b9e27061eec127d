"""`engine.episode`: the one-sequence rule is the engine's, token for token (the reference the rollout exercise is
graded against), on the word-level base and on a BPE stand-in with ChatML; its sampler draws the engine's tokens and
trains through the loop's sampler seam."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from course_lib import data
from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.course import standins
from course_lib.engine.episode import play_episode, sampling_policy
from course_lib.engine.rollout import RolloutEngine, SamplingConfig
from course_lib.rl.seams import one_by_one
from exercises.checks.rollout import Replay

FIELDS = ("token_ids", "loss_mask", "logprobs", "entropies", "turn_ids", "rewards", "anchors", "terminated",
          "truncated", "cut")  # fmt: skip


@pytest.fixture(scope="module")
def base():
    return data.load_base(ch00.BASE_NAME, "cpu")


def replayed_equal(engine, rows, make_env) -> None:
    for row in rows:
        mine = play_episode(engine, Replay(row, engine.tokenizer, "reference"), make_env(), row.seed)
        for name in FIELDS:
            assert getattr(mine, name) == getattr(row, name), (row.seed, name)


SHAPES = {
    "chapter 00's sampling": ({}, lambda row: row.num_turns >= 2),  # a tool call, its result, an answer
    "3 tokens a turn": ({"max_turn_tokens": 3}, lambda row: not all(info["valid"] for info in row.infos)),
    "12 tokens a sequence": ({"max_total_tokens": 12}, lambda row: row.cut),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_reference_rebuilds_the_engines_episodes_on_the_word_level_base(base, shape):
    changes, shows = SHAPES[shape]
    engine = RolloutEngine(*base, dataclasses.replace(ch00.preset().sampling, **changes))
    rows = engine.rollout(
        [ch00.make_env() for _ in range(12)], list(range(12)), generator=torch.Generator().manual_seed(0)
    )
    assert any(shows(row) for row in rows), f"no episode shows what {shape!r} is for"
    replayed_equal(engine, rows, ch00.make_env)


def test_the_reference_rebuilds_the_engines_episodes_on_a_bpe_stand_in():
    """A random-init Llama with a byte-level BPE tokenizer and ChatML: its turns run to the turn budget, the env
    answers with feedback, the cap cuts some sequences."""
    tokenizer = standins.default_tokenizer()
    model = standins.build_standin_model("llama", tokenizer)
    config = SamplingConfig(prompt_format="chat", max_turn_tokens=6, max_total_tokens=90)
    engine = RolloutEngine(model, tokenizer, config)
    rows = engine.rollout(
        [ch00.make_env() for _ in range(6)], list(range(6)), generator=torch.Generator().manual_seed(0)
    )
    assert any(row.num_turns >= 2 for row in rows) and any(row.cut for row in rows)
    replayed_equal(engine, rows, ch00.make_env)


def test_the_sampling_policy_draws_the_engines_tokens(base):
    model, tokenizer = base
    engine = RolloutEngine(model, tokenizer, ch00.preset().sampling)
    for seed in range(6):
        row = engine.rollout([ch00.make_env()], [seed], generator=torch.Generator().manual_seed(seed))[0]
        mine = play_episode(engine, sampling_policy(engine, torch.Generator().manual_seed(seed)), ch00.make_env(), seed)
        assert mine.token_ids == row.token_ids and mine.loss_mask == row.loss_mask
        assert max(abs(a - b) for a, b in zip(mine.logprobs, row.logprobs, strict=True)) < 1e-4


def test_a_one_by_one_sampler_trains_through_the_loops_seam(base):
    """One GRPO iteration whose episodes `seams.one_by_one` played: GRPO's groups (4 episodes of each of
    2 tasks), and an update that moves the weights when a group's rewards differ."""
    import copy

    from course_lib.rl import seams
    from course_lib.rl.train import policy_iteration

    model = copy.deepcopy(base[0])
    config = ch00.preset()
    grpo = dataclasses.replace(config.grpo, sampler="test_episode_by_episode", prompts_per_iteration=2, group_size=4)
    played = []

    def sampler(*args):
        rollouts = one_by_one(play_episode)(*args)
        played.extend(rollouts.rows)
        return rollouts

    seams.register("sampler", "test_episode_by_episode", sampler)
    try:
        before = [p.detach().clone() for p in model.parameters()]
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        engine = RolloutEngine(model, base[1], config.sampling)
        envs = [ch00.make_env() for _ in range(8)]
        policy_iteration(model, engine, envs, grpo, 5, 0, torch.Generator().manual_seed(0), optimizer)
    finally:
        del seams.SEAMS["sampler"]["test_episode_by_episode"]
    assert [row.group_id for row in played] == [0] * 4 + [1] * 4
    assert len({row.seed for row in played[:4]}) == 1 and played[0].seed != played[4].seed
    signal = any(len({row.total_reward for row in played[g : g + 4]}) > 1 for g in (0, 4))
    moved = any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert signal and moved

"""Chapters 09-10's environments: the reasoning-then-action format, the bandit, FrozenLake and Sokoban."""

from __future__ import annotations

import pytest

from course_lib import envs
from course_lib.envs import bandit, frozen_lake, sokoban
from course_lib.envs.base import InvalidAction
from course_lib.envs.reasoning import parse_turn, turn_text
from course_lib.tokenizer import TAGS

NAMES = ("bandit", "frozen_lake", "sokoban")
MODULES = {"bandit": bandit, "frozen_lake": frozen_lake, "sokoban": sokoban}
BAD_TURNS = ["", "down", "<answer> down </answer>", "<think> a b </think>", "<think> x </think> <answer> a b </answer>",
             "<think> " + "w " * 9 + "</think> <answer> down </answer>", "<think> x </think> <answer> fly </answer>",
             "<think> x </think> <answer> down </answer> extra", "\x00" * 5000]  # fmt: skip


def test_parse_turn():
    assert parse_turn("<think> you r1 c2 go down </think> <answer> down </answer>") == (
        ["you", "r1", "c2", "go", "down"], "down"
    )  # fmt: skip
    assert parse_turn(turn_text([], "up")) == ([], "up")
    assert parse_turn(turn_text("a b", "x")) == (["a", "b"], "x")
    for bad in BAD_TURNS[:6]:
        with pytest.raises(InvalidAction):
            parse_turn(bad)


@pytest.mark.parametrize("name", NAMES)
def test_bad_turns_get_feedback_and_the_format_penalty(name):
    for bad in BAD_TURNS:
        env = envs.make(name)
        env.reset(seed=1)
        observation, reward, terminated, truncated, info = env.step(bad)
        assert not info["valid"] and reward == -0.1 and observation.startswith("<feedback>") and not terminated
        vocabulary = set(MODULES[name].vocabulary()) | set(TAGS)
        assert set(observation.split()) <= vocabulary, observation


@pytest.mark.parametrize("name", NAMES)
def test_reset_is_deterministic_and_splits_are_disjoint(name):
    env = envs.make(name)
    assert env.reset(seed=5)[0] == env.reset(seed=5)[0]
    keys = {}
    for split in ("train", "test"):
        env = envs.make(name, split=split)
        keys[split] = set()
        for seed in range(300):
            observation, _ = env.reset(seed=seed)
            keys[split].add(env.problem_key())
            assert set(observation.split()) <= set(MODULES[name].vocabulary()), observation
    assert keys["train"] and keys["test"] and not keys["train"] & keys["test"]


def test_bandit_rewards_and_names():
    safe, risky = [], []
    for seed in range(2000):
        env = envs.make("bandit")
        observation, info = env.reset(seed=seed)
        words = observation.split()
        pick = info["risky"] if seed % 2 else next(w for w in words[1:-1:2] if w != info["risky"])
        _, reward, terminated, _, step_info = env.step(turn_text("ok", pick))
        assert terminated and step_info["chose_risky"] == bool(seed % 2)
        (risky if seed % 2 else safe).append(reward)
    assert set(safe) == {0.2} and set(risky) == {0.0, 1.0} and 0.45 < sum(risky) / len(risky) < 0.55
    test_env = envs.make("bandit", split="test")
    observation, _ = test_env.reset(seed=0)
    assert set(observation.split()[1:-1:2]) <= set(bandit.TEST_NAMES)
    assert not set(bandit.TRAIN_NAMES) & set(bandit.TEST_NAMES)


def test_frozen_lake_slips_at_the_stated_rate():
    moved, tries = {"down": 0, "left": 0, "right": 0, "up": 0}, 0
    for seed in range(1500):
        env = envs.make("frozen_lake")
        env.reset(seed=seed)
        _, _, _, _, info = env.step(turn_text("go", "down"))
        moved[info["moved"]] += 1
        tries += 1
    assert moved["up"] == 0 and 0.77 < moved["down"] / tries < 0.83
    assert 0.07 < moved["left"] / tries < 0.13 and 0.07 < moved["right"] / tries < 0.13


def test_frozen_lake_expert_reaches_the_goal_without_slips():
    for seed in range(200):
        env = envs.make("frozen_lake", intended_probability=1.0)
        env.reset(seed=seed)
        length = len(frozen_lake.shortest_path(*env.lake)) - 1
        reward = 0.0
        for _ in range(length):
            _, reward, terminated, _, info = env.step(turn_text("go", frozen_lake.expert_move(env)))
        assert terminated and reward == 1.0 and info["success"]


def test_frozen_lake_holes_and_edges():
    env = envs.make("frozen_lake", intended_probability=1.0)
    env.reset(seed=0)
    env.lake, env.position = ((0, 0), (3, 3), ((1, 0),)), (0, 0)
    observation, reward, *_ = env.step(turn_text("", "up"))  # into the edge: stays
    assert env.position == (0, 0) and reward == 0.0 and observation.startswith("you r1 c1")
    observation, reward, terminated, _, info = env.step(turn_text("", "down"))
    assert observation == "fell" and reward == 0.0 and terminated and not info["success"]


def test_frozen_lake_splits_by_layout_so_no_held_out_state_is_shown_in_training():
    """The observation leaves the start out, so maps that differ only by it must share a split; then no
    observation a held-out map can show (any cell but a hole or the goal) is shown by a training map."""
    import random

    rng = random.Random(0)
    cells = [(r, c) for r in range(frozen_lake.SIZE) for c in range(frozen_lake.SIZE)]
    for _ in range(300):
        _, goal, holes = frozen_lake.random_map(rng)
        splits = {frozen_lake.split_of((start, goal, holes)) for start in cells if start not in (goal, *holes)}
        assert len(splits) == 1, (goal, holes)
    shown = {}
    for split in ("train", "test"):
        env, shown[split] = envs.make("frozen_lake", split=split), set()
        for seed in range(400):
            observation, _ = env.reset(seed=seed)
            goal, holes = frozen_lake.layout(env.lake)
            states = {frozen_lake.observation_text(env.lake, c) for c in cells if c not in (goal, *holes)}
            assert observation in states
            shown[split] |= states
    assert shown["train"] and shown["test"] and not shown["train"] & shown["test"]


def test_sokoban_rewards_follow_gym_sokoban():
    for seed in range(100):
        env = envs.make("sokoban")
        env.reset(seed=seed)
        plan = sokoban.solve(env.player, env.box, env.puzzle[2])
        assert plan and len(plan) <= 10
        rewards = [env.step(turn_text("push", move))[1] for move in plan]
        assert rewards[:-1] == [-0.1] * (len(plan) - 1) and rewards[-1] == pytest.approx(10.9) and env.done


def test_sokoban_walls_and_blocked_pushes_waste_a_step():
    env = envs.make("sokoban")
    env.reset(seed=0)
    env.player, env.box, env.puzzle = (1, 1), (1, 2), ((1, 1), (1, 2), (4, 4))
    _, reward, *_ = env.step(turn_text("", "up"))  # into the wall
    assert (env.player, env.box, reward) == ((1, 1), (1, 2), -0.1)
    env.box = (1, 4)
    env.player = (1, 3)
    env.step(turn_text("", "right"))  # the box is against the wall: no push
    assert (env.player, env.box) == ((1, 3), (1, 4))
    env.step(turn_text("", "left"))
    assert (env.player, env.box) == ((1, 2), (1, 4))


def test_sokoban_ends_after_ten_turns():
    env = envs.make("sokoban")
    env.reset(seed=3)
    for turn in range(10):
        *_, terminated, truncated, _ = env.step(turn_text("", "up" if turn % 2 else "down"))
        if terminated:
            break
    assert env.done and (terminated or truncated)


@pytest.mark.parametrize("name", NAMES)
def test_demonstrator_reasoning_fits_the_channel_and_names_the_input(name):
    module = MODULES[name]
    for seed in range(50):
        env = envs.make(name)
        observation, info = env.reset(seed=seed)
        answer = info["risky"] if name == "bandit" else module.expert_move(env)
        words = module.reasoning(env, answer)
        assert len(words) <= 8 and set(words) <= set(module.vocabulary())
        assert set(words) & set(observation.split()) - {"you", "box"}, "the reasoning repeats part of the input"
        _, _, _, _, step_info = env.step(turn_text(words, answer))
        assert step_info["valid"]

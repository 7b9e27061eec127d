"""`key_door` (chapter 07): tasks and splits, the expert planner, invalid actions, the grid rules,
the three observation views, and the vocabulary."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import envs
from course_lib.envs.key_door import (
    ACTIONS,
    all_tasks,
    draw_task,
    expert_action,
    render,
    shortest_plan,
    shortest_plan_length,
    split_of,
    vocabulary,
)
from course_lib.tokenizer import TAGS, build_tokenizer, encode

# 6x6, wall in column 3, door at (3, 3); the agent starts next to the door with the key just below.
TASK = ((3, 2), (4, 2), 3, (3, 5))


def make(**kwargs):
    return envs.make("key_door", **kwargs)


def test_registry_and_constructor_checks():
    assert "key_door" in envs.names()
    env = make()
    assert (env.size, env.view, env.max_steps, env.max_turns, env.invalid_penalty) == (6, "full", 30, 30, 0.0)
    for bad in ({"size": 5}, {"size": 9}, {"view": "partial"}, {"split": "dev"}, {"max_steps": 0}):
        with pytest.raises(ValueError):
            make(**bad)
    with pytest.raises(ValueError):  # the key may not lie in the right room
        make().reset(options={"task": ((0, 0), (0, 4), 2, (5, 5))})


def test_task_space_is_large_and_splits_are_disjoint():
    """22,032 tasks on 6x6; the tasks of 12 of the 72 layouts (door row, goal) are held out by hash; 2000
    seeds of each split stay in their split."""
    tasks = all_tasks(6)
    assert len(tasks) == len(set(tasks)) == 18 * 17 * 6 * 12 == 22_032
    test_tasks = {t for t in tasks if split_of(t) == "test"}
    assert (len(tasks) - len(test_tasks), len(test_tasks)) == (18_360, 3_672)
    layouts = {split: {(t[2], t[3]) for t in tasks if split_of(t) == split} for split in ("train", "test")}
    assert (len(layouts["train"]), len(layouts["test"])) == (60, 12) and not layouts["train"] & layouts["test"]
    keys = {}
    for split in ("train", "test"):
        env = make(split=split)
        keys[split] = set()
        for seed in range(2000):
            env.reset(seed=seed)
            assert split_of(env.problem_key()) == split
            keys[split].add(env.problem_key())
    assert not keys["train"] & keys["test"]
    assert len(keys["train"]) > 1800 and len(keys["test"]) > 1400  # draws with replacement, few repeats


def test_no_held_out_observation_occurs_in_training_tasks():
    """Sub-problems do not leak: every state of every held-out task (key held or not, door open or not)
    gives an observation that no state of any training task gives."""

    def observations(split):
        env, seen = make(split=split), set()
        for task in (t for t in all_tasks(6) if split_of(t) == split):
            (_, key, door, goal) = task
            for row in range(6):
                for col in range(6):
                    for has_key in (False, True):
                        for door_open in (False, True):
                            env.task, env.state = task, (row, col, has_key, door_open)
                            seen.add(env._observe())
        return seen

    assert not observations("train") & observations("test")


def test_reset_is_deterministic_and_the_first_observation_names_the_task():
    first = [make().reset(seed=s) for s in range(20)]
    assert first == [make().reset(seed=s) for s in range(20)]
    obs, info = make().reset(seed=0, options={"task": TASK})
    assert obs == "at r3 c2 key r4 c2 door r3 goal r3 c5 holding none door closed"
    assert info["anchor"] == (3, 2, False, False) and info["task"] == TASK and not info["success"]
    assert draw_task(7, "test") == make(split="test").reset(seed=7)[1]["task"]


def test_expert_solves_200_tasks_optimally_within_the_step_limit():
    rng, longest = random.Random(0), 0
    for i in range(200):
        env = make(split=("train", "test")[i % 2])
        env.reset(seed=rng.randrange(10**6))
        optimal = shortest_plan_length(env)
        longest = max(longest, optimal)
        steps, terminated, truncated = 0, False, False
        while not (terminated or truncated):
            _, reward, terminated, truncated, info = env.step(expert_action(env))
            steps += 1
            assert info["valid"]
        assert terminated and reward == 1.0 and info["success"] and steps == optimal
        with pytest.raises(ValueError):  # on the goal there is nothing left to do
            expert_action(env)
    assert 15 <= longest < env.max_steps  # 22 in this sample


def manhattan(a, b):
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def optimal_length(task):
    """Closed form on 6x6 (rooms are open rectangles): to the key, pickup, to the cell left of the
    door, open, onto the door, to the goal."""
    start, key, door, goal = task
    return manhattan(start, key) + 1 + manhattan(key, (door, 2)) + 2 + manhattan((door, 3), goal)


def test_longest_optimal_plan_on_6x6_leaves_slack_under_the_step_limit():
    """The breadth-first planner agrees with the closed form; over all 22,032 tasks the longest
    optimal plan is 24 steps (12.4 on average), under the default limit of 30."""
    tasks = all_tasks(6)
    for task in random.Random(0).sample(tasks, 300):
        assert len(shortest_plan(task, 6, (*task[0], False, False))) == optimal_length(task)
    lengths = [optimal_length(t) for t in tasks]
    assert (min(lengths), max(lengths)) == (5, 24) and 12 < sum(lengths) / len(lengths) < 13


@pytest.mark.parametrize("action", ["", "fly", "up down", "<action> </action>", "<action>up</action>", "UP", None])
def test_invalid_actions_change_nothing_and_count_as_steps(action):
    env = make(max_steps=3)
    start, _ = env.reset(seed=0, options={"task": TASK})
    for turn in range(3):
        obs, reward, terminated, truncated, info = env.step(action)
        assert (reward, terminated, info["valid"], info["success"]) == (0.0, False, False, False)
        assert obs == f"<feedback> invalid action </feedback> {start}" and info["anchor"] == (3, 2, False, False)
        assert truncated == (turn == 2)


def test_action_tags_are_ignored():
    plain, tagged = make(), make()
    plain.reset(seed=5)
    tagged.reset(seed=5)
    for _ in range(4):
        a = plain.step("up")
        b = tagged.step("<action> up </action>")
        assert a == b and a[4]["valid"]
    assert tagged.step("<action> down")[4]["valid"] and tagged.step("left </action>")[4]["valid"]


def test_walls_door_key_and_goal():
    env = make()
    env.reset(seed=0, options={"task": TASK})
    s0 = env.anchor()

    def step(action):
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["valid"] and env.observation_key() == obs and info["anchor"] == env.anchor()
        return obs, reward, terminated

    assert step("right")[0] == env.transcript.observations[0] and env.anchor() == s0  # the closed door blocks
    for no_op in ("open", "pickup"):  # no key in hand; no key here
        step(no_op)
        assert env.anchor() == s0
    step("up")
    step("right")  # the wall blocks
    assert env.anchor() == (2, 2, False, False)
    step("down")
    step("down")
    obs, _, _ = step("pickup")
    assert env.anchor() == (4, 2, True, False) and "key held" in obs and "holding key" in obs
    step("right")  # the wall again, key in hand
    step("open")  # diagonal to the door: not adjacent
    assert env.anchor() == (4, 2, True, False)
    step("up")
    obs, _, _ = step("open")
    assert env.anchor() == (3, 2, True, True) and obs.endswith("door open")
    assert render(env).splitlines()[3] == "..Ad.G"
    step("right")
    step("up")  # the wall above the door cell
    assert env.anchor() == (3, 3, True, True)
    step("right")
    obs, reward, terminated = step("right")
    assert (reward, terminated, env.done, env.transcript.actions[-1]) == (1.0, True, True, "right")
    assert obs == "at r3 c5 key held door r3 goal r3 c5 holding key door open"


def test_step_limit_truncates_without_success():
    env = make(max_steps=3)
    env.reset(seed=0, options={"task": TASK})
    for turn in range(3):
        _, reward, terminated, truncated, info = env.step("left")
        assert (reward, terminated, truncated, info["success"]) == (0.0, False, turn == 2, False)
    with pytest.raises(RuntimeError):
        env.step("left")


def test_render_marks_every_object():
    env = make()
    env.reset(seed=0, options={"task": TASK})
    assert render(env).splitlines() == ["...#..", "...#..", "...#..", "..AD.G", "..K#..", "...#.."]


def test_aliased_view_hides_the_key_and_door_state():
    env = make(view="aliased")
    env.reset(seed=0, options={"task": TASK})
    before, _, _, _, info_before = env.step("down")
    after, _, _, _, info_after = env.step("pickup")
    assert before == after == "at r4 c2 key r4 c2 door r3 goal r3 c5"
    assert info_before["anchor"] != info_after["anchor"]
    closed, *_ = env.step("up")
    opened, *_ = env.step("open")
    assert closed == opened and env.anchor() == (3, 2, True, True)


def test_noisy_view_never_repeats_a_text_but_anchors_repeat():
    """The two nonce words (the env's noise id, the observation's index) make every text of a batch
    unique while the true states (anchors) repeat, and the texts are otherwise the full view's."""
    env = make(view="noisy", noise_id=5)
    obs, info = env.reset(seed=0, options={"task": TASK})
    assert obs == "at r3 c2 key r4 c2 door r3 goal r3 c5 holding none door closed n5 n0"
    anchors = [info["anchor"]]
    for action in ["right"] * 10 + ["fly"]:  # bumps the closed door, then an invalid action
        anchors.append(env.step(action)[4]["anchor"])
    texts = env.transcript.observations
    assert len(set(texts)) == len(texts) == 12 and set(anchors) == {(3, 2, False, False)}
    assert all(t.split()[-3:-2] == ["closed"] for t in texts)  # only the nonce differs

    def rollout(noise_id):
        env = make(view="noisy", noise_id=noise_id)
        env.reset(seed=3, options={"task": TASK})
        rng = random.Random(1)
        while not env.done:  # no pickup, so the goal is never reached and all 30 steps are taken
            env.step(rng.choice(("up", "down", "left", "right", "open")))
        return env.transcript.observations

    batch = [rollout(i) for i in range(8)]  # one group: same task and actions, eight environments
    texts = [t for episode in batch for t in episode]
    assert len(texts) == len(set(texts)) == 8 * 31 and batch[0] == rollout(0)
    plain = make()
    plain.reset(seed=3, options={"task": TASK})
    assert [t.split()[:-2] for t in batch[0]][:1] == [plain.transcript.observations[0].split()]


def test_every_observation_word_is_in_the_vocabulary():
    vocab = vocabulary()
    assert len(vocab) == len(set(vocab)) and set(ACTIONS) <= set(vocab)
    words = set()
    for view in ("full", "aliased", "noisy"):
        for seed in range(30):
            env = make(view=view, split=("train", "test")[seed % 2])
            env.reset(seed=seed)
            rng = random.Random(seed)
            while not env.done:
                env.step(expert_action(env) if rng.random() < 0.5 else rng.choice([*ACTIONS, "fly"]))
            words.update(w for obs in env.transcript.observations for w in obs.split())
    assert words <= set(vocab) | set(TAGS)
    tokenizer = build_tokenizer(vocab)
    assert tokenizer.unk_token_id not in encode(tokenizer, "<action> pickup </action> " + " ".join(sorted(words)))


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=40) | st.text(" <>/actionupdwlfrk", max_size=30))
def test_random_text_never_raises(action):
    env = make(view="noisy")
    env.reset(seed=0, options={"task": TASK})
    obs, reward, terminated, _, info = env.step(action)
    assert isinstance(obs, str) and not terminated and reward == 0.0
    words = [w for w in action.split() if w not in ("<action>", "</action>")]
    assert info["valid"] == (len(words) == 1 and words[0] in ACTIONS) == (not obs.startswith("<feedback>"))

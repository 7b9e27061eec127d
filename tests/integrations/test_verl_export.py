"""`course_lib.integrations.course_verl` without verl: the parquet export verl's `RLHFDataset` reads, and the agent
loop's turn logic (`play_episode`) driven by fake inference servers: one replaying trajectories the course's own
`RolloutEngine` sampled (so every token id, mask and log-prob must match), one sampling the chapter-00 base with
torch, one sending malformed actions."""

from __future__ import annotations

import asyncio
import dataclasses
import functools

import pytest
import torch
import yaml
from datasets import load_dataset

from course_lib import data
from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.chapters import ch04_torl as ch04
from course_lib.chapters import ch05_toolrl as ch05
from course_lib.chapters import ch08_arpo as ch08
from course_lib.chapters import chapter_key
from course_lib.engine.bookkeeping import alignment_errors, expected_tokens
from course_lib.engine.rollout import RolloutEngine, SamplingConfig
from course_lib.integrations import course_verl
from course_lib.tokenizer import decode, encode, tag_id

COLUMNS = {"data_source", "prompt", "agent_name", "reward_model", "extra_info"}


@functools.lru_cache(maxsize=4)
def base(name: str):
    model, tokenizer = data.load_base(name, "cpu")
    return model.eval(), tokenizer


def read_parquet(path) -> list[dict]:
    return list(load_dataset("parquet", data_files=str(path))["train"])


# Export --------------------------------------------------------------------------------------------------------
def test_export_writes_the_columns_verl_reads(tmp_path):
    train = read_parquet(course_verl.export_parquet("00", "train", tmp_path, count=12))
    test = read_parquet(course_verl.export_parquet("ch00", "test", tmp_path, count=12))
    assert (tmp_path / "ch00_train.parquet").exists() and (tmp_path / "ch00_test.parquet").exists()
    assert len(train) == len(test) == 12
    for rows, split in ((train, "train"), (test, "test")):
        env = ch00.make_env(split)
        for index, row in enumerate(rows):
            assert set(row) == COLUMNS
            assert row["agent_name"] == course_verl.AGENT_NAME
            assert row["data_source"] == "course_lib/ch00/tool_arithmetic"
            info = row["extra_info"]
            assert (info["index"], info["split"], info["env"], info["chapter"]) == (
                index,
                split,
                "tool_arithmetic",
                "ch00",
            )
            assert (info["max_turn_tokens"], info["max_total_tokens"]) == (8, 40)
            assert info["stop_tags"] == ["</tool_call>", "</answer>"]
            obs, _ = env.reset(seed=info["seed"])
            assert row["prompt"] == [{"role": "user", "content": obs}]
            assert row["reward_model"] == {"style": "rule", "ground_truth": str(env.problem_key())}
    assert [row["extra_info"]["seed"] for row in train] == list(range(12))
    # held-out rows are the chapter's own evaluation seeds: distinct problems, none of them a training problem
    assert [row["extra_info"]["seed"] for row in test] == ch00.test_seeds(12)
    test_problems = [row["reward_model"]["ground_truth"] for row in test]
    assert len(set(test_problems)) == 12
    assert not set(test_problems) & {row["reward_model"]["ground_truth"] for row in train}


@pytest.mark.parametrize(
    "chapter, split, held_out",
    [
        ("03", "test", None),
        ("04", "test", lambda n: ch04.test_seeds(n)),
        ("05", "novel", lambda n: ch05.test_seeds(n, "novel", ch05.preset("cpu").task_mix)),
        ("06", "test", None),
        ("08", "test", lambda n: ch08.test_seeds(n, ch08.preset("cpu"))),
    ],
    ids=["ch03", "ch04", "ch05-novel", "ch06", "ch08"],
)
def test_every_tool_chapter_exports(tmp_path, chapter, split, held_out):
    tasks = course_verl.chapter_tasks(chapter)
    rows = read_parquet(course_verl.export_parquet(chapter, split, tmp_path, count=4))
    seeds = [row["extra_info"]["seed"] for row in rows]
    assert seeds == tasks.held_out_seeds(split, 4)
    if held_out is not None:
        assert seeds == held_out(4)
    assert len({row["reward_model"]["ground_truth"] for row in rows}) == 4
    env = tasks.make_env(split)
    for row, seed in zip(rows, seeds, strict=True):
        assert row["prompt"][0]["content"] == env.reset(seed=seed)[0]
        assert row["extra_info"]["max_total_tokens"] == tasks.sampling.max_total_tokens


def test_command_line_and_agent_loop_yaml(tmp_path, capsys):
    course_verl.main(["export", "--chapter", "00", "--split", "test", "--out", str(tmp_path), "--count", "3"])
    assert capsys.readouterr().out.strip() == str(tmp_path / "ch00_test.parquet")
    assert len(read_parquet(tmp_path / "ch00_test.parquet")) == 3
    course_verl.main(["agent-config", "--out", str(tmp_path / "agent.yaml")])
    entries = yaml.safe_load((tmp_path / "agent.yaml").read_text())
    target = "course_lib.integrations.course_verl.CourseEnvAgentLoop"
    assert entries == [{"name": "course_env_agent", "_target_": target}]
    # the class verl instantiates exists exactly where verl imports (the main environment has no verl)
    assert hasattr(course_verl, "CourseEnvAgentLoop") == course_verl.verl_available()


def test_launch_sizes_the_sequences_per_chapter(capsys):
    """`launch` sets verl's prompt and response lengths from the chapter: its longest prompt and `max_total_tokens`,
    which fit the base's positions (vLLM's `max_model_len`)."""
    assert course_verl.sequence_lengths("00") == (6, 40)  # [bos] <question> a + b </question>; chapter 00's cap
    prompt, response = course_verl.sequence_lengths("08")
    model, _ = base(course_verl.chapter_tasks("08").base)
    assert response == ch08.preset("cpu").sampling.max_total_tokens
    assert 1 < prompt < response and prompt + response <= model.config.max_position_embeddings
    course_verl.main(["launch", "--method", "arpo", "--chapter", "08"])
    printed = capsys.readouterr().out
    for override in (
        f"data.max_prompt_length={prompt}",
        f"data.max_response_length={response}",
        "actor_rollout_ref.model.path=data/ch08_base",
        "data.train_files=verl_data/ch08_train.parquet",
    ):
        assert override in printed, override  # fmt: skip


def test_chapter_keys():
    assert chapter_key("00") == chapter_key(0) == chapter_key("ch00") == "ch00"
    with pytest.raises(ValueError):
        chapter_key("tool")
    with pytest.raises(KeyError):
        course_verl.chapter_tasks("01")  # chapter 01 is not a tool task


# The turn logic ------------------------------------------------------------------------------------------------
def replay_server(trajectory, tokenizer, sampling: SamplingConfig, calls: list):
    """A fake server that answers each turn with the tokens the course's engine sampled there, then (as a server
    that ignored the stop ids would) a few more, which the loop must drop."""
    stop_ids = sorted(tag_id(tokenizer, tag) for tag in sampling.stop_tags)
    ids, mask, logprobs = trajectory.token_ids, trajectory.loss_mask, trajectory.logprobs

    async def generate(prompt_ids, params):
        calls.append(params)
        start = len(prompt_ids)
        assert prompt_ids == ids[:start], "the loop must feed back exactly the sequence so far"
        assert params["stop_token_ids"] == stop_ids and params["ignore_eos"] is True
        assert params["max_tokens"] == min(sampling.max_turn_tokens, sampling.max_total_tokens - start)
        end = start
        while end < len(ids) and mask[end] == 1:
            end += 1
        turn, turn_logprobs = ids[start:end], logprobs[start:end]
        if turn and turn[-1] in stop_ids:
            turn, turn_logprobs = turn + [stop_ids[0], 5, 6], turn_logprobs + [-1.0, -2.0, -3.0]
        return turn, turn_logprobs

    return generate


@pytest.mark.parametrize(
    "chapter, caps, cut_kinds",
    [
        ("ch00", (8, 12, 15, 17, 21), {0, 1}),
        ("ch04", (24, 30, 40), {0, 1}),
        ("ch05", (20, 30), {1}),
        ("ch08", (20, 30, 45), {0, 1}),
    ],
)
def test_replay_of_course_rollouts_matches_token_for_token(chapter, caps, cut_kinds):
    """The chapter's own limits, then tighter total caps, which cut sequences inside actions (last mask 1) and,
    where an episode has several steps, inside observations (last mask 0); chapter 05's episodes are one step."""
    tasks = course_verl.chapter_tasks(chapter)
    model, tokenizer = base(tasks.base)
    seeds = list(range(24))
    cut_last_masks = set()
    for cap in (None, *caps):
        sampling = tasks.sampling if cap is None else dataclasses.replace(tasks.sampling, max_total_tokens=cap)
        engine = RolloutEngine(model, tokenizer, sampling)
        envs = [tasks.make_env("train") for _ in seeds]
        trajectories = engine.rollout(envs, seeds, generator=torch.Generator().manual_seed(1))
        for t in trajectories:
            calls = []
            generate = replay_server(t, tokenizer, sampling, calls)
            params = {"temperature": 1.0, "logprobs": True}
            result = asyncio.run(
                course_verl.play_episode(tasks.make_env("train"), t.seed, tokenizer, generate, sampling, params)
            )
            assert all(call["temperature"] == 1.0 and call["logprobs"] is True for call in calls)
            assert result.token_ids == t.token_ids and result.loss_mask == t.loss_mask
            assert result.logprobs == t.logprobs and result.turn_ids == t.turn_ids
            assert (result.rewards, result.anchors) == (t.rewards, t.anchors)
            assert result.total_reward == t.total_reward and result.success == t.success
            assert (result.terminated, result.truncated, result.cut) == (t.terminated, t.truncated, t.cut)
            # the independent rebuild from the environment's transcript agrees: mask 0 exactly on observation tokens
            ids, mask = expected_tokens(result, tokenizer)
            assert ids == t.token_ids and mask == t.loss_mask
            assert alignment_errors(result, tokenizer) == []
            fields = course_verl.output_fields(result)
            prompt = len(fields["prompt_ids"])
            assert fields["prompt_ids"] + fields["response_ids"] == t.token_ids
            assert set(t.turn_ids[:prompt]) == {-1} and -1 not in t.turn_ids[prompt:]
            assert [0] * prompt + fields["response_mask"] == t.loss_mask
            assert fields["response_logprobs"] == t.logprobs[prompt:]
            for step, (start, end) in enumerate(fields["extra_fields"]["action_spans"]):
                assert set(fields["response_mask"][start:end]) == {1}
                assert set(fields["extra_fields"]["turn_ids"][start:end]) == {step}
            if t.cut:
                cut_last_masks.add(t.loss_mask[-1])
        if cap is None and 0 in cut_kinds:  # the batch holds what the check is about: observations in responses
            assert any(0 in t.loss_mask[t.turn_ids.count(-1) :] for t in trajectories)
    assert cut_last_masks == cut_kinds


def sampling_server(model, generator: torch.Generator, seen: list):
    """A fake server that samples the model with torch, token by token, honouring `stop_token_ids` and
    `max_tokens` as vLLM does (the stop token is returned as the last id)."""

    async def generate(prompt_ids, params):
        seen.append(params)
        ids, new, logprobs = list(prompt_ids), [], []
        with torch.no_grad():
            while len(new) < params["max_tokens"]:
                logits = model(torch.tensor([ids])).logits[0, -1].float()
                log_probs = torch.log_softmax(logits / params["temperature"], dim=-1)
                token = int(torch.multinomial(log_probs.exp(), 1, generator=generator))
                ids.append(token)
                new.append(token)
                logprobs.append(float(log_probs[token]))
                if token in params["stop_token_ids"]:
                    break
        return new, logprobs

    return generate


def test_sampling_the_base_through_a_fake_server():
    tasks = course_verl.chapter_tasks("00")
    model, tokenizer = base(tasks.base)
    generator = torch.Generator().manual_seed(0)
    results, seen = [], []
    for seed in range(16):
        generate = sampling_server(model, generator, seen)
        result = asyncio.run(
            course_verl.play_episode(
                tasks.make_env("train"), seed, tokenizer, generate, tasks.sampling, {"temperature": 1.0}
            )
        )
        results.append(result)
        ids, mask = expected_tokens(result, tokenizer)
        assert ids == result.token_ids and mask == result.loss_mask
        assert alignment_errors(result, tokenizer) == []
        # the reward is the environment's: replaying the actions it received on a fresh copy gives the same
        replay = tasks.make_env("train")
        replay.reset(seed=seed)
        assert result.total_reward == sum(replay.step(action)[1] for action in result.env.transcript.actions)
        fields = course_verl.output_fields(result)
        assert len(fields["response_logprobs"]) == len(fields["response_ids"])
        assert all(p == 0.0 for p, m in zip(fields["response_logprobs"], fields["response_mask"], strict=True) if not m)
        observations = sum(1 for k in range(result.num_turns) if any(
            turn == k and not m for turn, m in zip(result.turn_ids, result.loss_mask, strict=True)))  # fmt: skip
        assert fields["num_turns"] == 1 + len(fields["extra_fields"]["action_spans"]) + observations
        extra = fields["extra_fields"]
        assert extra["success"] == result.success and extra["anchors"] == result.anchors
    assert any(r.success for r in results) and any("tool_result" in i for r in results for i in r.infos)


def test_malformed_actions_get_feedback_not_a_crash():
    tasks = course_verl.chapter_tasks("00")
    _, tokenizer = base(tasks.base)
    turns = iter(
        [
            [tokenizer.unk_token_id, tokenizer.unk_token_id],  # ends early without a stop tag: sent as it is
            encode(tokenizer, "<tool_call> 1 + </answer>"),
            encode(tokenizer, "<answer> </answer> 7 7"),  # tokens after the stop tag are dropped
        ]
    )

    async def generate(prompt_ids, params):
        return next(turns), None  # a server that returns no log-probs

    engine = course_verl.episode_engine(generate, tokenizer, tasks.sampling)
    result = asyncio.run(engine.play_episode(tasks.make_env("train"), 3))
    penalty = tasks.make_env("train").invalid_penalty
    assert result.env.transcript.actions == ["<unk> <unk>", "<tool_call> 1 + </answer>", "<answer> </answer>"]
    assert [info["valid"] for info in result.infos] == [False, False, False]
    assert result.rewards == [penalty] * 3 and result.total_reward == pytest.approx(3 * penalty)
    assert result.truncated and not result.terminated and not result.cut  # the env's turn limit ended it
    assert engine.logprobs_missing and course_verl.output_fields(result, engine)["response_logprobs"] is None
    tokens = list(zip(result.token_ids, result.loss_mask, result.turn_ids, strict=True))
    feedback = [decode(tokenizer, [i for i, m, k in tokens if m == 0 and k == step]) for step in (0, 1)]
    assert feedback == [result.env.transcript.observations[1], result.env.transcript.observations[2]]
    assert all(text.startswith("<feedback>") for text in feedback)
    ids, mask = expected_tokens(result, tokenizer)
    assert ids == result.token_ids and mask == result.loss_mask

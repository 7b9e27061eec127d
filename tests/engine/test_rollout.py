"""KV-cached decoding and multi-turn rollouts: exact logits, exact token bookkeeping, branching."""

from __future__ import annotations

import pytest
import torch

from course_lib import envs
from course_lib.engine.bookkeeping import alignment_errors
from course_lib.engine.kv_decoder import KVDecoder
from course_lib.engine.rollout import RolloutEngine, SamplingConfig, collate
from course_lib.models import add_lora, token_logprobs
from course_lib.tokenizer import encode


def rollout(model, tokenizer, n=8, seed=0, **sampling):
    engine = RolloutEngine(model, tokenizer, SamplingConfig(**sampling))
    trajectories = engine.rollout(
        [envs.make("tool_arithmetic") for _ in range(n)], [s // 2 for s in range(n)], [s // 2 for s in range(n)],
        generator=torch.Generator().manual_seed(seed),
    )  # fmt: skip
    return engine, trajectories


def rebuild(trajectory, tokenizer) -> tuple[list[int], list[int]]:
    """Token ids and loss mask from the environment's transcript alone: prompt and observations are
    encoded with mask 0, actions with mask 1; a final observation is absent once the env is done."""
    transcript = trajectory.env.transcript
    ids = [tokenizer.bos_token_id, *encode(tokenizer, transcript.observations[0])]
    mask = [0] * len(ids)
    for step, action in enumerate(transcript.actions):
        ids += encode(tokenizer, action)
        mask += [1] * (len(ids) - len(mask))
        if not (step == len(transcript.actions) - 1 and trajectory.env.done):
            ids += encode(tokenizer, transcript.observations[step + 1])
            mask += [0] * (len(ids) - len(mask))
    return ids, mask


def randomise_lora(model) -> None:
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.5)


@pytest.mark.parametrize("lora", [False, True])
def test_kv_decoder_matches_full_forward(make_model, lora):
    """Left-padded prefill plus decode steps (with rows dropped midway) give the logits of the model's
    own forward pass over each unpadded sequence."""
    model = make_model(num_hidden_layers=2, num_key_value_heads=1)  # grouped-query attention too
    if lora:
        model = add_lora(model, rank=4)
        randomise_lora(model)
    model.eval()
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randint(4, 2000, (n,), generator=gen).tolist() for n in (3, 7, 5)]
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    decoder = KVDecoder(model, len(rows), width + 12)

    def check(logits, live):
        with torch.no_grad():
            for out, index in zip(logits, live):
                expected = model(torch.tensor([rows[index]])).logits[0, -1]
                assert (out - expected).abs().max() < 1e-4

    live = [0, 1, 2]
    check(decoder.prefill(ids, mask), live)
    for step in range(6):
        if step == 3:
            live = [2, 0]
            decoder.keep(torch.tensor([2, 0]))
        # Steps 1 and 4 append three tokens per row at once (an observation fed in one go).
        new = torch.randint(4, 2000, (len(live), 3) if step in (1, 4) else (len(live),), generator=gen)
        for index, tokens in zip(live, new.tolist()):
            rows[index].extend(tokens if isinstance(tokens, list) else [tokens])
        check(decoder.step(new), live)


def test_shared_prefixes_are_prefilled_once(warm_model, tokenizer, monkeypatch):
    """A group's identical prompts go through the model once; every copy then decodes exactly as if
    it had been prefilled on its own (old log-probs equal a fresh forward of each sequence)."""
    prefilled = []
    original = KVDecoder.prefill

    def spy(self, input_ids, attention_mask):
        prefilled.append(input_ids.shape[0])
        return original(self, input_ids, attention_mask)

    monkeypatch.setattr(KVDecoder, "prefill", spy)
    _, trajectories = rollout(warm_model, tokenizer, n=8)  # 4 prompts, 2 samples each
    assert prefilled == [4]
    batch = collate(trajectories, tokenizer.pad_token_id)
    with torch.no_grad():
        fresh, _ = token_logprobs(warm_model, batch.input_ids, batch.attention_mask)
    on = batch.loss_mask.bool()
    assert (fresh[on] - batch.old_logprobs[on]).abs().max() < 1e-4


@pytest.mark.parametrize("which", ["make_model", "warm_model"])
def test_loss_mask_is_exactly_the_policy_tokens(which, request, tokenizer):
    """Ids and mask equal those rebuilt from the env transcript; old log-probs equal a fresh forward."""
    model = request.getfixturevalue(which)
    model = model() if which == "make_model" else model
    _, trajectories = rollout(model, tokenizer, n=8)
    for t in trajectories:
        assert t.env.done and alignment_errors(t, tokenizer) == []
        assert (t.token_ids, t.loss_mask) == rebuild(t, tokenizer)
        assert len(t.logprobs) == len(t.entropies) == len(t.turn_ids) == len(t.token_ids)
        assert all(lp == 0.0 for lp, m in zip(t.logprobs, t.loss_mask) if not m)
    if which == "warm_model":  # the warm model really exercises tool observations
        assert any("tool_result" in info for t in trajectories for info in t.infos)
    batch = collate(trajectories, tokenizer.pad_token_id)
    with torch.no_grad():
        fresh, _ = token_logprobs(model, batch.input_ids, batch.attention_mask)
    on = batch.loss_mask.bool()
    assert (fresh[on] - batch.old_logprobs[on]).abs().max() < 1e-4


def test_collate_shapes_and_padding(warm_model, tokenizer):
    """Right padding with pad id, zero masks and -1 turns; rewards and groups per sequence."""
    _, trajectories = rollout(warm_model, tokenizer, n=6)
    batch = collate(trajectories, tokenizer.pad_token_id)
    lengths = [len(t.token_ids) for t in trajectories]
    assert batch.input_ids.shape == (6, max(lengths)) and min(lengths) < max(lengths)
    for row, (t, n) in enumerate(zip(trajectories, lengths)):
        assert batch.input_ids[row, :n].tolist() == t.token_ids
        assert (batch.input_ids[row, n:] == tokenizer.pad_token_id).all()
        assert batch.attention_mask[row].tolist() == [1] * n + [0] * (max(lengths) - n)
        assert batch.loss_mask[row, :n].tolist() == t.loss_mask and (batch.loss_mask[row, n:] == 0).all()
        assert (batch.turn_ids[row, n:] == -1).all()
    assert batch.rewards.tolist() == pytest.approx([t.total_reward for t in trajectories])
    assert batch.group_ids.tolist() == [0, 0, 1, 1, 2, 2]
    assert batch.loss_mask.dtype == torch.float and batch.input_ids.dtype == torch.long


def test_branching_shares_the_parent_prefix(warm_model, tokenizer):
    """Branch children copy the parent's tokens up to branch_position exactly and continue correctly."""
    engine, trajectories = rollout(warm_model, tokenizer, n=8, snapshot_envs=True)
    parent_index = max(range(8), key=lambda i: trajectories[i].num_turns)
    parent = trajectories[parent_index]
    assert parent.num_turns >= 2
    children = engine.branch(parent, 1, 3, parent=parent_index, generator=torch.Generator().manual_seed(1))
    cut = parent.prefix_length(1)
    assert cut > parent.prefix_length(0)
    for child in children:
        assert child.parent == parent_index and child.branch_position == cut
        assert child.token_ids[:cut] == parent.token_ids[:cut] and child.loss_mask[:cut] == parent.loss_mask[:cut]
        assert child.env is not parent.env and child.env.done
        assert alignment_errors(child, tokenizer) == []
        assert (child.token_ids, child.loss_mask) == rebuild(child, tokenizer)
    assert len(parent.env.transcript.actions) == parent.num_turns  # the parent's env is untouched
    with pytest.raises(RuntimeError):
        RolloutEngine(warm_model, tokenizer).branch(parent, 0, 1)


def test_rollouts_are_deterministic(make_model, warm_model, tokenizer):
    """Same generator seed, same tokens; another seed differs; greedy decoding ignores the seed."""
    model = make_model()
    ids = [[t.token_ids for t in rollout(model, tokenizer, seed=s)[1]] for s in (5, 5, 6)]
    assert ids[0] == ids[1] != ids[2]
    greedy = [[t.token_ids for t in rollout(warm_model, tokenizer, seed=s, temperature=0.0)[1]] for s in (1, 2)]
    assert greedy[0] == greedy[1]


def test_alignment_of_length_truncated_trajectories(make_model, tokenizer):
    """Cutting a sequence at max_total_tokens does not make its exact bookkeeping look wrong."""
    _, trajectories = rollout(make_model(), tokenizer, n=4, max_total_tokens=30)
    assert all(t.truncated and not t.env.done for t in trajectories)
    assert [alignment_errors(t, tokenizer) for t in trajectories] == [[]] * 4


def test_branch_after_the_end_of_an_episode_is_refused(make_model, tokenizer):
    """Branching after the final step of a finished episode is a ValueError, like any invalid position."""
    engine, trajectories = rollout(make_model(), tokenizer, n=2, snapshot_envs=True)
    parent = trajectories[0]
    assert parent.truncated and parent.env.done and parent.num_turns == 3
    with pytest.raises(ValueError):
        engine.branch(parent, parent.num_turns, 1)


# SamplingConfig validates on construction ----------------------------------------------------------------
@pytest.mark.parametrize(
    "fields, named",
    [
        ({"max_turn_tokens": 0}, "max_turn_tokens must be an int >= 1"),
        ({"max_turn_tokens": -4}, "max_turn_tokens must be an int >= 1"),
        ({"max_total_tokens": 0}, "max_total_tokens must be an int >= 1"),
        ({"max_total_tokens": 40.0}, "max_total_tokens must be an int >= 1"),
        ({"temperature": -0.5}, "temperature must be > 0 (sampling) or 0 (greedy decoding)"),
        ({"temperature": float("nan")}, "temperature must be a finite number"),
        ({"temperature": "1.0"}, "temperature must be a finite number"),
        ({"stop_tags": "</answer>"}, "stop_tags must be a tuple of non-empty strings"),
        ({"stop_tags": ("</answer>", "")}, "stop_tags must be a tuple of non-empty strings"),
        ({"stop_tags": ()}, "stop_tags is empty, so a turn would end only at max_turn_tokens"),
        ({"stop_tags": (), "end_at_eos": False}, "stop_tags is empty"),
        ({"end_at_eos": "yes"}, "end_at_eos must be None, True or False"),
        ({"prompt_format": "chatml"}, "prompt_format must be one of ['chat', 'plain'], got 'chatml'"),
    ],
)
def test_sampling_config_refuses_what_cannot_run(fields, named):
    with pytest.raises(ValueError) as err:
        SamplingConfig(**fields)
    assert f"SamplingConfig.{named}" in str(err.value)


def test_sampling_config_validates_replacements_too():
    import dataclasses

    config = SamplingConfig(max_turn_tokens=8, max_total_tokens=40)
    with pytest.raises(ValueError, match="max_total_tokens"):
        dataclasses.replace(config, max_total_tokens=-1)


def test_sampling_config_accepts_every_setting_the_course_uses():
    from course_lib.engine.prompt_format import FORMATS, ChatFormat

    SamplingConfig()  # the defaults
    greedy = SamplingConfig(temperature=0.0, max_turn_tokens=1, max_total_tokens=1, stop_tags=("</answer>",))
    assert greedy.temperature == 0.0 and greedy.stop_tags == ("</answer>",)
    assert SamplingConfig(stop_tags=(), end_at_eos=True).stop_tags == ()  # a chat model's turns end at EOS
    for name in FORMATS:
        assert SamplingConfig(prompt_format=name, end_at_eos=True).prompt_format == name
    assert isinstance(SamplingConfig(prompt_format=ChatFormat()).prompt_format, ChatFormat)  # an object, as is


def test_a_first_observation_over_the_budget_is_said_at_run_time_and_by_check_env(warm_model, tokenizer):
    """Issue 58: an observation longer than the sequence budget ended every episode after one policy token, with
    reward 0 and no line printed. The engine now warns, naming the environment, seed and sizes; `check_env` checks
    it when given the budget."""
    from course_lib.envs.check import check_env

    env = envs.make("tool_arithmetic")
    prompt = len(env.reset(seed=0)[0].split()) + 1  # words plus BOS: the word-level tokenizer's count
    engine = RolloutEngine(warm_model, tokenizer, SamplingConfig(max_turn_tokens=4, max_total_tokens=prompt))
    with pytest.warns(RuntimeWarning, match=f"seed 0\\) is {prompt} tokens, at or over sampling.max_total_tokens"):
        [trajectory] = engine.rollout([env], [0])
    assert sum(trajectory.loss_mask) == 1 and trajectory.total_reward <= 0  # what the warning says happens
    report = check_env(lambda: envs.make("tool_arithmetic"), max_observation_tokens=prompt, raise_on_failure=False)
    assert set(report.failed) == {"budget"} and "would end after one policy token" in report.failed["budget"]
    assert "budget" in check_env(lambda: envs.make("tool_arithmetic"), max_observation_tokens=prompt + 20).passed

"""`server_engine.ServerEngine` (the engine verl's agent loop, its tree worker and step mode play through) on a BPE
stand-in: the turn rule is `rollout.advance`, the one `RolloutEngine` applies token by token, so a server that
answers each turn with what the course's engine sampled gives back the same episode token for token, with stop tags
matched as strings (a BPE tokenizer splits them into pieces) and EOS ending a chat model's turn."""

from __future__ import annotations

import asyncio

import pytest
import torch

from course_lib.chapters import ch00_tool_agent as ch00
from course_lib.course import standins
from course_lib.engine.bookkeeping import alignment_errors
from course_lib.engine.prompt_format import ChatFormat
from course_lib.engine.rollout import RolloutEngine, SamplingConfig
from course_lib.engine.server_engine import ServerEngine
from course_lib.integrations import course_verl
from course_lib.tokenizer import decode, encode

STOPS = ("</tool_call>", "</answer>")


@pytest.fixture(scope="module")
def tokenizer():
    return standins.default_tokenizer()


def replay_server(trajectory, overshoot: list[int], calls: list):
    """Answers each turn with the tokens the course's engine sampled there, then `overshoot` (as a server that did
    not stop at a multi-token tag would), which the engine must drop."""
    ids, mask = trajectory.token_ids, trajectory.loss_mask
    logprobs, entropies = trajectory.logprobs, trajectory.entropies

    async def generate(prompt_ids, params):
        calls.append(params)
        start = len(prompt_ids)
        assert prompt_ids == ids[:start], "the engine must feed back exactly the sequence so far"
        end = start
        while end < len(ids) and mask[end] == 1:
            end += 1
        turn = ids[start:end] + overshoot
        return turn, logprobs[start:end] + [-1.0] * len(overshoot), entropies[start:end] + [0.5] * len(overshoot)

    return generate


def test_a_bpe_standin_plays_the_same_episodes_through_the_server_engine(tokenizer):
    """Random-init qwen2 on chapter 00 in the chat template: 12 episodes at each of two caps (200 tokens: they end;
    100: the cap cuts them) sampled by `RolloutEngine`, each replayed
    through `ServerEngine` and through verl's `play_episode`: the same ids, mask, log-probs, entropies, turns,
    rewards, anchors and ends; the server is asked to stop at the tags as strings and at EOS."""
    model = standins.build_standin_model("qwen2", tokenizer, seed=1)
    overshoot = encode(tokenizer, " 7 </answer> 8")
    cuts = set()
    for cap in (200, 100):  # episodes that end (the environment's turn limit), then sequences the cap cuts
        config = SamplingConfig(max_turn_tokens=12, max_total_tokens=cap, prompt_format="chat", stop_tags=STOPS)
        seeds = list(range(12))
        trajectories = RolloutEngine(model, tokenizer, config).rollout(
            [ch00.make_env("train") for _ in seeds], seeds, generator=torch.Generator().manual_seed(0)
        )
        for t in trajectories:
            calls = []
            server = ServerEngine(replay_server(t, overshoot, calls), tokenizer, config)
            [again] = server.rollout([ch00.make_env("train")], [t.seed])
            assert again.token_ids == t.token_ids and again.loss_mask == t.loss_mask and again.turn_ids == t.turn_ids
            assert again.logprobs == t.logprobs and again.entropies == t.entropies
            assert (again.rewards, again.anchors, again.infos) == (t.rewards, t.anchors, t.infos)
            assert (again.terminated, again.truncated, again.cut) == (t.terminated, t.truncated, t.cut)
            assert alignment_errors(again, tokenizer, ChatFormat()) == []
            assert all(
                call["stop"] == list(STOPS) and tokenizer.eos_token_id in call["stop_token_ids"] for call in calls
            )
            cuts.add(t.cut)

            three_values = replay_server(t, overshoot, [])

            async def two_values(prompt_ids, params, generate=three_values):  # verl's server: no entropies
                ids, logprobs, _ = await generate(prompt_ids, params)
                return ids, logprobs

            episode = asyncio.run(
                course_verl.play_episode(ch00.make_env("train"), t.seed, tokenizer, two_values, config)
            )
            assert (episode.token_ids, episode.loss_mask, episode.rewards) == (t.token_ids, t.loss_mask, t.rewards)
    assert cuts == {False, True}


def test_a_tag_split_into_pieces_ends_the_turn_where_the_string_ends(tokenizer):
    """One server answer holds a tool call, then more text: the engine keeps the turn up to the token that completes
    `</tool_call>`, the environment receives exactly that text, and the next turn is asked for again."""
    call = encode(tokenizer, "<tool_call> 12 + 30 </tool_call>")
    answer = encode(tokenizer, "<answer> 42 </answer>")
    assert len(encode(tokenizer, "</tool_call>")) > 1, "the point: the tag is several tokens"
    answers = iter([call + encode(tokenizer, " then"), answer + encode(tokenizer, " more")])

    async def generate(prompt_ids, params):
        ids = next(answers)
        return ids, [0.0] * len(ids), None

    config = SamplingConfig(max_turn_tokens=64, max_total_tokens=200, prompt_format="chat", stop_tags=STOPS)
    env = ch00.make_env("test")
    [t] = ServerEngine(generate, tokenizer, config).rollout([env], [0])
    assert env.transcript.actions == [decode(tokenizer, call), decode(tokenizer, answer)]
    assert t.terminated and t.num_turns == 2 and alignment_errors(t, tokenizer, ChatFormat()) == []
    assert t.infos[0].get("tool_result") is not None, "the first turn was a complete tool call"

"""`CourseEnvAgentLoop` inside verl (run in `.venv-verl` by `make test-verl`; the main test run never collects it).

The loop is built the way verl's agent-loop workers build it (hydra, from the yaml of `agent_loop_config_text`),
fed rows that verl's own `RLHFDataset` read from the parquet export, and served by a fake `server_manager` that
samples the chapter-00 base with torch and answers with verl's `TokenOutput`. What verl itself does next with the
output (pydantic validation, `as_dict`, the worker's padding into fixed-width tensors) runs on it too. No inference
server and no GPU: verl cannot train on a CPU, but everything up to the server call runs here.
"""

from __future__ import annotations

import asyncio

import hydra
import pytest
import torch
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopOutput,
    AgentLoopWorker,
    DictConfigWrap,
    ToolListWrap,
    _agent_loop_registry,
)
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.workers.rollout.replica import TokenOutput

from course_lib import data
from course_lib.engine.bookkeeping import expected_tokens
from course_lib.engine.rollout import Trajectory
from course_lib.integrations import course_verl
from course_lib.integrations.course_verl import CourseEnvAgentLoop
from course_lib.tokenizer import decode, encode

PROMPT_LENGTH, RESPONSE_LENGTH = 16, 48


@pytest.fixture(scope="module")
def base():
    model, tokenizer = data.load_base("ch00_base", "cpu")
    return model.eval(), tokenizer


class SamplingServer:
    """Stands in for verl's `LLMServerClient`: samples the model token by token, stopping at `stop_token_ids` or
    `max_tokens` as vLLM does, and records every call."""

    def __init__(self, model, seed: int = 0, script: list[list[int]] | None = None):
        self.model, self.generator, self.calls, self.script = model, torch.Generator().manual_seed(seed), [], script

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        self.calls.append((request_id, list(prompt_ids), dict(sampling_params)))
        if self.script is not None:
            return TokenOutput(token_ids=self.script.pop(0), log_probs=None, stop_reason="completed")
        ids, new, logprobs = list(prompt_ids), [], []
        with torch.no_grad():
            while len(new) < sampling_params["max_tokens"]:
                logits = self.model(torch.tensor([ids])).logits[0, -1].float()
                log_probs = torch.log_softmax(logits / sampling_params["temperature"], dim=-1)
                token = int(torch.multinomial(log_probs.exp(), 1, generator=self.generator))
                ids.append(token)
                new.append(token)
                logprobs.append(float(log_probs[token]))
                if token in sampling_params["stop_token_ids"]:
                    break
        return TokenOutput(token_ids=new, log_probs=logprobs, stop_reason="completed")


def trainer_config(response_length: int = RESPONSE_LENGTH, prompt_length: int = PROMPT_LENGTH):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {"prompt_length": prompt_length, "response_length": response_length},
            },
            "data": {"apply_chat_template_kwargs": {}, "mm_processor_kwargs": {}},
        }
    )


def build_loop(tokenizer, server, tmp_path, response_length: int = RESPONSE_LENGTH, prompt_length: int = PROMPT_LENGTH):
    """The loop as `AgentLoopWorker._run_agent_loop` builds it: hydra, from the agent-loop yaml's entry."""
    path = course_verl.write_agent_loop_config(tmp_path / "agent_loops.yaml")
    (entry,) = OmegaConf.load(path)
    assert entry.name == course_verl.AGENT_NAME
    config = trainer_config(response_length, prompt_length)
    return hydra.utils.instantiate(
        config={"_target_": entry._target_},
        trainer_config=DictConfigWrap(config=config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="llama",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap([]),
    )


def dataset_rows(tokenizer, tmp_path, split: str = "train", count: int = 12) -> list[dict]:
    """Rows as the agent loop receives them: `RLHFDataset` items of the export, collated, `agent_name` taken out."""
    path = course_verl.export_parquet("00", split, tmp_path, count=count)
    config = OmegaConf.create(
        {"max_prompt_length": PROMPT_LENGTH, "filter_overlong_prompts": False, "cache_dir": str(tmp_path / "cache")}
    )
    dataset = RLHFDataset(str(path), tokenizer, config)
    batch = collate_fn([dataset[i] for i in range(len(dataset))])
    rows = [{key: value[i] for key, value in batch.items() if not torch.is_tensor(value)} for i in range(count)]
    assert all(row.pop("agent_name") == course_verl.AGENT_NAME for row in rows)
    return rows


def rebuilt(output: AgentLoopOutput, row: dict, tokenizer) -> tuple[list[int], list[int], float]:
    """Token ids, mask and total reward rebuilt independently: the actions the loop sent, replayed on a fresh
    environment of the row, then `bookkeeping.expected_tokens` on the resulting transcript."""
    info = row["extra_info"]
    tasks = course_verl.chapter_tasks(info["chapter"])
    env = tasks.make_env(info["split"])
    env.reset(seed=int(info["seed"]))
    extra = output.extra_fields
    total = 0.0
    for start, end in extra["action_spans"][: extra["env_steps"]]:
        total += env.step(decode(tokenizer, output.response_ids[start:end]))[1]
    prompt = len(output.prompt_ids)
    trajectory = Trajectory(
        env=env,
        token_ids=[*output.prompt_ids, *output.response_ids],
        loss_mask=[0] * prompt + output.response_mask,
        logprobs=[],
        entropies=[],
        turn_ids=[-1] * prompt + extra["turn_ids"],
        cut=extra["cut"],
    )
    ids, mask = expected_tokens(trajectory, tokenizer)
    return ids, mask, total


def test_the_loop_is_a_registered_verl_agent_loop():
    assert issubclass(CourseEnvAgentLoop, AgentLoopBase)
    assert _agent_loop_registry[course_verl.AGENT_NAME] == {"_target_": course_verl.AGENT_LOOP_TARGET}


def test_episodes_from_the_dataset_rows(base, tmp_path):
    model, tokenizer = base
    server = SamplingServer(model)
    loop = build_loop(tokenizer, server, tmp_path)
    assert isinstance(loop, CourseEnvAgentLoop)
    worker = bare_worker(tokenizer)
    sampling_params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}
    outputs = []
    for row in dataset_rows(tokenizer, tmp_path):
        calls_before = len(server.calls)
        output = asyncio.run(loop.run(dict(sampling_params), **row))
        outputs.append(output)
        assert isinstance(output, AgentLoopOutput)
        AgentLoopOutput.model_validate(output.model_dump())  # pydantic accepts what the loop built
        # the prompt is [bos] + the reset observation, the same text as the row's chat message
        assert output.prompt_ids == [tokenizer.bos_token_id, *encode(tokenizer, row["raw_prompt"][0]["content"])]
        assert len(output.response_ids) == len(output.response_mask) == len(output.response_logprobs)
        assert len(output.prompt_ids) + len(output.response_ids) <= row["extra_info"]["max_total_tokens"]
        ids, mask, total = rebuilt(output, row, tokenizer)
        assert ids == [*output.prompt_ids, *output.response_ids]
        assert mask == [0] * len(output.prompt_ids) + output.response_mask
        assert output.reward_score == pytest.approx(total)
        assert all(p == 0.0 for p, m in zip(output.response_logprobs, output.response_mask, strict=True) if m == 0)
        calls = server.calls[calls_before:]
        assert len({request_id for request_id, _, _ in calls}) == 1  # one sticky id per episode
        assert all(params["max_tokens"] <= 8 and params["ignore_eos"] for _, _, params in calls)
        # what verl does with it next: tensors (the reward on the last token) and fixed-width padding
        tensors = output.as_dict()
        assert float(tensors["rm_scores"][-1]) == pytest.approx(output.reward_score)
        assert torch.equal(tensors["response_mask"], torch.tensor(output.response_mask))
        padded = asyncio.run(worker._agent_loop_postprocess(output, validate=False, **row))
        assert padded.input_ids.shape == (1, PROMPT_LENGTH + RESPONSE_LENGTH)
        assert padded.response_mask[0, : len(output.response_mask)].tolist() == output.response_mask
        assert padded.response_mask[0, len(output.response_mask) :].sum() == 0
    stop_ids = sorted(tokenizer.convert_tokens_to_ids(["</tool_call>", "</answer>"]))
    assert all(params["stop_token_ids"] == stop_ids for _, _, params in server.calls)
    assert any(0 in o.response_mask for o in outputs)  # some episodes called the tool: observations masked out
    assert any(o.extra_fields["success"] for o in outputs)


def bare_worker(tokenizer) -> AgentLoopWorker:
    """An `AgentLoopWorker` without its ray and server setup, for its per-sample post-processing only."""
    worker = AgentLoopWorker.__new__(AgentLoopWorker)
    worker.rollout_config = trainer_config().actor_rollout_ref.rollout
    worker.tokenizer, worker.processor = tokenizer, None
    worker.reward_loop_worker_handles, worker.distillation_enabled, worker.mm_processor_kwargs = None, False, {}
    return worker


def test_malformed_actions_and_the_response_cap(base, tmp_path):
    _, tokenizer = base
    (row,) = dataset_rows(tokenizer, tmp_path, split="test", count=1)
    unk = tokenizer.unk_token_id
    loop = build_loop(tokenizer, SamplingServer(None, script=[[unk, unk]] * 3), tmp_path)
    output = asyncio.run(loop.run({"temperature": 1.0}, **row))
    assert output.extra_fields["step_valid"] == [False, False, False]
    assert output.reward_score == pytest.approx(-0.3) and output.response_logprobs is None
    assert output.num_turns == 1 + 3 + 2  # the prompt, three actions, two feedback observations
    # a response_length shorter than the chapter's cap: the sequence is cut to fit verl's tensors
    short = build_loop(tokenizer, SamplingServer(None, script=[[unk, unk]] * 3), tmp_path, response_length=5)
    output = asyncio.run(short.run({"temperature": 1.0}, **row))
    assert len(output.response_ids) == 5 and output.extra_fields["cut"]
    # a prompt longer than rollout.prompt_length is refused rather than cut
    server = SamplingServer(None, script=[[unk]])
    narrow = build_loop(tokenizer, server, tmp_path, prompt_length=3)
    with pytest.raises(ValueError, match="exceeds the 3 allowed"):
        asyncio.run(narrow.run({"temperature": 1.0}, **row))
    assert server.calls == []

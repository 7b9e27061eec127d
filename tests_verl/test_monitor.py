"""Chapter 12's MI monitor on verl (run in `.venv-verl`): the installed wrapper measures the capstone's MI in verl's
layout, rolls back to a checkpoint, and is inert without its config."""

from __future__ import annotations

import asyncio
import warnings
from types import SimpleNamespace

import pytest
import torch
from methods_helpers import (
    ReplayServer,
    chapter_rows,
    to_dataproto,
    worker,
)
from omegaconf import OmegaConf
from test_agent_loop import build_loop, trainer_config
from verl.trainer.ppo import ray_trainer
from verl.workers.rollout.replica import TokenOutput

from course_lib.engine.rollout import RolloutEngine, pad_id
from course_lib.integrations import course_verl

pytestmark = pytest.mark.usefixtures("patched")


# The MI monitor -------------------------------------------------------------------------------------------------
MONITOR_CHAPTER = "08"
"""Chapter 12's task (`Chapter12Config.task` is chapter 08's), whose training questions its monitor plays."""


def test_first_action_mi_in_verl_layout_matches_chapter_12(ch08, tmp_path):
    """Chapter 12's monitor MI (`first_action_mi`: every first action scored under every prompt) against the same
    measurement on verl's data, on chapter 12's task (chapter 08's): first actions read from the agent loop's batch,
    the pairs laid out as verl's actor reads them (left-padded prompts, position ids from the mask), log-probs by
    verl's `logprobs_from_logits`."""
    from verl.utils.torch_functional import logprobs_from_logits

    from course_lib.integrations import verl_monitor
    from course_lib.tasks import two_hop_search

    model, tokenizer = ch08
    tasks = course_verl.chapter_tasks(MONITOR_CHAPTER)
    engine = RolloutEngine(model, tokenizer, tasks.sampling)
    count = 6
    trajectories = engine.rollout(
        [tasks.make_env("train") for _ in range(count)], list(range(count)), None, torch.Generator().manual_seed(7)
    )
    rows = chapter_rows(tokenizer, tmp_path, MONITOR_CHAPTER, count)
    lengths = course_verl.sequence_lengths(MONITOR_CHAPTER)
    outputs = [
        asyncio.run(
            build_loop(tokenizer, ReplayServer(t), tmp_path, lengths[1], lengths[0]).run(
                {"temperature": 1.0}, **rows[t.seed]
            )
        )
        for t in trajectories
    ]
    batch = to_dataproto(worker(tokenizer, *lengths), outputs, [str(k) for k in range(count)])
    course = two_hop_search.first_action_mi(model, tokenizer, trajectories, count, seed=0)
    width = batch.batch["prompts"].shape[1]
    prompts, actions = verl_monitor.first_actions(
        batch.batch["prompts"], batch.batch["attention_mask"][:, :width], batch.batch["responses"],
        batch.non_tensor_batch["action_spans"],
    )  # fmt: skip
    assert len(actions) == count

    def score(pairs):  # what the actor's compute_log_prob computes, with the torch model
        with torch.no_grad():
            logits = model(
                input_ids=pairs["input_ids"], attention_mask=pairs["attention_mask"],
                position_ids=pairs["position_ids"],
            ).logits  # fmt: skip
        response = pairs["responses"].shape[1]
        return logprobs_from_logits(logits[:, -response - 1 : -1].float(), pairs["responses"])

    verl_mi = verl_monitor.first_action_mi(prompts, actions, score, pad_id(tokenizer))
    from course_lib.diagnostics import teacher_forced_logp

    course_logp = teacher_forced_logp(model, prompts, actions)
    logp_difference = (verl_mi["logp"] - course_logp).abs().max().item()
    mi_difference = abs(verl_mi["mi"] - course["mi"])
    print(f"monitor MI: course {course['mi']:.6f}, verl layout {verl_mi['mi']:.6f}; largest differences: "
          f"MI {mi_difference:.3g}, logp {logp_difference:.3g}")  # fmt: skip
    assert mi_difference <= 1e-5 and logp_difference <= 1e-5 and course["mi"] > 0.01


class MonitorActor:
    """`actor_rollout_wg` with its `compute_log_prob` computed by the torch model, as verl's actor receives and
    returns it: a no-padding `TensorDict` (nested `input_ids`, `position_ids`) in, nested per-token log-probs out,
    each at the position whose logit predicts the next token; `dp` data-parallel ranks (the trainer pads to them)."""

    def __init__(self, model, dp: int, events: list):
        self.model, self._dispatch_info, self.calls, self.events = model, {"actor": list(range(dp))}, [], events

    def compute_log_prob(self, data):
        from verl.utils import tensordict_utils as tu
        from verl.utils.torch_functional import logprobs_from_logits

        self.events.append("score")
        self.calls.append({"temperature": tu.get(data, "temperature"), "rows": len(data["input_ids"].unbind())})
        logprobs, entropies = [], []
        for ids, positions in zip(data["input_ids"].unbind(), data["position_ids"].unbind(), strict=True):
            with torch.no_grad():
                logits = self.model(input_ids=ids[None], position_ids=positions[None]).logits[0].float()
            logprobs.append(logprobs_from_logits(logits, torch.roll(ids, -1)))
            entropies.append(-(logits.softmax(-1) * logits.log_softmax(-1)).sum(-1))
        nested = lambda rows: torch.nested.as_nested_tensor(rows, layout=torch.jagged)  # noqa: E731
        return tu.get_tensordict(
            {"log_probs": nested(logprobs), "entropy": nested(entropies)}, non_tensor_dict={"metrics": {"mfu": 0.0}}
        )


class PrefixReplayServer:
    """verl's server interface answering each turn with the course's tokens at that context (one queue per context)."""

    def __init__(self, trajectories):
        self.queues: dict[tuple, list] = {}
        for t in trajectories:
            for turn in sorted({turn for turn in t.turn_ids if turn >= 0}):
                at = [k for k, (u, m) in enumerate(zip(t.turn_ids, t.loss_mask, strict=True)) if u == turn and m]
                if at:
                    key = tuple(t.token_ids[: at[0]])
                    self.queues.setdefault(key, []).append(([t.token_ids[k] for k in at], [t.logprobs[k] for k in at]))

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        ids, logprobs = self.queues[tuple(prompt_ids)].pop(0)
        return TokenOutput(token_ids=ids, log_probs=logprobs, stop_reason="completed")


MONITOR_RUN_SEED = 11


class CourseRolloutManager:
    """`async_rollout_manager` that plays each batch with the course's engine (`train.evaluate_policy`, the call
    chapter 12's `monitor_mi` makes, on the rows' chapter and seeds, with its own seed) and hands the episodes to
    verl's own `AgentLoopWorker.generate_sequences`, whose server replays them: the course's agent loop, verl's
    padding and batch."""

    def __init__(self, model, tokenizer, events: list):
        self.model, self.tokenizer, self.calls, self.events = model, tokenizer, [], events

    def generate_sequences(self, batch):
        from verl.utils.dataset.rl_dataset import RLHFDataset

        from course_lib.rl.train import evaluate_policy

        self.events.append("generate")
        infos = list(batch.non_tensor_batch["extra_info"])
        self.calls.append([int(info["seed"]) for info in infos])
        tasks = course_verl.chapter_tasks(infos[0]["chapter"])
        _, trajectories = evaluate_policy(
            self.model, self.tokenizer, lambda: tasks.make_env("train"), [int(i["seed"]) for i in infos],
            tasks.sampling, MONITOR_RUN_SEED,
        )  # fmt: skip
        prompt_length, response_length = course_verl.sequence_lengths(infos[0]["chapter"])  # what `launch` sets
        w = worker(self.tokenizer, prompt_length, response_length)
        w.rollout_config = OmegaConf.create(
            {"prompt_length": prompt_length, "response_length": response_length, "temperature": 1.0, "top_p": 1.0,
             "top_k": -1, "calculate_log_probs": True, "val_kwargs": {"temperature": 0, "top_p": 1.0, "top_k": -1},
             "agent": {"default_agent_loop": course_verl.AGENT_NAME}}
        )  # fmt: skip
        w.config = trainer_config(response_length, prompt_length)
        w.llm_client, w.hf_model_type = PrefixReplayServer(trajectories), "llama"
        w.dataset_cls, w.tools = RLHFDataset, []
        out = asyncio.run(w.generate_sequences(batch))
        assert not any(w.llm_client.queues.values())  # every course turn was asked for
        return out


def monitor_trainer(model, tokenizer, tmp_path, **settings):
    """A `RayPPOTrainer` without `__init__` (no Ray, no GPUs): the attributes `_validate`'s wrapper and
    `_compute_old_log_prob` read, the rollout manager and actor group above, and a checkpoint manager that only
    records when it puts the servers to sleep and wakes them (`events`)."""
    trainer = ray_trainer.RayPPOTrainer.__new__(ray_trainer.RayPPOTrainer)
    trainer.config = OmegaConf.create(
        {
            "trainer": {"default_local_dir": str(tmp_path / "ckpt"), "course": {"mi_monitor": settings}},
            "actor_rollout_ref": {"actor": {}, "rollout": {"agent": {"num_workers": 2}}},
        }
    )
    trainer.tokenizer, trainer.global_steps, trainer.total_training_steps = tokenizer, 0, 100
    trainer.events = []
    trainer.actor_rollout_wg = MonitorActor(model, 5, trainer.events)
    trainer.async_rollout_manager = CourseRolloutManager(model, tokenizer, trainer.events)
    trainer.checkpoint_manager = SimpleNamespace(
        sleep_replicas=lambda: trainer.events.append("sleep"),
        update_weights=lambda step: trainer.events.append(f"wake {step}"),
    )
    return trainer


def course_monitor_mi(model, tokenizer, prompts: int) -> float:
    """Chapter 12's `monitor_mi` (`tasks.two_hop_search`, on its `Chapter12Config`'s task, `prompts` monitor
    questions, run seed `MONITOR_RUN_SEED`): chapter 08's environment and sampling, which verl's export of chapter 08
    carries."""
    from course_lib.chapters import ch12_capstone as ch12
    from course_lib.tasks import two_hop_search

    config = ch12.Chapter12Config()
    assert config.task == two_hop_search.preset("cpu")  # the task that `chapter_tasks("08")` exports
    return two_hop_search.monitor_mi(model, tokenizer, config.task, prompts, MONITOR_RUN_SEED)


def test_the_installed_monitor_measures_chapter_12s_mi_and_rolls_back(ch08, tmp_path, monkeypatch):
    """The wrapper `verl_patch.install` puts on `RayPPOTrainer._validate`, on a trainer whose rollout manager and
    actor are the course's (checked with fakes: a real run needs GPUs and a vLLM/SGLang server), with chapter 12's
    monitor on its own task, chapter 08's (`gate_drop`, seeds from `MONITOR_SEED`; 6 of its 32 questions, for
    time). Steps 0 (the base, `val_before_train`), 10 (unchanged weights: passes) and 20 (attention outputs
    zeroed, so each position sees only its own token: the first action stops depending on the question): the MI at
    each step equals chapter 12's `monitor_mi` on the same policy; step 20 stops training, names step 10's
    checkpoint in `mi_stop.json`; the step verl runs after the stop is not measured."""
    import copy
    import json

    from course_lib.chapters import ch12_capstone as ch12
    from course_lib.integrations import verl_monitor
    from course_lib.tasks import two_hop_search

    model, tokenizer = ch08
    model = copy.deepcopy(model)
    prompts = 6
    monkeypatch.setattr(ray_trainer.RayPPOTrainer, "_validate", lambda self: {"val-core/score": 0.5})
    verl_monitor.install_monitor()
    drop = ch12.Chapter12Config().gate_drop
    trainer = monitor_trainer(model, tokenizer, tmp_path, chapter=MONITOR_CHAPTER, prompts=prompts, drop=drop)
    seeds = [two_hop_search.MONITOR_SEED + p for p in range(prompts)]
    measured, expected = [], []
    for step in (0, 10, 20):
        if step == 20:
            with torch.no_grad():
                for layer in model.model.layers:
                    layer.self_attn.o_proj.weight.zero_()
        trainer.global_steps = step
        metrics = trainer._validate()
        assert metrics["val-core/score"] == 0.5
        measured.append(metrics["course/monitor_mi"])
        expected.append(course_monitor_mi(model, tokenizer, prompts))
    assert trainer.async_rollout_manager.calls == [seeds] * 3  # chapter 12's questions, one episode each
    # the servers sleep while the actor scores, and wake (weights synced) before verl's next step generates
    assert trainer.events == [e for step in (0, 10, 20) for e in ("generate", "sleep", "score", f"wake {step}")]
    assert all(call["temperature"] == 1.0 for call in trainer.actor_rollout_wg.calls)
    assert trainer.actor_rollout_wg.calls[0]["rows"] == 40  # 6 x 6 pairs, padded to the 5 data-parallel ranks
    difference = max(abs(a - b) for a, b in zip(measured, expected, strict=True))
    print(f"monitor in _validate: MI {[round(m, 6) for m in measured]}, chapter 12 {[round(e, 6) for e in expected]}; "
          f"largest difference {difference:.3g}")  # fmt: skip
    assert difference <= 1e-5 and measured[0] > 0.05
    assert measured[1] == measured[0] and measured[2] < 0.8 * measured[0]
    assert metrics["course/mi_stop"] == 1.0 and trainer.total_training_steps == 20
    report = json.loads((tmp_path / "ckpt" / "mi_stop.json").read_text())
    assert report["stopped_at"] == 20 and report["remembered"] == 10 and report["base_mi"] == measured[0]
    assert report["rollback"] == str(tmp_path / "ckpt" / "global_step_10")
    assert report["resume_overrides"] == [
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={tmp_path / 'ckpt' / 'global_step_10'}",
        f"+trainer.course.mi_monitor.base_mi={measured[0]!r}",
    ]
    trainer.global_steps = 21  # verl's one more step after the stop
    assert trainer._validate() == {"val-core/score": 0.5, "course/mi_stop": 1.0}
    assert len(trainer.async_rollout_manager.calls) == 3


def test_the_wrapper_is_inert_without_the_monitor_config(ch08, tmp_path, monkeypatch):
    from course_lib.integrations import verl_monitor

    model, tokenizer = ch08
    monkeypatch.setattr(ray_trainer.RayPPOTrainer, "_validate", lambda self: {"val-core/score": 0.25})
    verl_monitor.install_monitor()
    verl_monitor.install_monitor()  # idempotent: one wrapper
    assert ray_trainer.RayPPOTrainer._validate.__wrapped__(None) == {"val-core/score": 0.25}
    trainer = monitor_trainer(model, tokenizer, tmp_path)
    del trainer.config.trainer["course"]
    assert trainer._validate() == {"val-core/score": 0.25} and not trainer.async_rollout_manager.calls
    with pytest.raises(KeyError, match="chapter"):
        monitor_trainer(model, tokenizer, tmp_path, prompts=4)._validate()
    late = monitor_trainer(model, tokenizer, tmp_path, chapter=MONITOR_CHAPTER, prompts=2)
    late.global_steps = 10
    with pytest.warns(UserWarning, match="val_before_train"):  # a base measured after training began
        late._validate()


def test_a_resumed_monitor_keeps_the_base_mi(ch08, tmp_path, monkeypatch):
    """With `base_mi` (what `mi_stop.json`'s resume overrides add), the first measurement is judged against the
    given base instead of becoming it: a base twice the policy's MI stops at once, with no checkpoint to name."""
    import json

    from course_lib.integrations import verl_monitor

    model, tokenizer = ch08
    monkeypatch.setattr(ray_trainer.RayPPOTrainer, "_validate", lambda self: {"val-core/score": 0.5})
    verl_monitor.install_monitor()
    first = monitor_trainer(model, tokenizer, tmp_path / "a", chapter=MONITOR_CHAPTER, prompts=4)
    mi = first._validate()["course/monitor_mi"]
    trainer = monitor_trainer(model, tokenizer, tmp_path / "b", chapter=MONITOR_CHAPTER, prompts=4, base_mi=2 * mi)
    trainer.global_steps = 30  # resumed at step 30: no warning, the base is given
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        metrics = trainer._validate()
    assert metrics["course/monitor_mi"] == mi and metrics["course/mi_stop"] == 1.0
    report = json.loads((tmp_path / "b" / "ckpt" / "mi_stop.json").read_text())
    assert report["base_mi"] == 2 * mi and report["rollback"] is None and report["resume_overrides"] == []

"""The survey's methods inside verl (run in `.venv-verl` by `make test-verl`): each computed on verl's own data path
and compared, value for value, with the course's implementation on the same episodes.

The data path: episodes become `AgentLoopOutput`s (trajectory mode: replayed through `CourseEnvAgentLoop` itself;
step mode: `verl_gigpo.step_rows`), then verl's `_agent_loop_postprocess` pads each one and `_postprocess` stacks
them into the `DataProto` the trainer receives (`non_tensor_batch` holding the `extra_fields` columns). The
advantage goes through the patched `ray_trainer.compute_advantage` and verl's estimator registry; the loss through
verl's policy-loss registry and `agg_loss`. The MI monitor runs as installed, around `RayPPOTrainer._validate`, on a
trainer object whose rollout manager and actor are stand-ins (the course's engine replayed through verl's
`AgentLoopWorker`; the torch model behind `compute_log_prob`): a real run's servers and FSDP actor need GPUs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from test_agent_loop import build_loop, dataset_rows, trainer_config
from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, AgentLoopWorker
from verl.trainer.ppo import core_algos, ray_trainer
from verl.workers.rollout.replica import TokenOutput

from course_lib import data, loop
from course_lib.integrations import verl as course_verl
from course_lib.integrations import verl_gigpo, verl_patch
from course_lib.rollout import RolloutEngine, collate, pad_id
from course_lib.train import FilterConfig, GiGPOConfig, GRPOConfig

PROMPTS, GROUP = 2, 4


@pytest.fixture(scope="module", autouse=True)
def patched():
    verl_patch.install()


@pytest.fixture(scope="module")
def ch00():
    model, tokenizer = data.load_base("ch00_base", "cpu")
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def ch08():
    """Chapter 08's base: ARPO's two-hop search task, the trees' chapter, which chapters 11 (AEPO) and 12 (the MI
    monitor) train on too."""
    model, tokenizer = data.load_base(course_verl.chapter_tasks("08").base, "cpu")
    return model.eval(), tokenizer


def chapter_rows(tokenizer, tmp_path, chapter: str, count: int) -> list[dict]:
    """`dataset_rows` for any chapter: the first `count` rows of its training export, read by `RLHFDataset` with
    the chapter's `data.max_prompt_length` (`sequence_lengths`), collated, `agent_name` taken out."""
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    path = course_verl.export_parquet(chapter, "train", tmp_path, count=count)
    config = OmegaConf.create(
        {"max_prompt_length": course_verl.sequence_lengths(chapter)[0], "filter_overlong_prompts": False,
         "cache_dir": str(tmp_path / "cache")}
    )  # fmt: skip
    dataset = RLHFDataset(str(path), tokenizer, config)
    batch = collate_fn([dataset[i] for i in range(len(dataset))])
    rows = [{key: value[i] for key, value in batch.items() if not torch.is_tensor(value)} for i in range(count)]
    assert all(row.pop("agent_name") == course_verl.AGENT_NAME for row in rows)
    return rows


def worker(tokenizer, prompt_length: int, response_length: int) -> AgentLoopWorker:
    """An `AgentLoopWorker` without ray or servers: its per-sample padding and its batch stacking only."""
    w = AgentLoopWorker.__new__(AgentLoopWorker)
    w.rollout_config = OmegaConf.create({"prompt_length": prompt_length, "response_length": response_length})
    w.tokenizer, w.processor = tokenizer, None
    w.reward_loop_worker_handles, w.distillation_enabled, w.mm_processor_kwargs = None, False, {}
    return w


def to_dataproto(w: AgentLoopWorker, outputs: list[AgentLoopOutput], uids: list[str]):
    """verl's post-processing of agent-loop outputs into the trainer's batch, with the uid the trainer assigns per
    prompt and the token-level rewards it derives from `rm_scores`."""
    padded = [asyncio.run(w._agent_loop_postprocess(o, validate=False, raw_prompt=[])) for o in outputs]
    batch = w._postprocess(padded, input_non_tensor_batch=None)
    batch.non_tensor_batch["uid"] = np.array(uids, dtype=object)
    batch.batch["token_level_rewards"] = batch.batch["rm_scores"]
    return batch


def replay(trajectory):
    """`play_episode`'s `generate` answering each turn with the tokens the course's engine sampled there."""
    ids, mask, logprobs = trajectory.token_ids, trajectory.loss_mask, trajectory.logprobs

    async def generate(prompt_ids, params):
        start = len(prompt_ids)
        assert list(prompt_ids) == ids[:start]
        end = start
        while end < len(ids) and mask[end] == 1:
            end += 1
        return ids[start:end], logprobs[start:end]

    return generate


class ReplayServer:
    """verl's server interface over `replay`, for `CourseEnvAgentLoop` itself."""

    def __init__(self, trajectory):
        self.generate_turn = replay(trajectory)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        ids, logprobs = await self.generate_turn(list(prompt_ids), sampling_params)
        return TokenOutput(token_ids=ids, log_probs=logprobs, stop_reason="completed")


def course_trajectories(model, tokenizer, seed: int = 0):
    """`PROMPTS` x `GROUP` chapter-00 episodes of the course's engine (training seeds 0, 1)."""
    tasks = course_verl.chapter_tasks("00")
    engine = RolloutEngine(model, tokenizer, tasks.sampling)
    envs = [tasks.make_env("train") for _ in range(PROMPTS * GROUP)]
    seeds = [p for p in range(PROMPTS) for _ in range(GROUP)]
    groups = [p for p in range(PROMPTS) for _ in range(GROUP)]
    return engine.rollout(envs, seeds, groups, torch.Generator().manual_seed(seed))


def replayed_batch(model, tokenizer, tmp_path, trajectories):
    """The course's chapter-00 episodes replayed through `CourseEnvAgentLoop` and verl's post-processing."""
    rows = dataset_rows(tokenizer, tmp_path, count=PROMPTS)
    outputs = []
    for t in trajectories:
        agent = build_loop(tokenizer, ReplayServer(t), tmp_path)
        outputs.append(asyncio.run(agent.run({"temperature": 1.0}, **rows[t.seed])))
    return to_dataproto(worker(tokenizer, 16, 48), outputs, [f"uid-{t.group_id}" for t in trajectories])


def response_part(course: torch.Tensor, trajectories, width: int) -> torch.Tensor:
    """The course's `[B, T]` (prompt and response, right-padded) cut to verl's response tensor `[B, width]`."""
    out = torch.zeros(len(trajectories), width, dtype=course.dtype)
    for b, t in enumerate(trajectories):
        prompt = sum(1 for turn in t.turn_ids if turn < 0)
        length = len(t.token_ids) - prompt
        out[b, :length] = course[b, prompt : prompt + length]
    return out


def algorithm_config(estimator: str, **course) -> OmegaConf:
    return OmegaConf.create(
        {"adv_estimator": estimator, "gamma": 0.95, "norm_adv_by_std_in_grpo": True, "course": course}
    )


GIGPO = {"gigpo": {"step_weight": 1.0, "episode_baseline": "pooled", "invalid_penalty": 0.1}}


def course_config(**changes) -> GRPOConfig:
    base = GRPOConfig(
        group_size=GROUP, advantage="gigpo", invalid_penalty=0.1,
        gigpo=GiGPOConfig(gamma=0.95, step_weight=1.0, episode_baseline="pooled"),
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


@pytest.fixture(scope="module")
def ch07():
    from course_lib.chapters import ch07_gigpo

    config = ch07_gigpo.preset("cpu")
    model, tokenizer = data.load_base("ch07_base", "cpu")
    return model.eval(), tokenizer, config, ch07_gigpo.EnvFactory("train", config)


def test_gigpo_trajectory_mode_matches_the_course(ch07):
    """Chapter 07's key_door in trajectory mode (its 40-token cap cuts most episodes: cut actions included), each
    episode replayed through `play_episode`, the agent loop's turn logic, into verl's batch."""
    model, tokenizer, config, make = ch07
    engine = RolloutEngine(model, tokenizer, config.sampling)
    seeds = [p for p in range(PROMPTS) for _ in range(GROUP)]
    envs = [make() for _ in seeds]
    trajectories = engine.rollout(envs, seeds, [s for s in seeds], torch.Generator().manual_seed(2))
    course_adv, stats = loop.gigpo(collate(trajectories, pad_id(tokenizer)), course_config())
    assert stats["step_group_size_mean"] > 1  # some states repeat: the step part is not all zero
    outputs = []
    for t in trajectories:
        result = asyncio.run(
            course_verl.play_episode(make(), t.seed, tokenizer, replay(t), config.sampling, max_response_tokens=40)
        )
        outputs.append(AgentLoopOutput(**course_verl.output_fields(result)))
    batch = to_dataproto(worker(tokenizer, 40, 40), outputs, [f"uid-{t.group_id}" for t in trajectories])
    assert ray_trainer.compute_advantage.course_patched
    out = ray_trainer.compute_advantage(batch, "course_gigpo", gamma=0.95, config=algorithm_config("x", **GIGPO))
    expected = response_part(course_adv, trajectories, 40)
    difference = (out.batch["advantages"] - expected).abs().max().item()
    print(f"gigpo trajectory mode: largest difference {difference:.3g}")
    assert difference <= 1e-6 and expected.abs().max() > 0.1
    # without the patch verl cannot hand the estimator the step columns: the registered estimator says so
    with pytest.raises(RuntimeError, match="needs non_tensor_batch"):
        core_algos.get_adv_estimator_fn("course_gigpo")(
            token_level_rewards=batch.batch["token_level_rewards"], response_mask=batch.batch["response_mask"]
        )


@pytest.fixture(scope="module")
def ch07_episodes(ch07):
    from course_lib.step_mode import rollout_steps

    model, tokenizer, config, make = ch07
    engine = RolloutEngine(model, tokenizer, config.sampling)
    seeds = [p for p in range(PROMPTS) for _ in range(GROUP)]
    groups = [p for p in range(PROMPTS) for _ in range(GROUP)]
    episodes = rollout_steps(
        engine, [make() for _ in seeds], seeds, groups, torch.Generator().manual_seed(1), 0, "observation"
    )
    return episodes, tokenizer


def step_batch(episodes, tokenizer):
    rows = verl_gigpo.step_rows(episodes)
    outputs = [AgentLoopOutput(**row) for row in rows]
    width = max(len(r["prompt_ids"]) for r in rows)
    return to_dataproto(worker(tokenizer, width, 8), outputs, [r["extra_fields"]["uid_hint"] for r in rows])


@pytest.mark.parametrize("baseline", ["pooled", "trajectory"])
def test_gigpo_step_mode_matches_the_course(ch07_episodes, baseline):
    episodes, tokenizer = ch07_episodes
    rows = [row for episode in episodes for row in episode.rows]
    config = course_config(gigpo=GiGPOConfig(gamma=0.95, step_weight=1.0, episode_baseline=baseline))
    course_adv, stats = loop.gigpo(collate(rows, pad_id(tokenizer)), config)
    assert stats["step_group_size_mean"] > 1
    batch = step_batch(episodes, tokenizer)
    assert len(batch) == len(rows)
    settings = {"gigpo": {**GIGPO["gigpo"], "episode_baseline": baseline}}
    out = ray_trainer.compute_advantage(batch, "course_gigpo", gamma=0.95, config=algorithm_config("x", **settings))
    expected = response_part(course_adv, rows, 8)
    difference = (out.batch["advantages"] - expected).abs().max().item()
    print(f"gigpo step mode ({baseline}): {len(rows)} step rows, largest difference {difference:.3g}")
    assert difference <= 1e-6 and expected.abs().max() > 0.1


@pytest.mark.parametrize(
    "name, settings",
    [
        ("starpo_s", {"keep_fraction": 0.5}),
        ("snr_top_p", {"top_p": 0.9, "mode": "linear", "include_zero": False}),
        ("snr_top_p", {"top_p": 0.9, "mode": "softmax", "include_zero": True}),
    ],
)
def test_group_filters_zero_the_mask_of_the_groups_the_course_drops(ch00, tmp_path, name, settings):
    model, tokenizer = ch00
    trajectories = course_trajectories(model, tokenizer, seed=3) + course_trajectories(model, tokenizer, seed=4)
    for k, t in enumerate(trajectories):  # four groups of four: two prompts, two draws each
        t.group_id = k // GROUP
    batch = collate(trajectories, pad_id(tokenizer))
    config = GRPOConfig(group_size=GROUP, batch_filter=name, filter=FilterConfig(**settings))
    keep_course = loop.resolve("batch_filter", name)(batch, config)
    course_adv = loop.grpo(batch.select(keep_course), config)[0]
    verl_batch = replayed_batch(model, tokenizer, tmp_path, trajectories)
    verl_batch.non_tensor_batch["uid"] = np.array([f"uid-{t.group_id}" for t in trajectories], dtype=object)
    before = verl_batch.batch["response_mask"].clone()
    algorithm = algorithm_config("grpo", filter={"name": name, **settings})
    out = ray_trainer.compute_advantage(verl_batch, "grpo", config=algorithm)
    kept_rows = out.batch["response_mask"].sum(-1) > 0
    assert kept_rows.tolist() == keep_course.tolist()
    assert 0 < int(keep_course.sum()) < len(trajectories) or name == "snr_top_p"
    assert torch.equal(out.batch["response_mask"][kept_rows], before[kept_rows])
    # verl's GRPO on the kept rows equals the course's on the selected batch (one value per row)
    verl_adv = out.batch["advantages"][kept_rows]
    first = out.batch["response_mask"][kept_rows].argmax(-1)
    per_row = verl_adv[torch.arange(len(first)), first]
    difference = (per_row - course_adv).abs().max().item() if len(per_row) else 0.0
    print(f"{name} {settings}: kept {int(keep_course.sum())}/{len(trajectories)}, largest difference {difference:.3g}")
    assert difference <= 1e-5


def test_a_filter_that_keeps_nothing_zeroes_every_advantage(ch00, tmp_path):
    model, tokenizer = ch00
    trajectories = course_trajectories(model, tokenizer)
    batch = replayed_batch(model, tokenizer, tmp_path, trajectories)
    batch.batch["token_level_rewards"] = torch.zeros_like(batch.batch["token_level_rewards"])  # every std is 0
    before = batch.batch["response_mask"].clone()
    out = ray_trainer.compute_advantage(batch, "grpo", config=algorithm_config("grpo", filter={"name": "snr_top_p"}))
    assert torch.equal(out.batch["response_mask"], before) and not out.batch["advantages"].any()
    assert out.meta_info["course_metrics"]["course/filter_kept_share"] == 0.0


def test_balanced_clip_loss_and_gradient_match_the_course():
    generator = torch.Generator().manual_seed(0)
    rows, width = 6, 12
    old = -torch.rand(rows, width, generator=generator) * 3
    logits = (old + torch.randn(rows, width, generator=generator) * 0.4).requires_grad_()
    advantages = torch.randn(rows, width, generator=generator)
    mask = (torch.rand(rows, width, generator=generator) > 0.3).float()
    actor = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0})
    loss_fn = core_algos.get_policy_loss_fn("course_entropy_balanced")
    loss, metrics = loss_fn(old, logits, advantages, mask, "token-mean", actor, None)
    (grad,) = torch.autograd.grad(loss, logits)
    config = GRPOConfig(clip_low=0.2, clip_high=0.28, aggregation="token-mean")
    reference = logits.detach().clone().requires_grad_()
    course_loss, stats = loop.entropy_balanced(reference, old, advantages, mask, config)
    (course_grad,) = torch.autograd.grad(course_loss, reference)
    ratio = torch.exp(logits.detach() - old)
    assert ((ratio > 1.28) & (advantages > 0) & mask.bool()).any()  # the balanced gradient acts somewhere
    loss_difference = (loss - course_loss).abs().item()
    grad_difference = (grad - course_grad).abs().max().item()
    print(f"balanced clip: loss difference {loss_difference:.3g}, largest gradient difference {grad_difference:.3g}")
    assert loss_difference <= 1e-6 and grad_difference <= 1e-7
    assert metrics["actor/pg_upper_clipfrac"] == pytest.approx(stats["upper_clip_fraction"])
    # the hard clip (verl's vanilla loss) drops exactly the gradient the balanced clip keeps
    vanilla = OmegaConf.merge(actor, {"global_batch_info": {}})
    hard, _ = core_algos.get_policy_loss_fn("vanilla")(old, reference, advantages, mask, "token-mean", vanilla, None)
    (hard_grad,) = torch.autograd.grad(hard, reference)
    assert torch.allclose(hard, course_loss, atol=1e-6)
    assert not torch.allclose(hard_grad, course_grad)


# Trees ----------------------------------------------------------------------------------------------------------
TREE_CHAPTER = "08"
"""ARPO's chapter: its two-hop search task forks after a tool response (a two-candidate one raises the entropy)."""


def tree_fields(rule: str) -> dict:
    """Chapter 08's tree (`Chapter08Config.grpo.tree`: P = alpha + beta dH with alpha 0.5, beta 0.2, dH over the
    first 4 tokens after a tool response; chapter 11 keeps it and swaps in AEPO's rule) with 1 global sample per
    group of 4 (the share of the chapter's `arpo_n2` ablation, 2 of 8), so that the tree grows over several rounds:
    branches of branches, a refill, and AEPO's consecutive-branch penalty at work. As `TreeConfig`'s fields and as
    `extra_info["tree"]`."""
    from course_lib.chapters import ch08_arpo as ch08

    tree = ch08.Chapter08Config().grpo.tree
    return {"rule": rule, "global_samples": 1, "alpha": tree.alpha, "beta": tree.beta,
            "entropy_tokens": tree.entropy_tokens}  # fmt: skip


class TreeReplayServer:
    """A server backed by the torch model: each turn's tokens are the ones the course's tree sampled at that
    context (a queue per context, in the course's creation order), and their log-probs and full-vocabulary
    entropies are recomputed by a forward pass of the model (returned in `TokenOutput.extra_fields`)."""

    def __init__(self, model, leaves, tree):
        self.model, self.queues = model, {}
        for leaf, parent, fork in zip(leaves, tree.parents, tree.fork_steps, strict=True):
            first_new = 0 if parent is None else fork  # a fork after step s shares turns 0 .. s - 1
            for turn in range(first_new, max(leaf.turn_ids) + 1):
                positions = [k for k, (t, m) in enumerate(zip(leaf.turn_ids, leaf.loss_mask)) if t == turn and m]
                if positions:
                    context = tuple(leaf.token_ids[: positions[0]])
                    turn_ids = [leaf.token_ids[k] for k in positions]
                    self.queues.setdefault(context, []).append(turn_ids)

    def score(self, context: list[int], turn: list[int], temperature: float) -> tuple[list[float], list[float]]:
        with torch.no_grad():
            logits = self.model(torch.tensor([context + turn])).logits[0, len(context) - 1 : -1].float()
        log_probs = torch.log_softmax(logits / temperature, dim=-1)
        chosen = log_probs.gather(-1, torch.tensor(turn)[:, None]).squeeze(-1)
        return chosen.tolist(), (-(log_probs.exp() * log_probs).sum(-1)).tolist()

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        turn = self.queues[tuple(prompt_ids)].pop(0)
        logprobs, entropies = self.score(list(prompt_ids), turn, sampling_params["temperature"])
        return TokenOutput(token_ids=turn, log_probs=logprobs, extra_fields={"entropies": entropies})


class RecordedDraws:
    """`tree_rollout.should_branch` recorded on the course's run and replayed on verl's: the branch decisions are
    the same draws, and each replayed call checks the probability verl's engine computed against the course's."""

    def __init__(self):
        self.draws, self.replaying, self.largest = [], False, 0.0

    def __call__(self, probability, generator):
        from course_lib.algos.arpo import should_branch

        if not self.replaying:
            decision = should_branch(probability, generator)
            self.draws.append((float(probability), decision))
            return decision
        recorded, decision = self.draws.pop(0)
        self.largest = max(self.largest, abs(recorded - float(probability)))
        return decision


def course_tree(model, tokenizer, rule: str, monkeypatch, draws: RecordedDraws):
    from course_lib import tree_rollout

    monkeypatch.setattr(tree_rollout, "should_branch", draws)
    tasks = course_verl.chapter_tasks(TREE_CHAPTER)
    sampling = dataclasses.replace(tasks.sampling, snapshot_envs=True)
    engine = RolloutEngine(model, tokenizer, sampling)
    envs = [tasks.make_env("train") for _ in range(PROMPTS * GROUP)]
    tree = tree_rollout.TreeConfig(**tree_fields(rule))
    return tree_rollout.sample_trees(engine, envs, list(range(PROMPTS)), GROUP, tree, torch.Generator().manual_seed(5))


def compare_leaves(course_leaves, verl_leaves) -> float:
    """Token ids, masks, turn ids, rewards equal; returns the largest log-prob difference."""
    assert len(course_leaves) == len(verl_leaves)
    largest = 0.0
    for c, v in zip(course_leaves, verl_leaves, strict=True):
        assert (c.token_ids, c.loss_mask, c.turn_ids, c.group_id) == (v.token_ids, v.loss_mask, v.turn_ids, v.group_id)
        assert (c.rewards, c.terminated, c.truncated, c.cut) == (v.rewards, v.terminated, v.truncated, v.cut)
        largest = max(largest, max(abs(a - b) for a, b in zip(c.logprobs, v.logprobs, strict=True)))
    return largest


@pytest.mark.parametrize("rule", ["arpo", "aepo"])
def test_tree_on_a_server_matches_sample_trees(ch08, monkeypatch, rule):
    """Chapter 08's tree grown by `sample_trees` over `ServerEngine` (verl's server interface) and over the course's
    engine on the same seeds: the same tree, leaves, masks; log-probs and branch entropies recomputed by the server."""
    from course_lib import tree_rollout
    from course_lib.integrations import verl_trees

    model, tokenizer = ch08
    draws = RecordedDraws()
    leaves, tree = course_tree(model, tokenizer, rule, monkeypatch, draws)
    assert any(p is not None for p in tree.parents)  # some leaves are branches
    if rule == "aepo":  # the consecutive-branch penalty lowered some probability below ARPO's alpha + beta dH
        from course_lib.algos.arpo import branch_probability

        fields = tree_fields(rule)
        arpo = [
            float(branch_probability(n.entropy, n.initial_entropy, fields["alpha"], fields["beta"])) for n in tree.nodes
        ]
        assert any(n.probability < a - 1e-3 for n, a in zip(tree.nodes, arpo, strict=True))
    server = TreeReplayServer(model, leaves, tree)
    draws.replaying = True
    tasks = course_verl.chapter_tasks(TREE_CHAPTER)
    engine = verl_trees.ServerEngine(
        verl_trees.server_generate(server),
        tokenizer,
        dataclasses.replace(tasks.sampling, snapshot_envs=True),
        {"temperature": tasks.sampling.temperature},
    )
    envs = [tasks.make_env("train") for _ in range(PROMPTS * GROUP)]
    config = tree_rollout.TreeConfig(**tree_fields(rule))
    verl_leaves, verl_tree = tree_rollout.sample_trees(
        engine, envs, list(range(PROMPTS)), GROUP, config, torch.Generator().manual_seed(5)
    )
    assert not draws.draws and all(not queue for queue in server.queues.values())  # every draw and turn used
    assert (verl_tree.parents, verl_tree.fork_steps, verl_tree.refill) == (tree.parents, tree.fork_steps, tree.refill)
    logprob_difference = compare_leaves(leaves, verl_leaves)
    entropy_difference = max(abs(a.entropy - b.entropy) for a, b in zip(tree.nodes, verl_tree.nodes, strict=True))
    print(
        f"tree ({rule}, chapter {TREE_CHAPTER}): {sum(p is not None for p in tree.parents)} branches among "
        f"{len(leaves)} leaves (fork steps {tree.fork_steps}, refills {sum(tree.refill)}); largest differences: "
        f"log-prob {logprob_difference:.3g}, branch entropy {entropy_difference:.3g}, probability {draws.largest:.3g}"
    )
    assert logprob_difference <= 1e-5 and entropy_difference <= 1e-6 and draws.largest <= 1e-6


def test_the_tree_worker_fills_each_uid_with_its_leaves(ch08, tmp_path, monkeypatch):
    """`TreeAgentLoopWorker.generate_sequences` on the trainer's repeated rows of chapter 08's export: its batch holds
    the course's leaves, each group's in its uid's rows, after verl's own padding (at the chapter's lengths)."""
    from course_lib.integrations import verl_trees

    model, tokenizer = ch08
    draws = RecordedDraws()
    leaves, tree = course_tree(model, tokenizer, "arpo", monkeypatch, draws)
    draws.replaying = True
    rows = chapter_rows(tokenizer, tmp_path, TREE_CHAPTER, PROMPTS)
    for row in rows:  # what `export --tree arpo --global-samples 2` writes, with the chapter's alpha, beta and k
        row["extra_info"] = {**row["extra_info"], "tree": tree_fields("arpo")}
    repeated = [row for row in rows for _ in range(GROUP)]
    from verl import DataProto

    batch = DataProto.from_dict(
        non_tensors={
            **{key: np.array([r[key] for r in repeated], dtype=object) for key in rows[0]},
            "uid": np.array([f"uid-{k // GROUP}" for k in range(len(repeated))], dtype=object),
        },
        meta_info={"global_steps": 1},
    )
    w = verl_trees.TreeAgentLoopWorker.__new__(verl_trees.TreeAgentLoopWorker)
    prompt_length, response_length = course_verl.sequence_lengths(TREE_CHAPTER)
    w.rollout_config = OmegaConf.create(
        {"prompt_length": prompt_length, "response_length": response_length, "temperature": 1.0, "top_p": 1.0,
         "top_k": -1, "calculate_log_probs": True}
    )  # fmt: skip
    w.tokenizer, w.processor, w.llm_client = tokenizer, None, TreeReplayServer(model, leaves, tree)
    w.reward_loop_worker_handles, w.distillation_enabled, w.mm_processor_kwargs = None, False, {}
    out = asyncio.run(w.generate_sequences(batch))
    assert len(out) == PROMPTS * GROUP and list(out.non_tensor_batch["uid"]) == list(batch.non_tensor_batch["uid"])
    for row, leaf in enumerate(leaves):
        prompt = sum(1 for t in leaf.turn_ids if t < 0)
        response = leaf.token_ids[prompt:]
        assert out.batch["responses"][row, : len(response)].tolist() == response
        assert out.batch["response_mask"][row, : len(response)].tolist() == leaf.loss_mask[prompt:]
        assert out.batch["response_mask"][row, len(response) :].sum() == 0
        assert float(out.batch["rm_scores"][row].sum()) == pytest.approx(leaf.total_reward)
        assert out.non_tensor_batch["tree_parent"][row] == (-1 if tree.parents[row] is None else tree.parents[row])
    assert out.non_tensor_batch["tree_branch"].any()
    assert not draws.draws and draws.largest <= 1e-6  # the same branch probabilities, every draw used
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager

    timing = AgentLoopManager._performance_metrics(None, [out.meta_info["metrics"]], out)  # the manager's summary
    assert timing["agent_loop/generate_sequences/max"] == 0.0


# The MI monitor -------------------------------------------------------------------------------------------------
MONITOR_CHAPTER = "08"
"""Chapter 12's task (`Chapter12Config.task` is chapter 08's), whose training questions its monitor plays."""


def test_first_action_mi_in_verl_layout_matches_chapter_12(ch08, tmp_path):
    """Chapter 12's monitor MI (`first_action_mi`: every first action scored under every prompt) against the same
    measurement on verl's data, on chapter 12's task (chapter 08's): first actions read from the agent loop's batch,
    the pairs laid out as verl's actor reads them (left-padded prompts, position ids from the mask), log-probs by
    verl's `logprobs_from_logits`."""
    from verl.utils.torch_functional import logprobs_from_logits

    from course_lib.chapters import ch12_capstone as ch12
    from course_lib.integrations import verl_monitor

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
    course = ch12.first_action_mi(model, tokenizer, trajectories, count, seed=0)
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

        from course_lib.train import evaluate_policy

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
    """Chapter 12's own `monitor_mi` (its `Chapter12Config`, `prompts` monitor questions, run seed
    `MONITOR_RUN_SEED`): chapter 08's environment and sampling, which verl's export of chapter 08 carries."""
    from course_lib.chapters import ch12_capstone as ch12

    config = dataclasses.replace(ch12.Chapter12Config(), monitor_prompts=prompts)
    from course_lib.chapters import ch08_arpo as ch08

    assert config.task == ch08.preset("cpu")  # the chapter 08 that `chapter_tasks("08")` exports
    return ch12.monitor_mi(model, tokenizer, config, MONITOR_RUN_SEED)


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

    model, tokenizer = ch08
    model = copy.deepcopy(model)
    prompts = 6
    monkeypatch.setattr(ray_trainer.RayPPOTrainer, "_validate", lambda self: {"val-core/score": 0.5})
    verl_monitor.install_monitor()
    drop = ch12.Chapter12Config().gate_drop
    trainer = monitor_trainer(model, tokenizer, tmp_path, chapter=MONITOR_CHAPTER, prompts=prompts, drop=drop)
    seeds = [ch12.MONITOR_SEED + p for p in range(prompts)]
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


# Launch overrides -----------------------------------------------------------------------------------------------
def compose(overrides: list[str]):
    from pathlib import Path

    import verl.trainer
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(verl.trainer.__file__).parent / "config"), version_base=None):
        return hydra_compose("ppo_trainer", overrides=overrides)


@pytest.mark.parametrize(
    "method", sorted(__import__("course_lib.integrations.verl_launch").integrations.verl_launch.METHODS)
)
def test_launch_overrides_compose_against_ppo_trainer_yaml(method):
    from verl.utils.config import omega_conf_to_dataclass

    from course_lib.integrations import verl_filters, verl_launch

    config = compose([*verl_launch.overrides(method), verl_patch.HOOK_OVERRIDE])
    assert config.trainer.use_v1 is False
    assert config.ray_kwargs.ray_init.runtime_env.worker_process_setup_hook == verl_patch.SETUP_HOOK
    assert config.actor_rollout_ref.actor.ppo_mini_batch_size == config.data.train_batch_size
    # the dataclasses verl builds from these blocks accept them (validate_config, the workers)
    omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    if method == "gigpo":
        assert config.algorithm.adv_estimator == "course_gigpo"
        assert verl_gigpo.GiGPOSettings.from_algorithm_config(config.algorithm) == verl_gigpo.GiGPOSettings()
    if method in ("starpo_s", "snr_top_p"):
        assert verl_filters.FilterSettings.from_algorithm_config(config.algorithm).name == method
    if method in ("arpo", "aepo"):
        assert config.actor_rollout_ref.rollout.agent.agent_loop_manager_class.endswith("TreeAgentLoopManager")
    if method in ("aepo", "entropy_balanced"):
        assert config.actor_rollout_ref.actor.policy_loss.loss_mode == "course_entropy_balanced"
    from course_lib.integrations.verl_monitor import MonitorSettings

    settings = MonitorSettings.from_trainer_config(config.trainer)
    if method == "mi_monitor":  # chapter 12's settings, every measured step checkpointed, the base measured first
        from course_lib.chapters import ch12_capstone as ch12

        chapter12 = ch12.Chapter12Config()
        assert settings == MonitorSettings("ch00", chapter12.gate_drop, chapter12.monitor_prompts, ch12.MONITOR_SEED)
        assert config.trainer.save_freq == config.trainer.test_freq > 0 and config.trainer.val_before_train
    else:
        assert settings is None
    print(verl_launch.command(method).splitlines()[-3:])


def test_a_misspelt_override_fails_composition():
    from hydra.errors import ConfigCompositionException

    from course_lib.integrations import verl_launch

    with pytest.raises(ConfigCompositionException):
        compose([*verl_launch.overrides("gigpo"), "algorithm.gamm=0.9"])
    with pytest.raises(ConfigCompositionException):  # a key verl lacks needs its `+`
        compose([*verl_launch.overrides("grpo"), "algorithm.course.filter.name=starpo_s"])


def test_the_legacy_trainer_never_builds_algo_config():
    """`+algorithm.course.*` is a block verl's `AlgoConfig` dataclass would refuse; the legacy trainer passes the
    DictConfig itself to `compute_advantage` and builds no `AlgoConfig` from it (checked in verl's source here, so
    that a verl release that starts doing so fails this test rather than a launch)."""
    from pathlib import Path

    import verl
    from verl.utils.config import omega_conf_to_dataclass

    from course_lib.integrations import verl_launch

    config = compose([*verl_launch.overrides("gigpo"), verl_patch.HOOK_OVERRIDE])
    with pytest.raises(Exception, match="course"):
        omega_conf_to_dataclass(config.algorithm)
    root = Path(verl.__file__).parent
    for name in ("trainer/main_ppo.py", "trainer/main_ppo_v0.py", "trainer/ppo/ray_trainer.py", "utils/config.py"):
        text = (root / name).read_text()
        assert re.search(r"omega_conf_to_dataclass\([^)]*algorithm\)", text) is None, name
        assert "AlgoConfig(" not in text, name


def test_rays_setup_hook_installs_the_methods_in_every_worker_process():
    """What `HOOK_OVERRIDE` does in a run, on a local Ray: a task and an actor with its own `runtime_env` (as verl's
    workers set env vars) each find GiGPO, the balanced clip, the patched `compute_advantage` and the monitor's
    `_validate` wrapper in their process."""
    import os

    import ray

    ray.init(num_cpus=1, include_dashboard=False, runtime_env={"worker_process_setup_hook": verl_patch.SETUP_HOOK})
    try:

        def installed() -> tuple:
            from verl.trainer.ppo import core_algos as algos
            from verl.trainer.ppo import ray_trainer as trainer

            return (
                "course_gigpo" in algos.ADV_ESTIMATOR_REGISTRY,
                "course_entropy_balanced" in algos.POLICY_LOSS_REGISTRY,
                getattr(trainer.compute_advantage, "course_patched", False),
                getattr(trainer.RayPPOTrainer._validate, "course_monitor", False),
                os.getpid(),
            )

        @ray.remote
        class Worker:
            def probe(self):
                return installed(), os.environ.get("COURSE_PROBE")

        task = ray.get(ray.remote(installed).remote())
        actor = Worker.options(runtime_env={"env_vars": {"COURSE_PROBE": "1"}}).remote()
        (in_actor, env) = ray.get(actor.probe.remote())
    finally:
        ray.shutdown()
    assert task[:4] == (True, True, True, True) and task[4] != os.getpid()
    assert in_actor[:4] == (True, True, True, True) and env == "1"


def test_step_mode_episodes_played_through_verls_server(ch07, ch07_episodes):
    """`step_mode.rollout_steps` over `ServerEngine` and verl's `TokenOutput` (a server replaying the course's step
    actions, each at its prompt, in the lock-step order the course plays them): the same step rows, so the same
    step-mode batch and GiGPO advantages as above."""
    from course_lib.integrations import verl_trees
    from course_lib.step_mode import rollout_steps

    model, tokenizer, config, make = ch07
    episodes, _ = ch07_episodes
    queues: dict[tuple, list] = {}
    for step in range(max(len(e.rows) for e in episodes)):
        for episode in episodes:
            if step < len(episode.rows):
                row = episode.rows[step]
                prompt = sum(1 for t in row.turn_ids if t < 0)
                queues.setdefault(tuple(row.token_ids[:prompt]), []).append(
                    (row.token_ids[prompt:], row.logprobs[prompt:])
                )

    class StepServer:
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
            ids, logprobs = queues[tuple(prompt_ids)].pop(0)
            return TokenOutput(token_ids=ids, log_probs=logprobs)

    engine = verl_trees.ServerEngine(verl_trees.server_generate(StepServer()), tokenizer, config.sampling)
    seeds = [p for p in range(PROMPTS) for _ in range(GROUP)]
    played = rollout_steps(engine, [make() for _ in seeds], seeds, seeds, None, 0, "observation")
    assert all(not queue for queue in queues.values())
    for ours, theirs in zip(played, episodes, strict=True):
        assert len(ours.rows) == len(theirs.rows) and ours.total_reward == theirs.total_reward
        for a, b in zip(ours.rows, theirs.rows, strict=True):
            assert (a.token_ids, a.loss_mask, a.logprobs, a.rewards, a.anchors) == (
                b.token_ids, b.loss_mask, b.logprobs, b.rewards, b.anchors,
            )  # fmt: skip
    assert verl_gigpo.step_rows(played) == verl_gigpo.step_rows(episodes)


def test_a_filter_then_gigpo_in_step_mode_matches_the_course(ch07_episodes):
    """Both seams at once, as `train.policy_iteration` chains them: the course selects StarPO-S's groups and runs
    GiGPO on what is kept; verl's patched `compute_advantage` zeroes the dropped groups' masks, then GiGPO."""
    episodes, tokenizer = ch07_episodes
    rows = [row for episode in episodes for row in episode.rows]
    batch = collate(rows, pad_id(tokenizer))
    config = course_config(batch_filter="starpo_s", filter=FilterConfig(keep_fraction=0.5))
    keep = loop.starpo_s(batch, config)
    assert 0 < int(keep.sum()) < len(rows)
    kept_adv, _ = loop.gigpo(batch.select(keep), config)
    verl_batch = step_batch(episodes, tokenizer)
    algorithm = algorithm_config("x", **GIGPO, filter={"name": "starpo_s", "keep_fraction": 0.5})
    out = ray_trainer.compute_advantage(verl_batch, "course_gigpo", gamma=0.95, config=algorithm)
    kept_rows = out.batch["response_mask"].sum(-1) > 0
    assert kept_rows.tolist() == keep.tolist()
    expected = response_part(kept_adv, [r for r, k in zip(rows, keep.tolist(), strict=True) if k], 8)
    difference = (out.batch["advantages"][kept_rows] - expected).abs().max().item()
    print(
        f"starpo_s then gigpo (step mode): kept {int(keep.sum())}/{len(rows)} rows, largest difference {difference:.3g}"
    )
    assert difference <= 1e-6 and not out.batch["advantages"][~kept_rows].any()


@pytest.mark.parametrize("method", ["gigpo", "aepo", "snr_top_p", "mi_monitor"])
def test_the_entry_module_runs_verls_main_with_the_hook(method, monkeypatch, tmp_path):
    """`python -m course_lib.integrations.verl_patch <overrides>` up to the point where verl starts Ray: verl's own
    `main` composes the overrides, `validate_config` accepts them (batch sizes included), the legacy `TaskRunner`
    is chosen, and the runtime env carries the setup hook (added by the entry module, not by the user)."""
    from verl.trainer import main_ppo

    from course_lib.integrations import verl_launch

    seen = {}
    monkeypatch.setattr(
        main_ppo, "run_ppo", lambda config, task_runner_class: seen.update(config=config, runner=task_runner_class)
    )
    monkeypatch.setattr("sys.argv", ["verl_patch"])
    monkeypatch.chdir(tmp_path)  # hydra writes its run folder (outputs/<date>/<time>) under the working directory
    verl_patch.main(verl_launch.overrides(method))
    assert seen["config"].ray_kwargs.ray_init.runtime_env.worker_process_setup_hook == verl_patch.SETUP_HOOK
    from verl.trainer.main_ppo_v0 import TaskRunner

    assert seen["runner"] is TaskRunner  # the legacy trainer (trainer.use_v1=False), where the patch applies

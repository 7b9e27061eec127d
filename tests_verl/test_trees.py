"""ARPO's and AEPO's trees on verl (run in `.venv-verl`): `sample_trees` over `ServerEngine` and verl's tree worker
against the course's engine on the same seeds."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest
import torch
from methods_helpers import (
    GROUP,
    PROMPTS,
    chapter_rows,
)
from omegaconf import OmegaConf
from verl.workers.rollout.replica import TokenOutput

from course_lib.engine.rollout import RolloutEngine
from course_lib.integrations import course_verl

pytestmark = pytest.mark.usefixtures("patched")


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
    from course_lib.engine import tree_rollout

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
    from course_lib.engine import tree_rollout
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

"""RAGEN-2's input-reasoning mutual information and its teacher-forced scoring (course_lib.diagnostics)."""

from __future__ import annotations

import math

import pytest
import torch

from course_lib.diagnostics import mutual_information, teacher_forced_logp
from course_lib.models import build_model
from course_lib.tokenizer import build_tokenizer


def test_reasoning_independent_of_the_input_has_zero_information():
    generator = torch.Generator().manual_seed(0)
    per_row = torch.randn(12, 1, generator=generator, dtype=torch.float64) - 3.0
    logp = per_row.expand(12, 4)  # the same log p(z_i | x_j) under every prompt
    out = mutual_information(logp, [i % 4 for i in range(12)])
    assert out["mi"] == pytest.approx(0.0, abs=1e-12)
    assert out["conditional_entropy"] == pytest.approx(out["marginal_entropy"])
    assert out["retrieval_accuracy"] == pytest.approx(3 / 12)  # every argmax ties to prompt 0: chance, 1/P
    assert out["chance"] == 0.25 and out["prompts"] == 4


def test_reasoning_that_identifies_its_prompt_has_log_p():
    own = [0, 0, 1, 1, 2, 2, 3, 3]
    logp = torch.full((8, 4), -1e9, dtype=torch.float64)
    logp[torch.arange(8), torch.tensor(own)] = 0.0  # z_i is certain under its own prompt, impossible elsewhere
    out = mutual_information(logp, own)
    assert out["mi"] == pytest.approx(math.log(4))
    assert out["retrieval_accuracy"] == 1.0 and out["conditional_entropy"] == pytest.approx(0.0)
    assert out["marginal_entropy"] == pytest.approx(math.log(4))


def test_a_noisy_copy_of_the_input_by_hand():
    """x uniform over two prompts, z a copy of x flipped with probability 0.2 (a binary symmetric channel): the
    true MI is log 2 - H(0.2); ten samples per prompt in exact proportion give the estimator exactly that."""
    rows, own = [], []
    for prompt in (0, 1):
        for flipped in [False] * 8 + [True] * 2:
            z = 1 - prompt if flipped else prompt
            rows.append([math.log(0.8 if z == x else 0.2) for x in (0, 1)])
            own.append(prompt)
    out = mutual_information(torch.tensor(rows, dtype=torch.float64), own)
    binary_entropy = -(0.8 * math.log(0.8) + 0.2 * math.log(0.2))
    assert out["mi"] == pytest.approx(math.log(2) - binary_entropy)
    assert out["retrieval_accuracy"] == pytest.approx(0.8)
    assert out["conditional_entropy"] == pytest.approx(binary_entropy)  # -mean log p(z|x) = H(z|x) here
    # the z-score: every marginal is log 0.5, so its spread is 0 and the score is the mean difference / 1e-3
    assert out["mi_zscore"] == pytest.approx(out["mi"] / 1e-3)


def test_identical_prompts_count_as_retrieved():
    logp = torch.tensor([[-1.0, -1.0, -5.0], [-1.0, -1.0, -5.0], [-4.0, -4.0, -0.5]])
    own = [0, 1, 2]
    assert mutual_information(logp, own)["retrieval_accuracy"] == pytest.approx(2 / 3)  # row 1's argmax ties to 0
    assert mutual_information(logp, own, prompt_keys=["a", "a", "b"])["retrieval_accuracy"] == 1.0


def test_mutual_information_rejects_bad_input():
    with pytest.raises(ValueError):
        mutual_information(torch.zeros(3), [0, 0, 0])
    with pytest.raises(ValueError):
        mutual_information(torch.zeros(3, 2), [0, 1])
    with pytest.raises(ValueError):
        mutual_information(torch.zeros(2, 2), [0, 2])
    with pytest.raises(ValueError):
        mutual_information(torch.zeros(2, 2), [0, 1], prompt_keys=["a"])


@pytest.fixture(scope="module")
def scorer():
    tokenizer = build_tokenizer([f"w{k}" for k in range(12)])
    torch.manual_seed(0)
    return build_model(tokenizer, "micro", max_positions=32).eval(), tokenizer


def one_pair(model, prompt: list[int], reasoning: list[int]) -> torch.Tensor:
    """log p of each reasoning token after the prompt, from one unpadded forward pass."""
    ids = torch.tensor([prompt + reasoning])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(input_ids=ids).logits.double(), dim=-1)[0]
    return torch.stack([logprobs[len(prompt) - 1 + t, token] for t, token in enumerate(reasoning)])


def test_teacher_forced_logp_matches_one_forward_per_pair(scorer):
    model, tokenizer = scorer
    ids = [tokenizer.convert_tokens_to_ids(f"w{k}") for k in range(12)]
    prompts = [ids[:3], ids[3:8], ids[8:10]]  # different lengths: the batch pads them
    reasonings = [ids[1:2], ids[4:7], ids[9:12], ids[0:4]]
    means = teacher_forced_logp(model, prompts, reasonings, batch_size=5)  # 12 pairs in three batches
    sums = teacher_forced_logp(model, prompts, reasonings, aggregate="sum")
    assert means.shape == (4, 3) and means.dtype == torch.float64
    for i, z in enumerate(reasonings):
        for j, x in enumerate(prompts):
            expected = one_pair(model, x, z)
            assert sums[i, j].item() == pytest.approx(expected.sum().item(), abs=1e-5)
            assert means[i, j].item() == pytest.approx(expected.mean().item(), abs=1e-5)
    with pytest.raises(ValueError):
        teacher_forced_logp(model, prompts, [[]])
    with pytest.raises(ValueError):
        teacher_forced_logp(model, prompts, reasonings, aggregate="max")


def fake_turn(tokens: list[int], prompt_length: int, group: int):
    from course_lib.engine.rollout import Trajectory

    turns = [-1] * prompt_length + [0] * (len(tokens) - prompt_length)
    mask = [0] * prompt_length + [1] * (len(tokens) - prompt_length)
    return Trajectory(
        env=None, token_ids=tokens, loss_mask=mask, logprobs=[0.0] * len(tokens), entropies=[0.0] * len(tokens),
        turn_ids=turns, group_id=group,
    )  # fmt: skip


def test_first_turn_reasoning_and_its_batch_estimate(scorer):
    from course_lib.diagnostics import first_turn_reasoning, reasoning_mutual_information

    model, tokenizer = scorer
    ids = {w: tokenizer.convert_tokens_to_ids(w) for w in ("<think>", "</think>", "<answer>", "</answer>")}
    w = [tokenizer.convert_tokens_to_ids(f"w{k}") for k in range(12)]
    think, end, answer, end_answer = ids["<think>"], ids["</think>"], ids["<answer>"], ids["</answer>"]
    tail = [answer, w[0], end_answer]
    trajectories = [
        fake_turn([w[1], w[2], think, w[3], w[4], end, *tail], 2, group=0),
        fake_turn([w[1], w[2], think, w[5], end, *tail], 2, group=0),
        fake_turn([w[6], think, w[7], end, *tail], 1, group=1),
        fake_turn([w[6], think, end, *tail], 1, group=1),  # empty reasoning: not sampled
        fake_turn([w[8], w[9], *tail], 2, group=2),  # no reasoning at all: its group is no input
    ]
    assert first_turn_reasoning(trajectories[0], think, end) == ([w[1], w[2], think], [w[3], w[4]])
    assert first_turn_reasoning(trajectories[3], think, end) is None
    assert first_turn_reasoning(trajectories[4], think, end) is None
    out = reasoning_mutual_information(model, tokenizer, trajectories, samples=64)
    logp = teacher_forced_logp(model, [[w[1], w[2], think], [w[6], think]], [[w[3], w[4]], [w[5]], [w[7]]])
    expected = mutual_information(logp, [0, 0, 1])
    assert out["samples"] == 3 and out["prompts"] == 2
    assert out["mi"] == pytest.approx(expected["mi"]) and out["retrieval_accuracy"] == expected["retrieval_accuracy"]
    lonely = reasoning_mutual_information(model, tokenizer, trajectories[:2])
    assert lonely["samples"] == 0 and math.isnan(lonely["mi"])
    two = reasoning_mutual_information(
        model, tokenizer, trajectories, samples=2, generator=torch.Generator().manual_seed(0)
    )
    assert two["samples"] == 2


def test_first_turn_action_and_its_batch_estimate(scorer):
    """Without a reasoning channel the whole first turn is z: every trajectory that wrote a first turn counts."""
    from course_lib.diagnostics import first_turn_action, reasoning_mutual_information

    model, tokenizer = scorer
    w = [tokenizer.convert_tokens_to_ids(f"w{k}") for k in range(12)]
    trajectories = [
        fake_turn([w[1], w[2], w[3], w[4]], 2, group=0),
        fake_turn([w[6], w[7], w[8]], 1, group=1),
        fake_turn([w[9], w[10]], 2, group=2),  # the prompt only: no first turn
    ]
    assert first_turn_action(trajectories[0]) == ([w[1], w[2]], [w[3], w[4]])
    assert first_turn_action(trajectories[2]) is None
    out = reasoning_mutual_information(model, tokenizer, trajectories, span="action")
    logp = teacher_forced_logp(model, [[w[1], w[2]], [w[6]]], [[w[3], w[4]], [w[7], w[8]]])
    assert out["samples"] == 2 and out["mi"] == pytest.approx(mutual_information(logp, [0, 1])["mi"])
    with pytest.raises(ValueError, match="span"):
        reasoning_mutual_information(model, tokenizer, trajectories, span="turns")


class Bigram(torch.nn.Module):
    """A model whose next-token log-probabilities depend on the last token only: `table[last]` (rows sum to 1 in
    probability), so every cross-score log p(z | x) can be written down by hand."""

    def __init__(self, table: torch.Tensor):
        super().__init__()
        self.table = torch.nn.Parameter(table)

    def forward(self, input_ids, attention_mask=None):
        from types import SimpleNamespace

        return SimpleNamespace(logits=self.table[input_ids])


def test_groups_that_share_a_prompt_count_as_retrieved_with_prompt_keys(scorer):
    """Groups 0 and 1 pose the same prompt `a`, group 2 the prompt `b`; each writes one first action, u, u and v.
    With p(u|a) = 0.5, p(u|b) = 0.1, p(v|a) = 0.1, p(v|b) = 0.6 the cross-scores are, by hand (columns: groups),

        u of group 0: log [0.5, 0.5, 0.1];  u of group 1: the same;  v of group 2: log [0.1, 0.1, 0.6]

    group 1's best column ties between its twin 0 and itself and goes to 0: without keys 2 of 3 are retrieved,
    with keys telling that 0 and 1 are one prompt all 3 are. MI is the same either way (keys only judge retrieval):
    mean(log(0.5 / (1.1 / 3)) twice, log(0.6 / (0.8 / 3)))."""
    from course_lib.diagnostics import reasoning_mutual_information

    _, tokenizer = scorer
    a, b, u, v = (tokenizer.convert_tokens_to_ids(f"w{k}") for k in range(4))
    size = len(tokenizer)
    probabilities = torch.full((size, size), 1.0 / size, dtype=torch.float64)
    for row, chosen in ((a, {u: 0.5, v: 0.1}), (b, {u: 0.1, v: 0.6})):
        probabilities[row] = (1 - sum(chosen.values())) / (size - 2)
        for token, p in chosen.items():
            probabilities[row, token] = p
    model = Bigram(probabilities.log())
    trajectories = [fake_turn([a, u], 1, group=0), fake_turn([a, u], 1, group=1), fake_turn([b, v], 1, group=2)]
    plain = reasoning_mutual_information(model, tokenizer, trajectories, span="action")
    keyed = reasoning_mutual_information(
        model, tokenizer, trajectories, span="action", prompt_keys={0: "a", 1: "a", 2: "b"}
    )
    mi = (2 * math.log(0.5 * 3 / 1.1) + math.log(0.6 * 3 / 0.8)) / 3
    assert plain["retrieval_accuracy"] == pytest.approx(2 / 3) and keyed["retrieval_accuracy"] == 1.0
    assert plain["mi"] == pytest.approx(mi, abs=1e-12) and keyed["mi"] == pytest.approx(mi, abs=1e-12)
    assert {k: val for k, val in keyed.items() if k != "retrieval_accuracy"} == {
        k: val for k, val in plain.items() if k != "retrieval_accuracy"
    }
    assert plain["prompts"] == 3 and plain["chance"] == pytest.approx(1 / 3)
    # no keys is every group its own prompt, exactly: the estimate on the cross-scores, as before keys existed
    logp = teacher_forced_logp(model, [[a], [a], [b]], [[u], [u], [v]])
    assert plain == {**mutual_information(logp, [0, 1, 2]), "samples": 3.0}
    own = reasoning_mutual_information(model, tokenizer, trajectories, span="action", prompt_keys={0: 0, 1: 1, 2: 2})
    assert own == plain
    with pytest.raises(ValueError, match="no key for groups"):
        reasoning_mutual_information(model, tokenizer, trajectories, span="action", prompt_keys={0: "a", 2: "b"})

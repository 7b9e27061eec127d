"""The student edition's bridges (`course_lib.bridges`): with each exercise's reference standing in for the
student's function, every bridge returns what the library function it replaces returns, on seeded random inputs and
on the variants the exercise does not cover but a chapter uses (AEPO's hard clip, Tree-GRPO's raw singletons, RAGEN-2's
twin prompts, GAE on a batch). A student edition whose exercises are right therefore computes what this one does."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from course_lib import bridges, diagnostics
from course_lib.algos import aepo, arpo, filters, gigpo, grpo, ppo, tree_grpo
from course_lib.implement_it import MARKED, implement_it
from exercises.checks import exercise


@pytest.fixture
def references(monkeypatch):
    """The bridges call each exercise's reference (the checks' adapter of the library) as the student's."""
    monkeypatch.setattr(bridges, "student", lambda name: exercise(name).library)


def close(a, b, atol=1e-6):
    assert torch.allclose(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64), atol=atol)


def groups(seed: int, count: int = 6, largest: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    sizes = torch.randint(1, largest + 1, (count,), generator=g).tolist()
    ids = torch.tensor([k for k, size in enumerate(sizes) for _ in range(size)])
    rewards = (torch.rand(len(ids), generator=g) < 0.5).float() + 0.1 * torch.randint(0, 3, (len(ids),), generator=g)
    return rewards, ids


def test_every_exercise_but_the_update_marks_its_reference():
    import course_lib.engine.episode  # noqa: F401  (imported for its mark)
    from exercises import NAMES

    assert set(MARKED) == set(NAMES) - {"loop.grpo_update"}


@pytest.mark.parametrize("seed", range(4))
def test_advantages_filters_and_tree(references, seed):
    rewards, ids = groups(seed)
    for scale in (True, False):
        close(bridges.group_advantages(rewards, ids, scale), grpo.group_advantages(rewards, ids, scale))
    for fraction in (0.0, 0.25, 0.5, 1.0):
        assert torch.equal(bridges.top_groups_by_reward_std(rewards, ids, fraction),
                           filters.top_groups_by_reward_std(rewards, ids, fraction))  # fmt: skip
    for top_p in (0.5, 0.9, 1.0):
        for zero in (False, True):
            assert torch.equal(bridges.top_p_groups_by_reward_std(rewards, ids, top_p, include_zero=zero),
                               filters.top_p_groups_by_reward_std(rewards, ids, top_p, include_zero=zero))  # fmt: skip
    trees = torch.arange(len(ids)) // 2 + 100 * ids  # trees of 2 leaves (1 where a group is odd) inside each prompt
    for singleton in ("zero", "raw"):
        close(bridges.tree_advantages(rewards, ids, trees, singleton=singleton),
              tree_grpo.tree_advantages(rewards, ids, trees, singleton=singleton), atol=1e-5)  # fmt: skip


@pytest.mark.parametrize("seed", range(3))
def test_losses_and_their_gradients(references, seed):
    g = torch.Generator().manual_seed(seed)
    old = torch.randn(3, 6, generator=g, dtype=torch.float64) - 2.0
    shift = 0.4 * torch.randn(3, 6, generator=g, dtype=torch.float64)
    for advantages in (
        torch.randn(3, generator=g, dtype=torch.float64),
        torch.randn(3, 6, generator=g, dtype=torch.float64),
    ):
        mask = (torch.rand(3, 6, generator=g) < 0.7).double()
        results = []
        for fn in (bridges.clipped_surrogate_loss, grpo.clipped_surrogate_loss):
            logprobs = (old + shift).requires_grad_()
            loss, stats = fn(logprobs, old, advantages, mask, 0.2, 0.28)
            loss.backward()
            results.append((loss.detach(), logprobs.grad, stats))
        close(results[0][0], results[1][0])
        close(results[0][1], results[1][1])
        assert results[0][2] == pytest.approx(results[1][2])
        for balanced in (True, False):
            results = []
            for fn in (bridges.balanced_clip_losses, aepo.balanced_clip_losses):
                logprobs = (old + shift).requires_grad_()
                losses, above = fn(logprobs, old, advantages, 0.2, 0.28, 3.0, balanced)
                losses.sum().backward()
                results.append((losses.detach(), logprobs.grad, above))
            close(results[0][0], results[1][0])
            close(results[0][1], results[1][1])
            assert torch.equal(results[0][2], results[1][2])


def test_loss_variants_the_exercise_does_not_cover_are_refused_by_name(references):
    x = torch.zeros(2, 3)
    with pytest.raises(NotImplementedError, match="seq-mean-token-mean"):
        bridges.clipped_surrogate_loss(x, x, torch.zeros(2), torch.ones(2, 3), aggregation="seq-mean-token-mean")
    with pytest.raises(NotImplementedError, match="softmax"):
        bridges.top_p_groups_by_reward_std(torch.zeros(4), torch.tensor([0, 0, 1, 1]), mode="softmax")
    with pytest.raises(NotImplementedError, match="scale_by_std=False"):
        bridges.tree_advantages(torch.zeros(2), torch.zeros(2), torch.zeros(2), scale_by_std=False)


@pytest.mark.parametrize("seed", range(3))
def test_step_groups_gae_branching_and_cross_scoring(references, seed):
    g = torch.Generator().manual_seed(seed)
    returns = torch.randint(0, 3, (12,), generator=g).float().tolist()
    anchors = torch.randint(0, 3, (12,), generator=g).tolist()
    ids = torch.randint(0, 2, (12,), generator=g).tolist()
    close(bridges.step_group_advantages(returns, anchors, ids), gigpo.step_group_advantages(returns, anchors, ids))
    rewards, values = torch.randn(3, 7, generator=g), torch.randn(3, 7, generator=g)
    last = torch.randn(3, generator=g)
    close(bridges.gae(rewards, values, 0.97, 0.9, last), ppo.gae(rewards, values, 0.97, 0.9, last), atol=1e-5)
    close(bridges.gae(rewards[0], values[0], 0.9, 0.5, 0.3), ppo.gae(rewards[0], values[0], 0.9, 0.5, 0.3), atol=1e-5)
    after, initial = torch.rand(5, generator=g) * 3, torch.rand(5, generator=g) * 3
    close(bridges.branch_probability(after, initial), arpo.branch_probability(after, initial))
    assert bridges.branch_probability(2.0, 0.5, 0.4, 0.3) == pytest.approx(arpo.branch_probability(2.0, 0.5, 0.4, 0.3))
    logp = torch.randn(6, 4, generator=g, dtype=torch.float64)
    own = torch.tensor([0, 1, 2, 3, 0, 1])
    for keys in (None, ["a", "b", "a", "c"]):
        got, want = bridges.mutual_information(logp, own, keys), diagnostics.mutual_information(logp, own, keys)
        assert got == pytest.approx(want)


def test_the_rollout_bridge_keeps_the_group(monkeypatch):
    monkeypatch.setattr(bridges, "student", lambda name: lambda engine, policy, env, seed: SimpleNamespace(seed=seed))
    assert bridges.play_episode(None, None, None, seed=3, group_id=7) == SimpleNamespace(seed=3, group_id=7)


def test_the_mark_binds_the_bridge_only_in_the_student_edition(monkeypatch):
    def reference(x):
        """The reference's docstring."""
        return x + 1

    def bridge(x):
        return -x

    monkeypatch.setitem(MARKED, "grpo.group_advantages", MARKED["grpo.group_advantages"])  # restored after the test
    assert implement_it("grpo.group_advantages", bridge)(reference) is reference
    monkeypatch.setattr("course_lib.implement_it.EDITION", "student")
    bound = implement_it("grpo.group_advantages", bridge)(reference)
    assert bound(1) == -1 and bound.__name__ == "reference" and bound.__doc__ == "The reference's docstring."

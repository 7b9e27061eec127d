"""`course.pitfalls`: each check flags a constructed bad case and passes a good one, on exact small inputs."""

from __future__ import annotations

import warnings

import pytest
import torch

from course_lib.course import pitfalls, standins
from course_lib.engine.rollout import Trajectory
from course_lib.envs.base import TextEnv


def trajectory(ids: list[int], mask: list[int], turns: list[int]) -> Trajectory:
    return Trajectory(env=None, token_ids=ids, loss_mask=mask, logprobs=[0.0] * len(ids), entropies=[0.0] * len(ids),
                      turn_ids=turns)  # fmt: skip


# Reports -----------------------------------------------------------------------------------------------------
def test_a_flagged_report_warns_raises_or_returns_as_asked():
    bad = torch.tensor([[0.0, 1.0, 1.0]]), torch.tensor([[0.0, 1.0, 0.0]])
    with pytest.warns(pitfalls.PitfallWarning, match="environment tokens in the loss"):
        pitfalls.check_observation_share(*bad)
    with pytest.raises(pitfalls.PitfallError, match=r"FLAG environment tokens in the loss: 50.0% of 2 loss tokens"):
        pitfalls.check_observation_share(*bad, on_flag="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert pitfalls.check_observation_share(*bad, on_flag="return").flagged
    with pytest.raises(ValueError, match="on_flag"):
        pitfalls.check_observation_share(*bad, on_flag="ignore")


def test_a_passing_check_neither_warns_nor_raises():
    mask = torch.tensor([[0.0, 1.0, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = pitfalls.check_observation_share(mask, mask, on_flag="raise")
    assert not report.flagged and str(report).startswith("ok ")


# 1, 2 --------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer():
    return standins.default_tokenizer()


def test_policy_turns_are_the_runs_of_policy_tokens_per_turn():
    t = trajectory([9] * 8, [0, 1, 1, 0, 1, 1, 1, 0], [-1, 0, 0, 0, 1, 1, 2, 2])
    assert pitfalls.policy_turns(t) == [(1, 3), (4, 6), (6, 7)]


def test_retokenization_flags_non_canonical_ids_and_passes_canonical_ones(tokenizer):
    """`<answer>` encoded by the tokenizer survives decode -> encode; the same text spelt byte by byte does not."""
    canonical = tokenizer.backend_tokenizer.encode("<answer> 12 </answer>", add_special_tokens=False).ids
    spelt = [tokenizer.convert_tokens_to_ids(c) for c in "<answer>"]
    assert len(spelt) == 8 and len(canonical) < len(spelt) + 6
    good = trajectory([0, *canonical], [0] + [1] * len(canonical), [-1] + [0] * len(canonical))
    bad = trajectory([0, *spelt], [0] + [1] * 8, [-1] + [0] * 8)
    passed = pitfalls.check_retokenization(tokenizer, [good], on_flag="return")
    assert not passed.flagged and passed.numbers == {"turns": 1.0, "changed": 0.0, "lossy": 0.0,
                                                     "tokens": float(len(canonical))}  # fmt: skip
    flagged = pitfalls.check_retokenization(tokenizer, [good, bad], on_flag="return")
    assert flagged.flagged and flagged.numbers["changed"] == 1 and flagged.numbers["turns"] == 2
    ids, mask, spans = pitfalls.retokenized(tokenizer, bad)
    assert ids[1:] == tokenizer.backend_tokenizer.encode("<answer>", add_special_tokens=False).ids
    assert spans == [(1, len(ids))] and mask == [0] + [1] * (len(ids) - 1)


def test_template_check_flags_the_stripping_template_only(tokenizer):
    episode = [("user", "q"), ("assistant", "<think> a </think> <tool_call> 1 + 2 </tool_call>"), ("tool", "3")]
    stripping = standins.default_tokenizer()
    stripping.chat_template = standins.chat_template(False, strip_reasoning=True)
    flagged = pitfalls.check_incremental_template(stripping, [episode, episode[:2]], on_flag="return")
    assert flagged.flagged and flagged.numbers == {"episodes": 2.0, "broken": 1.0}
    assert not pitfalls.check_incremental_template(tokenizer, [episode], on_flag="return").flagged


# 3, 4 --------------------------------------------------------------------------------------------------------
ACTION = torch.tensor([[0, 1, 1, 0, 0, 1, 0], [0, 1, 1, 1, 0, 0, 0]], dtype=torch.float)


def test_shifted_right_moves_the_mask_one_token_later():
    assert pitfalls.shifted_right(ACTION).tolist() == [[0, 0, 1, 1, 0, 0, 1], [0, 0, 1, 1, 1, 0, 0]]


def test_alignment_check_counts_off_action_and_missed_tokens():
    advantages = torch.tensor([1.5, -0.5])
    fixed = pitfalls.check_advantage_alignment(advantages, ACTION, ACTION, on_flag="return")
    assert not fixed.flagged
    assert fixed.numbers == {"carrying": 6.0, "off_action": 0.0, "action_tokens": 6.0, "missed": 0.0}
    broken = pitfalls.check_advantage_alignment(advantages, pitfalls.shifted_right(ACTION), ACTION, on_flag="return")
    assert broken.flagged
    # positions 3 and 6 of row 0, 4 of row 1 are not actions; positions 1 and 5 of row 0, 1 of row 1 are skipped
    assert broken.numbers == {"carrying": 6.0, "off_action": 3.0, "action_tokens": 6.0, "missed": 3.0}


def test_alignment_ignores_rows_without_advantage():
    """A row whose advantage is 0 (an all-equal group) carries nothing wherever its mask is."""
    report = pitfalls.check_advantage_alignment(torch.tensor([0.0, 0.0]), torch.ones(2, 7), ACTION, on_flag="return")
    assert not report.flagged and report.numbers["carrying"] == 0


def test_observation_share_is_the_environment_tokens_share_of_the_loss():
    everything = torch.tensor([[0, 1, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 0, 0]], dtype=torch.float)
    broken = pitfalls.check_observation_share(everything, ACTION, on_flag="return")
    assert broken.flagged and broken.numbers == {"loss_tokens": 9.0, "environment_tokens": 3.0, "share": 3 / 9}
    assert not pitfalls.check_observation_share(everything, ACTION, max_share=0.4, on_flag="return").flagged
    assert not pitfalls.check_observation_share(ACTION, ACTION, on_flag="return").flagged


# 5 -----------------------------------------------------------------------------------------------------------
class Counter(TextEnv):
    """A one-step environment whose instances share a class-level list when `leaky` (a classic shared-state bug)."""

    shared_log: list[str] = []

    def __init__(self, leaky: bool = False):
        self.log = Counter.shared_log if leaky else []
        self.done = False

    def reset(self, seed: int | None = None):
        self.done = False
        return "go", {}

    def step(self, action: str):
        self.log.append(action)
        self.done = True
        return "", 0.0, True, False, {}


def test_env_isolation_flags_a_cached_instance_and_shared_state():
    shared = Counter()
    same = pitfalls.check_env_isolation(lambda: shared, on_flag="return")
    assert same.flagged and same.numbers["same_object"] == 1
    leaky = pitfalls.check_env_isolation(lambda: Counter(leaky=True), action="x", on_flag="return")
    assert leaky.flagged and leaky.numbers == {"same_object": 0.0, "leaked": 1.0, "state_checked": 1.0}
    fine = pitfalls.check_env_isolation(Counter, action="x", on_flag="return")
    assert not fine.flagged and fine.numbers == {"same_object": 0.0, "leaked": 0.0, "state_checked": 1.0}


def test_distinct_envs_counts_objects():
    one = Counter()
    assert pitfalls.check_distinct_envs([one] * 4, on_flag="return").numbers == {"envs": 4.0, "distinct": 1.0}
    assert not pitfalls.check_distinct_envs([Counter() for _ in range(4)], on_flag="return").flagged


# 6 -----------------------------------------------------------------------------------------------------------
def test_zero_variance_share_is_per_group():
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    flagged = pitfalls.check_zero_variance_groups(rewards, torch.tensor([0, 0, 1, 1, 2, 2]), on_flag="return")
    assert flagged.flagged and flagged.numbers == {"groups": 3.0, "zero_std_groups": 2.0, "share": 2 / 3,
                                                   "rows_without_signal": 4.0}  # fmt: skip
    passed = pitfalls.check_zero_variance_groups(rewards, torch.tensor([0, 1, 0, 1, 2, 2]), on_flag="return")
    assert not passed.flagged and passed.numbers["zero_std_groups"] == 0


# 7, 8 --------------------------------------------------------------------------------------------------------
def test_entropy_check_flags_a_doubling_or_a_collapse_within_its_window():
    rising = [{"entropy": 0.5}, {"eval_success": 0.3}, {"entropy": 0.8}, {"entropy": 1.25}]
    report = pitfalls.check_entropy(rising, on_flag="return")
    assert report.flagged and "blow-up" in report.message
    assert report.numbers == {"first": 0.5, "peak": 1.25, "low": 0.5, "rise": 1.5, "fall": 0.0, "records": 3.0}
    collapsing = [{"entropy": 0.5}, {"entropy": 0.3}, {"entropy": 0.05}]
    report = pitfalls.check_entropy(collapsing, on_flag="return")
    assert report.flagged and "collapse" in report.message and report.numbers["fall"] == pytest.approx(0.9)
    steady = [{"entropy": 0.5}, {"entropy": 0.9}, {"entropy": 0.2}]  # within 2x up and 0.2x down
    assert not pitfalls.check_entropy(steady, on_flag="return").flagged
    assert not pitfalls.check_entropy(collapsing, window=2, on_flag="return").flagged, "only the first 2 records"
    with pytest.raises(ValueError, match="entropy"):
        pitfalls.check_entropy([{"loss": 1.0}])


def test_ratio_stats_and_staleness_on_known_ratios():
    behaviour = torch.zeros(1, 4)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    current = torch.log(torch.tensor([[1.0, 1.5, 0.9, 9.0]]))  # the unmasked ratio 9 is not counted
    stats = pitfalls.ratio_stats(current, behaviour, mask)
    assert stats["ratio_mean"] == pytest.approx(3.4 / 3)
    assert stats["outside_clip"] == pytest.approx(1 / 3)
    assert stats["max_log_ratio"] == pytest.approx(torch.log(torch.tensor(1.5)).item())
    kl = (0.5 - torch.log(torch.tensor(1.5)) + (-0.1) - torch.log(torch.tensor(0.9))) / 3
    assert stats["kl"] == pytest.approx(kl.item(), rel=1e-5)
    assert pitfalls.check_staleness(current, behaviour, mask, on_flag="return").flagged
    fresh = pitfalls.check_staleness(behaviour, behaviour, mask, on_flag="return")
    assert not fresh.flagged and fresh.numbers["outside_clip"] == 0 and fresh.numbers["kl"] == 0
    with pytest.raises(ValueError, match="no token"):
        pitfalls.ratio_stats(current, behaviour, torch.zeros(1, 4))

"""A test of the implement-it exercises' tests (`exercises/`): the library's implementations pass every check, every
stub fails with the not-implemented message, and for each exercise a plausible wrong implementation (a mutant) is
caught by the check meant for it, with its teaching message. Then `pytest exercises/` once on the stubs (it fails)
and once with `--impl library` (it passes), in subprocesses as a student would run it."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import exercises
from course_lib.algos import aepo, filters
from exercises.checks import cases, exercise, first_failure, implementation, run_case
from tests.project.test_rollout_exercise import MUTANTS as ROLLOUT_MUTANTS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", exercises.NAMES)
def test_the_library_passes_every_check(name, capsys):
    count = len(cases(name))
    assert count >= 4, "each exercise has several checks"
    assert first_failure(name, implementation(name, "library")) == (count, None)
    exercises.check(name, use="library")
    assert capsys.readouterr().out == f"{name}: library implementation passes {count} checks\n"


@pytest.mark.parametrize("name", exercises.NAMES)
def test_every_stub_fails_with_the_not_implemented_message(name, capsys):
    item = exercise(name)
    message = f"{name}: not implemented yet: fill in exercises/{item.module}.py::{item.function}"
    assert first_failure(name, implementation(name, "mine")) == (0, message)
    exercises.check(name, use="mine")
    assert capsys.readouterr().out == message + "\n"
    assert (ROOT / "exercises" / f"{item.module}.py").exists() and (ROOT / item.reference).exists()


def test_check_leaves_the_global_generators_alone(capsys):
    """A notebook runs `check` between seeded cells: it must not move torch's or Python's global random state."""
    torch_state, python_state = torch.get_rng_state(), random.getstate()
    for name in exercises.NAMES:
        exercises.check(name)
    capsys.readouterr()
    assert torch.equal(torch.get_rng_state(), torch_state) and random.getstate() == python_state


def test_the_readme_table_lists_every_exercise_with_its_chapter_and_files():
    rows = {}
    for line in (ROOT / "exercises" / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`") and "." in cells[0].split("`")[1]:
            rows[cells[0].split("`")[1]] = cells[1:]
    assert list(rows) == list(exercises.NAMES)
    for name, (chapter, stub, reference) in rows.items():
        item = exercise(name)
        assert (chapter, stub) == (item.chapter, f"`exercises/{item.module}.py`")
        assert reference.startswith(f"`{item.reference}`")


def test_check_rejects_unknown_names_and_uses():
    with pytest.raises(ValueError, match="no exercise"):
        exercises.check("grpo.nothing")
    with pytest.raises(ValueError, match="use must be"):
        exercises.check("ppo.gae", use="yours")


# -- mutants: plausible mistakes, each with the message that must catch it -----------------------------------------


def grouped(rewards, ids, per_group):
    """Apply `per_group(values) -> advantages` to each group's rewards (a scaffold for GRPO mutants)."""
    out = torch.zeros(len(rewards))
    for group in torch.unique(ids):
        members = ids == group
        out[members] = per_group(rewards[members].float())
    return out


def grpo_population_std(rewards, ids, scale_by_std=True, eps=1e-6):
    def one(v):
        if v.numel() < 2 or torch.all(v == v[0]):
            return torch.zeros_like(v)
        return (v - v.mean()) / (v.std(correction=0) + eps) if scale_by_std else v - v.mean()

    return grouped(rewards, ids, one)


def grpo_singletons_not_zeroed(rewards, ids, scale_by_std=True, eps=1e-6):
    def one(v):
        if v.numel() >= 2 and torch.all(v == v[0]):
            return torch.zeros_like(v)
        return (v - v.mean()) / (v.std() + eps) if scale_by_std else v - v.mean()

    return grouped(rewards, ids, one)


def grpo_flat_not_tested(rewards, ids, scale_by_std=True, eps=1e-6):
    def one(v):
        if v.numel() < 2:
            return torch.zeros_like(v)
        return (v - v.mean()) / (v.std() + eps) if scale_by_std else v - v.mean()

    return grouped(rewards, ids, one)


def grpo_one_baseline_for_the_batch(rewards, ids, scale_by_std=True, eps=1e-6):
    rewards = rewards.float()
    return (rewards - rewards.mean()) / (rewards.std() + eps)


def surrogate(logprobs, old, advantages, mask, clip_low, clip_high, pick=torch.minimum, aggregate=None):
    ratio = torch.exp(logprobs - old)
    a = advantages[:, None].expand_as(ratio)
    values = -pick(ratio * a, torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * a)
    if aggregate is not None:
        return aggregate(values, mask)
    return (values * mask).sum() / mask.sum().clamp(min=1)


def loss_mask_ignored(logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.2):
    return surrogate(logprobs, old, advantages, mask, clip_low, clip_high, aggregate=lambda v, m: v.mean())


def loss_sequence_mean(logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.2):
    def per_sequence(values, mask):
        return ((values * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()

    return surrogate(logprobs, old, advantages, mask, clip_low, clip_high, aggregate=per_sequence)


def loss_max_instead_of_min(logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.2):
    return surrogate(logprobs, old, advantages, mask, clip_low, clip_high, pick=torch.maximum)


def loss_clips_swapped(logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.2):
    return surrogate(logprobs, old, advantages, mask, clip_high, clip_low)


def loss_as_a_number(logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.2):
    return torch.tensor(surrogate(logprobs, old, advantages, mask, clip_low, clip_high).item())


def gigpo_mutant(rewards, anchors, group_ids, gamma, scale_by_std=True, eps=1e-6, *, key_group=True,
                 discount=True, zero_singletons=True, correction=1):  # fmt: skip
    returns = []
    for row in rewards:
        running, out = 0.0, []
        for r in reversed(row):
            running = r + (gamma if discount else 1.0) * running
            out.append(running)
        returns.append(out[::-1])
    members = {}
    for t_anchors, t_returns, group in zip(anchors, returns, group_ids):
        for a, value in zip(t_anchors, t_returns):
            members.setdefault((group, a) if key_group else a, []).append(value)

    def advantage(key, value):
        sample = members[key]
        if (zero_singletons and len(sample) < 2) or (len(sample) > 1 and all(v == sample[0] for v in sample)):
            return 0.0
        mean = sum(sample) / len(sample)
        denominator = len(sample) - correction
        std = math.sqrt(sum((v - mean) ** 2 for v in sample) / denominator) if denominator > 0 else float("nan")
        return (value - mean) / (std + eps) if scale_by_std else value - mean

    return [
        [advantage((g, a) if key_group else a, v) for a, v in zip(t_anchors, t_returns)]
        for t_anchors, t_returns, g in zip(anchors, returns, group_ids)
    ]


def branch(after, initial, generator, alpha=0.5, beta=0.2, *, clip=True, sign=1.0, draw=None, skip_ends=False):
    p = alpha + beta * sign * (after - initial)
    p = min(1.0, max(0.0, p)) if clip else p
    if skip_ends and p in (0.0, 1.0):
        return p, p == 1.0
    u = draw() if draw is not None else torch.rand((), generator=generator).item()
    return p, u < p


def gae_mutant(rewards, values, dones, gamma, lam, last_value=0.0, *, cut_bootstrap=False, cut_carry=False,
               use_lam=True):  # fmt: skip
    dones = torch.as_tensor(dones).double()
    out = torch.zeros_like(rewards)
    next_value, running = float(last_value), 0.0
    for t in reversed(range(len(rewards))):
        keep = 1.0 - float(dones[t])
        delta = rewards[t] + gamma * next_value * (keep if cut_bootstrap else 1.0) - values[t]
        running = delta + gamma * (lam if use_lam else 1.0) * (keep if cut_carry else 1.0) * running
        out[t] = running
        next_value = float(values[t])
    return out


def starpo_lowest(rewards, ids, keep_fraction=0.25):
    order, stds = filters.group_reward_std(rewards, ids)
    ranked = sorted(range(len(order)), key=lambda k: stds[k].item())[: int(keep_fraction * len(order))]
    return torch.tensor([int(g) in {order[k] for k in ranked} for g in ids])


def starpo_rounded(rewards, ids, keep_fraction=0.25):
    order, stds = filters.group_reward_std(rewards, ids)
    ranked = sorted(range(len(order)), key=lambda k: -stds[k].item())[: round(keep_fraction * len(order))]
    return torch.tensor([int(g) in {order[k] for k in ranked} for g in ids])


def starpo_nan_singletons(rewards, ids, keep_fraction=0.25):
    """torch.std of a single row is NaN, and a descending torch.sort puts NaN first."""
    ids = torch.as_tensor(ids)
    groups = list(dict.fromkeys(ids.tolist()))
    stds = torch.stack([rewards[ids == g].double().std() for g in groups])
    ranked = torch.sort(stds, descending=True, stable=True).indices[: int(keep_fraction * len(groups))]
    kept = {groups[k] for k in ranked.tolist()}
    return torch.tensor([g in kept for g in ids.tolist()])


def snr_all_at_one(rewards, ids, top_p=0.9, eps=0.01):
    if top_p == 1.0:
        return torch.ones(len(ids), dtype=torch.bool)
    return filters.top_p_groups_by_reward_std(rewards, ids, top_p, eps=eps)


def snr_without_eps(rewards, ids, top_p=0.9, eps=0.01):
    return filters.top_p_groups_by_reward_std(rewards, ids, top_p, eps=0.0)


def snr_smallest_first(rewards, ids, top_p=0.9, eps=0.01):
    order, stds = filters.group_reward_std(rewards, ids)
    ranked = [k for k in sorted(range(len(order)), key=lambda k: stds[k].item()) if stds[k] > 1e-10]
    threshold, kept, total = top_p * sum(stds[k].item() for k in ranked) - eps, set(), 0.0
    for k in ranked:
        if total >= threshold:
            break
        kept.add(order[k])
        total += stds[k].item()
    return torch.tensor([int(g) in kept for g in ids])


def mi_mutant(logp, own, *, log_p=True, stable=True, ties_count=False):
    own = torch.as_tensor(own)
    matched = logp[torch.arange(len(own)), own]
    total = torch.logsumexp(logp, 1) if stable else torch.log(torch.exp(logp).sum(1))
    mi = (matched - total + (math.log(logp.shape[1]) if log_p else 0.0)).mean()
    correct = matched >= logp.max(1).values if ties_count else logp.argmax(1) == own
    return {"mi": float(mi), "retrieval_accuracy": float(correct.double().mean())}


def aepo_soft_lower_clip(logprobs, old, advantages, clip_low=0.2, clip_high=0.2, dual_clip=3.0):
    ratio = torch.exp(logprobs - old)
    scale = ratio / ratio.detach()
    clipped = torch.where(
        ratio > 1 + clip_high, (1 + clip_high) * scale, torch.where(ratio < 1 - clip_low, (1 - clip_low) * scale, ratio)
    )
    a = advantages[:, None].expand_as(ratio) if advantages.dim() == 1 else advantages
    losses = torch.maximum(-a * ratio, -a * clipped)
    return torch.where(a < 0, torch.minimum(losses, -a * dual_clip), losses)


def aepo_without_dual_clip(logprobs, old, advantages, clip_low=0.2, clip_high=0.2, dual_clip=3.0):
    return aepo.balanced_clip_losses(logprobs, old, advantages, clip_low, clip_high, dual_clip=1e9)[0]


def aepo_hard_clip(logprobs, old, advantages, clip_low=0.2, clip_high=0.2, dual_clip=3.0):
    return aepo.balanced_clip_losses(logprobs, old, advantages, clip_low, clip_high, dual_clip, balanced=False)[0]


def gae_variant(**kwargs):
    def fn(rewards, values, dones, gamma, lam, last_value=0.0):
        return gae_mutant(rewards, values, dones, gamma, lam, last_value, **kwargs)

    return fn


def update_by_hand(
    model,
    rows,
    pad_id,
    config,
    optimizer,
    temperature=1.0,
    *,
    baseline="group",
    zero_grad=True,
    old="recorded",
    clip=True,
    mask="loss",
):
    """A student's GRPO update written from the library's parts; the keywords plant one mistake each."""
    from course_lib.algos.grpo import clipped_surrogate_loss, group_advantages
    from course_lib.engine.rollout import collate
    from course_lib.models import token_logprobs

    batch = collate(rows, pad_id)
    groups = batch.group_ids if baseline == "group" else torch.zeros_like(batch.group_ids)
    advantages = group_advantages(batch.rewards, groups, config.scale_by_std)
    loss_mask = batch.loss_mask if mask == "loss" else batch.attention_mask.float()
    model.train()
    for _ in range(config.updates_per_batch):
        if zero_grad:
            optimizer.zero_grad()
        logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, temperature)
        old_logprobs = batch.old_logprobs if old == "recorded" else logprobs.detach()
        loss, _ = clipped_surrogate_loss(
            logprobs, old_logprobs, advantages, loss_mask, config.clip_low, config.clip_high
        )
        loss.backward()
        if clip:  # True: the config's bound; a number: that bound, hard-coded
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm if clip is True else clip)
        optimizer.step()
    model.eval()
    return loss.item()


def update_variant(**mistake):
    def fn(model, rows, pad_id, config, optimizer, temperature=1.0):
        return update_by_hand(model, rows, pad_id, config, optimizer, temperature, **mistake)

    return fn


def test_a_missing_gradient_clip_is_never_blamed_on_pi_old():
    """Issue 59: without the clip, the second check's message blamed pi_old (the second update's loss differs because
    the first step did). Every failing check now names the step, none pi_old."""
    fn = update_variant(clip=False)
    messages = [message for case in cases("loop.grpo_update") if (message := run_case(case, fn))]
    assert len(messages) == 3 and all("clip the" in m.lower() and "gradient norm" in m for m in messages), messages
    assert not any("pi_old" in message for message in messages), messages


def test_a_hand_written_update_passes_the_loop_checks():
    """The loop exercise's checks accept an update written by hand from the library's parts, not only the library's
    own `policy_iteration`."""
    assert first_failure("loop.grpo_update", update_variant()) == (len(cases("loop.grpo_update")), None)


def tree_mutant(rewards, prompt_ids, tree_ids, eps=1e-6, *, singleton="zero", correction=1, intra=True):
    """Tree-GRPO with a planted mistake: a one-leaf tree's raw reward (the official code's), a population std, or
    no intra-tree term."""

    def z_scores(keys):
        out = [0.0] * len(rewards)
        for key in set(keys):
            rows = [i for i, k in enumerate(keys) if k == key]
            values = [float(rewards[i]) for i in rows]
            if len(values) == 1 and singleton == "raw":
                out[rows[0]] = values[0]
                continue
            if len(values) < 2 or len(set(values)) == 1:
                continue
            mean = sum(values) / len(values)
            std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - correction))
            for i in rows:
                out[i] = (float(rewards[i]) - mean) / (std + eps)
        return out

    inter = z_scores(list(prompt_ids))
    inner = z_scores(list(tree_ids)) if intra else [0.0] * len(rewards)
    return [a + b for a, b in zip(inter, inner)]


MUTANTS = [  # exercise, mutant, the check that must catch it, words of its message
    ("grpo.group_advantages", grpo_population_std, "one group by hand", "unbiased (n - 1) std"),
    (
        "grpo.group_advantages",
        grpo_singletons_not_zeroed,
        "singleton group",
        "advantages of a singleton group must be 0",
    ),
    ("grpo.group_advantages", grpo_flat_not_tested, "all-equal group", "must be exactly 0"),
    ("grpo.group_advantages", grpo_one_baseline_for_the_batch, "groups by id", "each group is normalised on its own"),
    ("grpo.clipped_surrogate_loss", loss_mask_ignored, "response tokens only", "only average over response tokens"),
    ("grpo.clipped_surrogate_loss", loss_sequence_mean, "on-policy token-mean", "token-mean"),
    ("grpo.clipped_surrogate_loss", loss_max_instead_of_min, "clip regions", "A > 0, ratio 1.5"),
    ("grpo.clipped_surrogate_loss", loss_clips_swapped, "clip-higher", "clip_high bounds the ratio from above"),
    ("grpo.clipped_surrogate_loss", loss_as_a_number, "response tokens only", "must stay connected to logprobs"),
    (
        "gigpo.step_group_advantages",
        lambda *a, **k: gigpo_mutant(*a, **k, zero_singletons=False),
        "singleton step groups",
        "advantages of a singleton step group must be 0",
    ),  # fmt: skip
    (
        "gigpo.step_group_advantages",
        lambda *a, **k: gigpo_mutant(*a, **k, key_group=False),
        "group id in the key",
        "keyed by (episode group id, anchor)",
    ),  # fmt: skip
    (
        "gigpo.step_group_advantages",
        lambda *a, **k: gigpo_mutant(*a, **k, discount=False),
        "shared first state",
        "discounted returns",
    ),  # fmt: skip
    (
        "gigpo.step_group_advantages",
        lambda *a, **k: gigpo_mutant(*a, **k, correction=0),
        "shared first state",
        "unbiased std",
    ),  # fmt: skip
    ("arpo.branch_decision", lambda *a, **k: branch(*a, **k, sign=-1.0), "probability by hand", "more branching"),
    ("arpo.branch_decision", lambda *a, **k: branch(*a, **k, clip=False), "probability clipped", "must be clipped"),
    ("arpo.branch_decision", lambda *a, **k: branch(*a, **k, skip_ends=True), "exact at 0 and 1", "must advance"),
    (
        "arpo.branch_decision",
        lambda *a, **k: branch(*a, **k, draw=random.random),
        "reproducible draws",
        "seeded alike must give the same decisions",
    ),  # fmt: skip
    ("ppo.gae", gae_variant(), "one step", "last_value must be ignored"),
    ("ppo.gae", gae_variant(cut_bootstrap=True), "done in the middle", "do not carry the next advantage across"),
    (
        "ppo.gae",
        gae_variant(cut_bootstrap=True, cut_carry=True, use_lam=False),
        "two steps bootstrapped",
        "gamma * lam * A_1",
    ),
    ("filters.starpo_s", starpo_lowest, "top quarter", "LARGEST reward std"),
    ("filters.starpo_s", starpo_rounded, "rounding down", "rounds down"),
    ("filters.starpo_s", starpo_nan_singletons, "singleton and ties", "std 0"),
    ("filters.snr", snr_smallest_first, "top-p by hand", "largest first"),
    ("filters.snr", snr_all_at_one, "zero-std groups", "never kept, even at top_p 1"),
    ("filters.snr", snr_without_eps, "eps tail", "top_p * total - eps"),
    ("mi.cross_scoring", lambda *a: mi_mutant(*a, log_p=False), "independent of the input", "+ log P"),
    ("mi.cross_scoring", lambda *a: mi_mutant(*a, stable=False), "long sequences", "torch.logsumexp"),
    ("mi.cross_scoring", lambda *a: mi_mutant(*a, ties_count=True), "independent of the input", "ties to the lowest j"),
    ("aepo.balanced_clip", aepo_hard_clip, "gradients per region", "the gradient is KEPT"),
    ("aepo.balanced_clip", aepo_without_dual_clip, "values per region", "capped at -A * dual_clip"),
    ("aepo.balanced_clip", aepo_soft_lower_clip, "gradients per region", "the lower clip stays hard"),
    ("loop.grpo_update", update_variant(baseline="batch"), "one update", "against its own group"),
    ("loop.grpo_update", update_variant(mask="attention"), "one update", "loss mask 1"),
    ("loop.grpo_update", update_variant(zero_grad=False), "several updates", "Zero the gradients before each"),
    ("loop.grpo_update", update_variant(old="current"), "several updates", "not the current ones"),
    ("loop.grpo_update", update_variant(clip=False), "one update", "clip the gradient norm to config.max_grad_norm"),
    ("loop.grpo_update", update_variant(clip=1.0), "Dr. GRPO, tight clip", "Clip the total gradient norm"),
    (
        "tree_grpo.tree_advantages",
        lambda *a, **k: tree_mutant(*a, **k, singleton="raw"),
        "chains are GRPO",
        "a one-leaf tree adds nothing",
    ),  # fmt: skip
    ("tree_grpo.tree_advantages", lambda *a, **k: tree_mutant(*a, **k, intra=False), "one tree doubles", "added"),
    (
        "tree_grpo.tree_advantages",
        lambda *a, **k: tree_mutant(*a, **k, correction=0),
        "chains are GRPO",
        "unbiased std",
    ),  # fmt: skip
]


# the rollout's mistakes, planted in a rollout written by hand (tests/project/test_rollout_exercise.py)
MUTANTS += ROLLOUT_MUTANTS


@pytest.mark.filterwarnings("ignore:std\\(\\):UserWarning")  # the singleton mutants' NaN std
@pytest.mark.parametrize("name, mutant, title, words", MUTANTS, ids=lambda v: v if isinstance(v, str) else "")
def test_a_plausible_mistake_is_caught_with_its_message(name, mutant, title, words):
    passed, message = first_failure(name, mutant)
    assert message is not None, f"{name}: the mutant passes every check"
    assert message.startswith(f"{name}: check '{title}' fails: "), message
    assert words in message, message
    assert passed == [t for t, _ in exercise(name).cases].index(title)


def test_every_exercise_has_a_mutant():
    assert {name for name, *_ in MUTANTS} == set(exercises.NAMES)


def run_pytest(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("EXERCISES_IMPL", None)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "exercises/", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_pytest_exercises_fails_on_the_stubs_and_passes_on_the_library():
    stubs = run_pytest()
    assert stubs.returncode == 1, stubs.stdout[-2000:]
    total = sum(len(cases(name)) for name in exercises.NAMES)
    assert f"{total} failed" in stubs.stdout, stubs.stdout[-2000:]
    for name in exercises.NAMES:
        item = exercise(name)
        assert f"{name}: not implemented yet: fill in exercises/{item.module}.py::{item.function}" in stubs.stdout
    assert "solutions" not in stubs.stdout and "measure" not in stubs.stdout, "solution scripts are never collected"
    library = run_pytest("--impl", "library", "-vv")  # -q -vv: one line per test
    assert library.returncode == 0, library.stdout[-2000:]
    assert f"{total} passed" in library.stdout, library.stdout[-2000:]
    collected = [line.split("::")[0] for line in library.stdout.splitlines() if " PASSED" in line]
    assert len(collected) == total and all(path.startswith("exercises/test_") for path in collected), collected


# -- grading: the autograder's results as the rubric's points ----------------------------------------------------


def test_grade_gives_the_rubrics_check_points_to_the_library_none_to_the_stubs_and_a_share_to_half_done_work(
    monkeypatch, capsys
):
    """Issue 59: `python -m exercises.grade` turns the checks into the rubric's 4 of 10 points per exercise, each check
    run on its own. Tested on the stubs (0), the library (all) and a half-done submission: two exercises written
    (one right, one with a planted mistake that fails one check of four), the rest stubs."""
    from exercises import grade

    stubs = grade.grade("mine")
    assert [g.points for g in stubs] == [0.0] * len(exercises.NAMES)
    assert all(g.first_failure.endswith(f"not implemented yet: fill in {exercise(g.exercise).stub}") for g in stubs)
    library = grade.grade("library")
    assert [(g.passed, g.points) for g in library] == [(len(cases(g.exercise)), 4.0) for g in library]

    import exercises.checks as checks

    written = {"ppo.gae": implementation("ppo.gae", "library"), "loop.grpo_update": update_variant(clip=1.0)}
    stub_of = checks.implementation
    monkeypatch.setattr(checks, "implementation", lambda name, use="mine": written.get(name) or stub_of(name, use))
    half = {g.exercise: g for g in grade.grade("mine")}
    assert (half["ppo.gae"].passed, half["ppo.gae"].points) == (len(cases("ppo.gae")), 4.0)
    assert (half["loop.grpo_update"].passed, half["loop.grpo_update"].points) == (3, 3.0)
    assert "Dr. GRPO, tight clip" in half["loop.grpo_update"].first_failure
    assert sum(g.points for g in half.values()) == 7.0
    print(grade.report(list(half.values())))
    table = capsys.readouterr().out
    assert "loop.grpo_update" in table and " 3/4    3" in table
    assert table.rstrip().endswith(
        f'automated: 7 of {4 * len(exercises.NAMES)} points ("the checks pass", 4 of each exercise\'s 10); the other '
        "6 per exercise are the instructor's"
    )

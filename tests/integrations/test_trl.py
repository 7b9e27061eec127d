"""Chapter environments under TRL's `GRPOTrainer` (`course_lib.integrations.course_trl`): the rollout hook's fields,
what TRL builds from them (its loss mask and group advantages), the command line, and the TRL benchmark."""

from __future__ import annotations

import copy
import math
import re

import pytest
import torch

from course_lib import data
from course_lib.engine.bookkeeping import expected_tokens
from course_lib.engine.rollout import RolloutEngine
from course_lib.envs.function_calling import answer_text
from course_lib.integrations import course_trl
from course_lib.lab import trl_pairs
from course_lib.tokenizer import encode


@pytest.fixture(scope="module")
def ch00():
    task = course_trl.chapter_task("00")
    model, tokenizer = data.load_base(task.base)
    return task, model, tokenizer


def test_a_trajectory_splits_into_prompt_and_completion_with_the_environment_masked(ch00):
    task, model, tokenizer = ch00
    engine = RolloutEngine(model, tokenizer, task.sampling)
    trajectories = engine.rollout([task.make_env() for _ in range(32)], list(range(32)), generator=torch.Generator())
    with_tool = 0
    for t in trajectories:
        fields = course_trl.split_trajectory(t)
        assert fields["prompt_ids"] + fields["completion_ids"] == t.token_ids
        assert fields["prompt_ids"][0] == tokenizer.bos_token_id and 1 not in t.loss_mask[: len(fields["prompt_ids"])]
        # The mask rebuilt from the environment's transcript, independently of the engine's bookkeeping.
        _, mask = expected_tokens(t, tokenizer)
        assert fields["env_mask"] == mask[len(fields["prompt_ids"]) :]
        assert len(fields["logprobs"]) == len(fields["completion_ids"])
        assert fields["env_reward"] == t.total_reward
        with_tool += 0 in fields["env_mask"]
    assert with_tool > 0  # some completions hold tool output, which the mask must exclude


def test_trl_trains_on_policy_tokens_only_with_group_advantages_of_the_env_reward(ch00):
    """What TRL builds from `course_rollout`: its loss mask is 0 on every environment token, and its advantages are
    the environment rewards normalised per group of `num_generations` (TRL's std + 1e-4, unbiased std)."""
    task, model, tokenizer = ch00
    settings = course_trl.TRLSettings(steps=1, prompts=4, group=4)
    trainer = course_trl.rollout_trainer("00", settings, copy.deepcopy(model), tokenizer)
    returned = {}

    def capture(prompts, trl_trainer):
        returned.update(trainer_rollout(prompts, trl_trainer))
        return dict(returned)

    trainer_rollout, trainer.rollout_func = trainer.rollout_func, capture
    prompts = list(course_trl.training_prompts(task, 4))
    batch = trainer._generate_and_score_completions([{"prompt": p} for p in prompts for _ in range(4)])

    loss_mask = batch["completion_mask"] * batch["tool_mask"]
    for row, env_mask in enumerate(returned["env_mask"]):
        assert loss_mask[row, : len(env_mask)].tolist() == env_mask
        assert loss_mask[row, len(env_mask) :].sum() == 0  # padding
    rewards = torch.tensor(returned["env_reward"]).view(4, 4)
    expected = (rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)
    torch.testing.assert_close(batch["advantages"].view(4, 4), expected)


def test_the_command_trains_and_prints_steps_loss_and_reward_last(capsys):
    assert course_trl.main(["--chapter", "00", "--steps", "3"]) == 0  # the command as documented, 8 x 8 per step
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines[:-1]] == ["step 1", "step 2", "step 3"]
    match = re.fullmatch(r"trl_grpo_steps=3 loss=(-?\d+\.\d{4}) reward=(-?\d+\.\d{4})", lines[-1])
    assert match, lines[-1]
    assert math.isfinite(float(match[1])) and 0.0 <= float(match[2]) <= 1.0  # chapter 00's reward is 0 or 1


def test_trl_updates_the_weights(ch00):
    _, model, tokenizer = ch00
    trained = copy.deepcopy(model)
    trainer = course_trl.rollout_trainer("00", course_trl.TRLSettings(steps=2, prompts=4, group=4), trained, tokenizer)
    course_trl.quiet_train(trainer)
    assert trainer.state.global_step == 2
    moved = [not torch.equal(a, b) for a, b in zip(model.parameters(), trained.parameters(), strict=True)]
    assert all(moved)


def test_the_single_turn_reward_plays_the_completion_in_the_environment():
    task = course_trl.chapter_task("05")
    model, tokenizer = data.load_base(task.base)
    seeds = course_trl.training_prompts(task, 2)
    question, seed = next(iter(seeds.items()))
    env = task.make_env()
    env.reset(seed=seed)
    answer = answer_text(env.task, ["call"])
    score = course_trl.env_scored_reward(task, tokenizer, seeds)
    prompt = f"{tokenizer.bos_token} {question}"
    garbage = [tokenizer.convert_tokens_to_ids("<answer>")] * 3
    rewards = score(prompts=[prompt], completions=["ignored"], completion_ids=[garbage])
    env = task.make_env()
    env.reset(seed=seed)
    assert rewards == [env.step("<answer> <answer> <answer>")[1]]  # malformed: the env's penalty, no crash
    best = score(prompts=[prompt], completions=[""], completion_ids=[encode(tokenizer, answer)])
    env = task.make_env()
    env.reset(seed=seed)
    assert best == [env.step(answer)[1]] and best[0] > rewards[0]


def test_unknown_chapters_and_prompts_are_refused(ch00):
    with pytest.raises(KeyError, match="TRL can train chapters 00, 03, 04, 05, 06"):
        course_trl.chapter_task("07")
    task, model, tokenizer = ch00
    rollout = course_trl.course_rollout(task, tokenizer, {"<question> 1 + 1 </question>": 0}, torch.Generator())
    with pytest.raises(KeyError, match="not in its dataset"):
        rollout(["<question> 2 + 2 </question>"], None)


def test_the_trl_benchmark_pairs_iterations_and_prints_its_ratio_last(capsys):
    speedup = trl_pairs.bench_trl(pairs=1, prompts=4, group=4, tool_prompts=4, tool_group=4)
    out = capsys.readouterr().out
    assert out.count("1 interleaved pairs") == 2
    assert len(re.findall(r"course_lib +\d+\.\d{3} s: generation \d+\.\d{3}, scoring \d+\.\d{3}, update", out)) == 2
    assert len(re.findall(r"TRL GRPOTrainer +\d+\.\d{3} s: generation", out)) == 2
    assert out.strip().splitlines()[-1] == f"iteration_speedup_vs_trl={speedup:.2f}" and speedup > 0


@pytest.mark.parametrize("env", [None, "frozen_lake"])
def test_the_command_trains_a_checkpoint_in_its_chat_format(env, tmp_path, capsys):
    """`--model` (a stand-in checkpoint: byte-level BPE, ChatML) on chapter 00's task or, with `--env`, on any
    course environment: TRL trains through the course's engine in the chat format and prints its last line; the
    rollouts' prompt and observation ids are the template's (`alignment_errors` with the chat format)."""
    from course_lib.course import standins
    from course_lib.engine.bookkeeping import alignment_errors
    from course_lib.engine.prompt_format import ChatFormat

    # 512 positions: frozen_lake's episodes under the default budget take up to 346 of this tokenizer's tokens, and a
    # checkpoint with fewer positions is refused (issue 42, item 5)
    folder = standins.build_standin(tmp_path / "model", "qwen2", max_positions=512)
    extra = ["--env", env] if env else []
    assert course_trl.main(["--chapter", "00", "--model", str(folder), "--steps", "2", "--prompts", "2",
                            "--group", "4", *extra]) == 0  # fmt: skip
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(r"trl_grpo_steps=2 loss=-?\d+\.\d{4} reward=-?\d+\.\d{4}", last)
    task, model, tokenizer = course_trl.checkpoint_task(str(folder), "00", env)
    assert task.sampling.prompt_format == "chat" and task.sampling.max_turn_tokens > 8
    engine = RolloutEngine(model, tokenizer, task.sampling)
    trajectories = engine.rollout([task.make_env() for _ in range(4)], list(range(4)), generator=torch.Generator())
    assert all(alignment_errors(t, tokenizer, ChatFormat()) == [] for t in trajectories)


def test_env_needs_a_model():
    with pytest.raises(SystemExit):
        course_trl.main(["--env", "frozen_lake", "--steps", "1"])


class _HiddenGoal:
    """Issue 42, item 4: a task whose first observation shows the start (4 values) but not the goal (10 values), so
    40 problems share 4 texts; the problem is named by `problem_key`."""

    @staticmethod
    def make():
        import random as random_module

        from course_lib.envs.base import TextEnv

        class HiddenGoal(TextEnv):
            def _reset(self, seed, options):
                self.start, self.goal = seed % 4, random_module.Random(seed).randrange(10)
                return f"<question> at {self.start} </question>", {}

            def _step(self, action):
                return "", float(action.strip() == str(self.goal)), True, {}

            def anchor(self):
                return (self.start, self.goal, self.turn)

            def problem_key(self):
                return (self.start, self.goal)

        return HiddenGoal()


def _text_keyed(task, count):
    """The rule before issue 42: one prompt per distinct first observation (the reference for the course's tasks)."""
    prompts, env, seed = {}, task.make_env(), 0
    while len(prompts) < count:
        observation, _ = env.reset(seed=seed)
        prompts.setdefault(observation, seed)
        seed += 1
    return prompts


def test_prompts_are_keyed_by_problem_not_by_text():
    """Every distinct problem (by `problem_key`) is its own prompt, with the first seed that poses it (the seeds
    `distinct_seeds` picks), even when its first observation's text is another problem's; the rollout plays each
    prompt's own seed. Asking for more problems than the task has says why, naming `problem_key`."""
    from course_lib.engine.rollout import SamplingConfig
    from course_lib.envs.base import distinct_seeds
    from course_lib.tasks.tool_task import ToolTask

    task = ToolTask("hidden_goal", "unused", SamplingConfig(), _HiddenGoal.make)
    prompts = course_trl.training_prompts(task, 32)
    assert len(prompts) == 32 and sorted(prompts.values()) == distinct_seeds(task.make_env, 32)
    env = task.make_env()
    keys = set()
    for text, seed in prompts.items():
        observation, _ = env.reset(seed=seed)
        assert text.startswith(observation), "the text names the problem's own first observation"
        keys.add(env.problem_key())
    assert len(keys) == 32, "no two prompts pose one problem"
    with pytest.raises(ValueError, match=r"only 40 distinct problems \(by problem_key\(\)\) in 4100 seeds, 41 asked"):
        course_trl.training_prompts(task, 41)
    assert len(course_trl.training_prompts(task, 41, at_most=True)) == 40, "the budget measure takes what there is"


@pytest.mark.parametrize("chapter", ["00", "03", "04", "05", "06", "07", "08"])
def test_the_courses_own_trl_prompts_are_unchanged(chapter):
    """For the course's tasks a first observation names its whole problem, so keying by problem gives exactly the
    prompts and seeds keying by text gave (the course's TRL runs are unchanged)."""
    from course_lib.integrations import trl_chapters

    task = trl_chapters.chapter_setup(chapter)[0] if chapter in ("07", "08") else course_trl.chapter_task(chapter)
    for count in (24, 64):
        assert course_trl.training_prompts(task, count) == _text_keyed(task, count)


def test_a_checkpoint_without_a_tool_role_trains_with_observations_in_another(tmp_path, capsys):
    """Issue 42, item 12, TRL's side: `--observation-role user` reaches `ChatFormat(observation_role="user")`; without
    a model it is refused, and without the option such a template's error names it."""
    import copy

    from course_lib.course import standins

    tokenizer = copy.deepcopy(standins.default_tokenizer())
    tokenizer.chat_template = standins.chat_template(bos=False).replace("'assistant', 'tool']", "'assistant']")
    folder = standins.build_standin(tmp_path / "model", "qwen2", tokenizer=tokenizer)
    with pytest.raises(ValueError, match="--observation-role user"):
        course_trl.checkpoint_task(str(folder), "00")
    task, _, _ = course_trl.checkpoint_task(str(folder), "00", observation_role="user")
    assert task.sampling.prompt_format == "chat:user"
    with pytest.raises(SystemExit):
        course_trl.main(["--observation-role", "user", "--steps", "1"])
    assert "--observation-role applies to a checkpoint: give --model" in capsys.readouterr().err


def test_env_module_registers_the_environment_trl_trains_on(tmp_path, monkeypatch, capsys):
    """Issue 42, item 13, TRL's side: `--env-module` imports the module that registers `--env`'s environment; without
    it the name is refused before any model loads, naming the option."""
    from course_lib.course import standins

    (tmp_path / "trl_fork_envs").mkdir()
    (tmp_path / "trl_fork_envs" / "__init__.py").write_text("")
    (tmp_path / "trl_fork_envs" / "line.py").write_text(
        "from course_lib import envs\nfrom course_lib.envs.template import NumberLineEnv\n\n\n"
        "class TRLLine(NumberLineEnv):\n    pass\n\n\nenvs.register('trl_line', TRLLine)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    folder = standins.build_standin(tmp_path / "model", "qwen2", max_positions=512)
    argv = ["--model", str(folder), "--env", "trl_line", "--steps", "1", "--prompts", "2", "--group", "2"]
    with pytest.raises(SystemExit):
        course_trl.main(argv)
    assert "unknown environment 'trl_line'" in capsys.readouterr().err
    assert course_trl.main([*argv, "--env-module", "trl_fork_envs.line"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("trl_grpo_steps=1 ")
    task, _, _ = course_trl.checkpoint_task(str(folder), env="trl_line")
    assert task.sampling.stop_tags == ("</move>",), "issue 42, item 1: the environment's stop tags, not tool tags"


@pytest.mark.slow
def test_the_trainers_temporary_folder_is_removed_at_exit_unless_kept():
    """TRL needs an output folder even when it saves nothing; the course's is gone when the process ends."""
    import subprocess
    import sys
    from pathlib import Path

    script = (
        "from course_lib.integrations import course_trl as t; "
        "print(t.temporary_output_dir()); print(t.temporary_output_dir(keep=True))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    removed, kept = (Path(line) for line in done.stdout.split()[-2:])
    assert removed.name.startswith("course-trl-") and not removed.exists()
    assert kept.is_dir()
    kept.rmdir()

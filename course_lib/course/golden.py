"""A golden run: digests of exactly what the rollout engine and a GRPO update compute.

Every RL result in the course depends on exact floating-point arithmetic. A change to the engine
that moves one log-prob by 1e-6 changes the loss, then the weights, then which tokens are sampled:
sixty iterations later the run ends somewhere else. (It happened once: prefilling shared prompts
once left chapter 00 bit-identical but moved chapter 05's LoRA log-probs by up to 2.6e-6, and its
RL arms by up to 14 points.) Tests with tolerances cannot see such a change; this module can.

It rolls out fixed batches with every chapter's committed base model, runs chapter 01's world
model, takes two GRPO iterations of chapter 00, and three GRPO iterations (with evaluations) and
three SFT steps of chapter 05's LoRA arms; it hashes token ids, log-probs, entropies, rewards,
metrics and the updated weights. The digests are stored with the machine and library versions
they were computed on, because other CPUs and BLAS builds round differently.

    python -m course_lib.course.golden            # compare with tests/golden_run.json
    python -m course_lib.course.golden --update   # after a deliberate change: then re-run every chapter's
                                           # seeds and refresh the notebooks
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from course_lib.engine.rollout import RolloutEngine
from course_lib.machine import THREADS, machine  # callers use `golden.machine` too

GOLDEN_FILE = Path(__file__).resolve().parents[2] / "tests" / "golden_run.json"


def digest(value) -> str:
    """SHA-256 of `repr(value)`: Python floats print exactly, so equal digests mean equal bits."""
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]


def trajectory_values(trajectories) -> list:
    return [(t.token_ids, t.loss_mask, t.logprobs, t.entropies, t.turn_ids, t.rewards) for t in trajectories]


@contextmanager
def intra_op_threads(count: int) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _grpo_batch(model, tokenizer, sampling, make_env: Callable, seed: int) -> list:
    """One GRPO-shaped batch (8 tasks x 8 samples: shared prompts are prefilled once)."""
    seeds = [i // 8 for i in range(64)]
    generator = torch.Generator().manual_seed(seed)
    engine = RolloutEngine(model, tokenizer, sampling)
    return trajectory_values(engine.rollout([make_env() for _ in seeds], seeds, seeds, generator))


def cases() -> dict[str, Callable[[], object]]:
    """Name -> a function computing the values to hash (each loads what it needs)."""
    from course_lib import data
    from course_lib.chapters import ToolTask, tool_tasks
    from course_lib.chapters import ch00_tool_agent as ch00
    from course_lib.chapters import ch01_rap as ch01
    from course_lib.chapters import ch05_toolrl as ch05
    from course_lib.rl.train import evaluate_policy, policy_iteration

    def chapter00_rollouts():
        model, tokenizer = data.load_base(ch00.BASE_NAME)
        sampling = ch00.preset("cpu").sampling
        _, evaluated = evaluate_policy(model, tokenizer, lambda: ch00.make_env("test"), range(64), sampling, 0)
        branching = dataclasses.replace(sampling, snapshot_envs=True)
        engine = RolloutEngine(model, tokenizer, branching)
        generator = torch.Generator().manual_seed(1)
        parents = engine.rollout([ch00.make_env() for _ in range(8)], list(range(8)), generator=generator)
        branches = [b for t in parents if t.num_turns >= 2 for b in engine.branch(t, 1, 2, generator=generator)]
        grouped = _grpo_batch(model, tokenizer, sampling, ch00.make_env, 2)
        return trajectory_values(evaluated), grouped, trajectory_values(branches)

    def chapter00_grpo():
        model, tokenizer = data.load_base(ch00.BASE_NAME)
        config = ch00.preset("cpu")
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.grpo.learning_rate)
        envs = [ch00.make_env() for _ in range(config.grpo.prompts_per_iteration * config.grpo.group_size)]
        generator = torch.Generator().manual_seed(0)
        engine = RolloutEngine(model, tokenizer, config.sampling)
        metrics = [
            policy_iteration(model, engine, envs, config.grpo, 0, iteration, generator, optimizer)
            for iteration in range(2)
        ]
        untimed = [{key: value for key, value in m.items() if not key.startswith("time_")} for m in metrics]
        weights = [p.detach().flatten().tolist() for p in model.parameters()]
        return untimed, weights

    def chapter01_world_model():
        lm = ch01.load_lm()
        problems = ch01.test_problems(8, 0)
        actions = ["pick-up a", "unstack b a", "stack a b"]
        pairs = [(init, action) for init, _ in problems[4] for action in actions]
        generator = torch.Generator().manual_seed(0)
        plans = lm.plans([(goal, init) for init, goal in problems[6]], 1.0, generator)
        scores = [lm.step_scores(goal, init, actions) for init, goal in problems[2]]
        return lm.predict(pairs), lm.sample_next(pairs[:8], 4, generator), plans, scores

    def base_rollouts(task: ToolTask):
        def run():
            model, tokenizer = data.load_base(task.base)
            return _grpo_batch(model, tokenizer, task.sampling, task.make_env, 0)

        return run

    def chapter05_lora_arms():
        # The chapter's own arm, shortened: a LoRA adapter, groups of 4, evaluation rollouts.
        model, tokenizer = data.load_base(ch05.BASE_NAME)
        config = ch05.preset("cpu")
        config = dataclasses.replace(
            config, eval_tasks=32, grpo=dataclasses.replace(config.grpo, iterations=3, eval_every=3)
        )
        trained, history = ch05.train_rl_arm(model, tokenizer, "fine", config, seed=0)
        untimed = [{key: value for key, value in h.items() if not key.startswith("time_")} for h in history]
        supervised = ch05.train_sft_arm(model, tokenizer, config, seed=0)
        adapters = [
            [p.detach().flatten().tolist() for p in m.parameters() if p.requires_grad] for m in (trained, supervised)
        ]
        return untimed, adapters

    tasks = tool_tasks()
    return {
        "ch00 rollouts (evaluation, GRPO batch, branches)": chapter00_rollouts,
        "ch00 two GRPO iterations (metrics, weights)": chapter00_grpo,
        "ch01 world model (predict, sample, plans, step scores)": chapter01_world_model,
        "ch03 rollouts": base_rollouts(tasks["ch03"]),
        "ch04 rollouts": base_rollouts(tasks["ch04"]),
        "ch05 rollouts": base_rollouts(tasks["ch05"]),
        "ch05 LoRA arms: three GRPO iterations, three SFT steps (metrics, adapters)": chapter05_lora_arms,
        "ch06 rollouts": base_rollouts(tasks["ch06"]),
    }


def digests() -> dict[str, str]:
    """The digest of every case, computed with `THREADS` intra-op threads."""
    with intra_op_threads(THREADS):
        return {name: digest(compute()) for name, compute in cases().items()}


def recorded(path: Path = GOLDEN_FILE) -> dict:
    """The committed `{"machine": ..., "digests": ...}`."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python -m course_lib.course.golden --update` to record it")
    return json.loads(path.read_text())


def differences(path: Path = GOLDEN_FILE) -> list[str]:
    """Names of the cases whose digest differs from the recorded one (empty: bit-identical)."""
    expected = recorded(path)["digests"]
    actual = digests()
    return [name for name in expected.keys() | actual.keys() if expected.get(name) != actual.get(name)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.course.golden", description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="record this machine's digests")
    args = parser.parse_args(argv)
    if args.update:
        GOLDEN_FILE.write_text(json.dumps({"machine": machine(), "digests": digests()}, indent=1) + "\n")
        print(f"recorded {GOLDEN_FILE}")
        return 0
    stored = recorded()
    if stored["machine"] != machine():
        print(f"recorded on {stored['machine']}, this is {machine()}: digests are not comparable here")
        return 0
    changed = differences()
    for name in sorted(changed):
        print(f"changed: {name}")
    print("golden run: bit-identical" if not changed else "golden run: CHANGED (see the module docstring)")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())

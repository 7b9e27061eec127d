"""The real-model survey's runs command (`lab.real_survey`): seeds recorded one by one, pilots apart, and pilot
seeds kept apart from deciding ones."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from course_lib.course import recorded
from course_lib.lab import real_survey

ROOT = Path(__file__).resolve().parents[2]


def test_each_seed_is_recorded_as_it_finishes_and_a_pilot_apart(tmp_path):
    """A measurement that fails on the second seed leaves the first seed's record; a pilot goes to `_pilot.json`."""

    def measure(seed: int) -> dict[str, float]:
        if seed == 2:
            raise RuntimeError("stopped")
        return {"x": float(seed)}

    with recorded.recording_into(tmp_path):
        with pytest.raises(RuntimeError):
            real_survey.record_seeds("ch16_probe", [1, 2], measure, record=True)
        real_survey.record_seeds("ch16_probe", [100], measure, record=True, pilot=True)
    deciding = json.loads((tmp_path / "ch16_probe.json").read_text())["seeds"]
    assert list(deciding) == ["1"] and deciding["1"]["numbers"] == {"x": 1.0}
    assert list(json.loads((tmp_path / "ch16_probe_pilot.json").read_text())["seeds"]) == ["100"]


@pytest.mark.parametrize("argv", [["compare", "gigpo", "--seeds", "0", "--pilot"],
                                  ["warm-start", "--seeds", "100"]])  # fmt: skip
def test_pilot_and_deciding_seeds_are_not_mixed(argv, capsys):
    with pytest.raises(SystemExit):
        real_survey.main(argv)
    assert "pilot seeds are 100 and up" in capsys.readouterr().err


def test_the_shapes_start_from_chapter_00s_design_sized_by_the_first_pilots_minutes():
    """Chapter 00's SmolLM2 shape (8 iterations of 4 prompts x 8 at 2e-4), cut by the 45-minute rule: GiGPO's first
    pilot seed took 49.4 minutes (its record), so 8 x 45 / 49.4 rounds down to 7 iterations."""
    assert real_survey.RL_SHAPES["starpo_s"] == {"iterations": 8, "prompts_per_iteration": 4, "group_size": 8,
                                                 "learning_rate": 2e-4}  # fmt: skip
    minutes = json.loads((ROOT / "results" / "ch16_gigpo_pilot.json").read_text())["seeds"]["100"]["minutes"]
    assert minutes > 45 and real_survey.RL_SHAPES["gigpo"]["iterations"] == max(4, math.floor(8 * 45 / minutes)) == 7
    assert real_survey.prefixed({"a": {"x": 1.0}, "b": {"x": 2.0}}) == {"a_x": 1.0, "b_x": 2.0}


def test_a_sizing_try_is_a_pilots_and_names_its_own_file(capsys):
    with pytest.raises(SystemExit):
        real_survey.main(["warm-start", "--seeds", "0", "--steps", "60"])
    assert "pilot seeds only" in capsys.readouterr().err
    assert real_survey.sized("key_door", 60).sft.steps == 60
    assert real_survey.sized("key_door", None) is real_survey.WARM_STARTS["key_door"]
    assert recorded.record_command("ch16_warm_start_key_door_60steps_pilot").endswith(
        "warm-start --tasks key_door --seeds 100 --pilot --steps 60 --record"
    )
    assert recorded.record_command("ch16_warm_start_two_hop").endswith(
        "warm-start --tasks two_hop --seeds 0 1 2 3 4 --premises --record"
    )
    assert recorded.record_command("ch16_gigpo").endswith("compare gigpo --seeds 0 1 2 3 4 --record")


@pytest.mark.slow
def test_the_mismatch_is_measured_per_seed_on_a_batch_of_its_own(tmp_path):
    """`mismatch`: each seed warm-starts and samples its own batch; the numbers chapter 16's C16.21d reads are there,
    on a stand-in (a two-block Llama with a BPE tokenizer and ChatML) in place of SmolLM2."""
    from course_lib.course import standins
    from course_lib.lab import fast_path

    folder = str(standins.build_standin(tmp_path / "llama", "llama", max_positions=512))
    first, second = (fast_path.sampler_mismatch(folder, episodes=8, warm_steps=2, seed=seed) for seed in (0, 1))
    for numbers in (first, second):
        assert {"mean_abs_gap_none", "outside_clip_none", "mean_abs_gap_bf16", "outside_clip_bf16"} <= set(numbers)
        assert numbers["policy_tokens"] > 0 and 0 <= numbers["outside_clip_none"] <= 1
    assert first != second  # another seed, another warm start and batch


def test_each_task_records_its_seeds_in_a_file_of_its_own(tmp_path, monkeypatch):
    """`warm-start`: task by task, each seed recorded in the task's file as it finishes (a stopped run keeps the
    tasks it finished); a sizing try names its steps; every adapter is kept for the comparisons."""

    def fake(task: str, seed: int, settings, premises: bool, cache: str) -> dict[str, float]:
        assert cache == "write"
        return {"success": seed + settings.sft.steps / 1000}

    monkeypatch.setattr(real_survey, "warm_start_numbers", fake)
    with recorded.recording_into(tmp_path):
        out = real_survey.warm_starts(["calculator", "lake"], [100, 101], record=True, pilot=True)
        real_survey.warm_starts(["key_door"], [100], record=True, pilot=True, steps=60)
    # each task at its own warm start's steps (`WARM_STARTS`, which the sizing tries set)
    steps = {task: real_survey.WARM_STARTS[task].sft.steps for task in ("calculator", "lake")}
    assert out[101] == {f"{task}_success": 101 + steps[task] / 1000 for task in steps}
    for name in ("calculator_pilot", "lake_pilot", "key_door_60steps_pilot"):
        seeds = json.loads((tmp_path / f"ch16_warm_start_{name}.json").read_text())["seeds"]
        assert set(seeds) <= {"100", "101"} and all(len(s["numbers"]) == 1 for s in seeds.values())
    key_door = json.loads((tmp_path / "ch16_warm_start_key_door_60steps_pilot.json").read_text())["seeds"]["100"]
    assert key_door["numbers"] == {"key_door_success": 100.06}


def _records(folder: Path, name: str, seeds: dict[str, tuple[str, float]], key: str) -> None:
    """A results file as `recorded.record` writes it, with only what `warm_start_check` reads: per seed, the CPU in
    its provenance and one number."""
    table = {
        seed: {"provenance": {"cpu": cpu, "torch_threads": 2}, "numbers": {key: value}}
        for seed, (cpu, value) in seeds.items()
    }
    (folder / f"{name}.json").write_text(json.dumps({"chapter": name, "seeds": table}))


def test_the_before_rl_check_reads_both_records_and_names_the_machines(tmp_path, capsys):
    """`check`: each seed's before-RL success against its warm-start record's, equal or not, on the same machine or
    another; a seed with no warm-start record says which file it looked in; pilots look in the sizing try's file."""
    _records(tmp_path, "ch16_starpo_s", {"0": ("A", 0.125), "1": ("B", 0.0), "2": ("A", 0.5)}, "before_success")
    _records(tmp_path, "ch16_warm_start_lake", {"0": ("A", 0.125), "1": ("A", 0.016)}, "lake_success")
    _records(tmp_path, "ch16_starpo_s_pilot", {"100": ("B", 0.094)}, "before_success")
    steps = real_survey.WARM_STARTS["lake"].sft.steps  # the lake's sizing try set its steps
    _records(tmp_path, f"ch16_warm_start_lake_{steps}steps_pilot", {"100": ("A", 0.141)}, "lake_success")
    with recorded.recording_into(tmp_path):
        assert real_survey.warm_start_check("starpo_s") == [
            "seed 0: before RL 0.125, warm-start record 0.125: equal, the same machine",
            "seed 1: before RL 0.000, warm-start record 0.016: differ, another machine: A, 2 threads, then B, "
            "2 threads",
            "seed 2: before RL 0.500 (A, 2 threads); no record in results/ch16_warm_start_lake.json",
        ]
        assert real_survey.main(["check", "starpo_s", "--pilot"]) == 0
        assert (
            capsys.readouterr().out
            == "seed 100: before RL 0.094, warm-start record 0.141: differ, another machine: A, 2 threads, then B, "
            "2 threads\n"
        )
        assert real_survey.warm_start_record("two_hop", pilot=True) == "ch16_warm_start_two_hop"  # chapter 00's steps
        with pytest.raises(SystemExit) as stopped:
            real_survey.main(["check", "gigpo"])
    assert stopped.value.code == 1 and "compare gigpo" in capsys.readouterr().err

"""Config overrides (`--set key=value`, `--config file.yaml`) on chapter commands: parsing to each field's type,
errors that name the key, the skeleton's hook, and real chapter commands cut to seconds by overrides alone."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import pytest

from course_lib import overrides
from course_lib.chapters import command, skeleton
from course_lib.course.claims import ClaimSpec


@dataclass
class Inner:
    rate: float = 0.1
    names: tuple[str, ...] = ("a",)
    pair: tuple[int, float] = (1, 2.0)
    mode: str = "fast"

    def __post_init__(self):
        if self.mode not in ("fast", "slow"):
            raise ValueError(f"mode must be 'fast' or 'slow', got {self.mode!r}")


@dataclass
class Outer:
    count: int = 3
    flag: bool = False
    limit: int | None = None
    kwargs: dict = field(default_factory=dict)
    inner: Inner = field(default_factory=Inner)


def test_values_are_parsed_to_each_fields_type():
    config = Outer()
    changed = overrides.apply(
        config,
        assignments=[
            ("count", "7"), ("flag", "true"), ("limit", "12"), ("inner.rate", "1e-3"), ("inner.names", "x, y"),
            ("inner.pair", "(4, 0.5)"), ("kwargs", "{size: 5, view: full}"),
        ],
    )  # fmt: skip
    assert changed == Outer(7, True, 12, {"size": 5, "view": "full"}, Inner(1e-3, ("x", "y"), (4, 0.5)))
    assert config == Outer(), "the preset itself is not changed"
    assert overrides.apply(changed, assignments=[("limit", "none"), ("kwargs.size", "9")]).limit is None
    assert overrides.apply(changed, assignments=[("kwargs.size", "9")]).kwargs == {"size": 9, "view": "full"}
    assert overrides.apply(config, assignments=[("inner.names", "()")]).inner.names == ()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("cuont", "1", "unknown config key 'cuont' \\(did you mean 'count'\\?\\): Outer has count, flag, limit"),
        ("inner.speed", "1", "unknown config key 'inner.speed'.*Inner \\(at inner\\) has rate, names, pair, mode"),
        ("count", "1.5", "count='1.5' is not an int"),
        ("flag", "maybe", "flag='maybe' is not a bool"),
        ("inner.pair", "1,2,3", "takes 2 values, got 3"),
        ("inner.mode", "medium", "inner.mode='medium' is refused by Inner: mode must be 'fast' or 'slow'"),
        ("inner", "3", "'inner' is a group: set one of its keys, inner.rate, inner.names"),
        ("count.x", "3", "count is a value, not a group"),
    ],
)
def test_a_bad_override_names_its_key_and_what_is_allowed(key, value, message):
    with pytest.raises(overrides.OverrideError, match=message):
        overrides.apply(Outer(), assignments=[(key, value)])


def test_a_config_file_is_applied_before_the_assignments(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("count: 5\ninner:\n  rate: 0.5\n  names: [p, q]\ninner.mode: slow\n")
    loaded = overrides.load_file(path)
    config = overrides.apply(Outer(), loaded, [("count", "6")])
    assert config == Outer(count=6, inner=Inner(rate=0.5, names=("p", "q"), mode="slow"))
    (tmp_path / "run.json").write_text(json.dumps({"flag": True}))
    assert overrides.apply(Outer(), overrides.load_file(tmp_path / "run.json")).flag is True
    with pytest.raises(overrides.OverrideError, match="count=True is not an int"):
        overrides.apply(Outer(), {"count": True})  # YAML's typed values are checked too
    (tmp_path / "twice.yaml").write_text("inner:\n  rate: 0.5\ncount: 5\ninner:\n  mode: slow\n")
    with pytest.raises(overrides.OverrideError, match="key 'inner' is given twice in one mapping \\(line 4\\)"):
        overrides.load_file(tmp_path / "twice.yaml")  # YAML alone would keep the second and drop rate: 0.5
    (tmp_path / "twice.json").write_text('{"count": 5, "count": 6}')
    with pytest.raises(overrides.OverrideError, match="key 'count' is given twice"):
        overrides.load_file(tmp_path / "twice.json")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(overrides.OverrideError, match="must hold a mapping"):
        overrides.load_file(tmp_path / "list.yaml")


def test_parse_assignment_and_as_dict():
    assert overrides.parse_assignment("grpo.stop= a=b ") == ("grpo.stop", "a=b")
    with pytest.raises(overrides.OverrideError, match="key=value"):
        overrides.parse_assignment("grpo.learning_rate")
    assert overrides.as_dict(Outer()) == {
        "count": 3, "flag": False, "limit": None, "kwargs": {},
        "inner": {"rate": 0.1, "names": ["a"], "pair": [1, 2.0], "mode": "fast"},
    }  # fmt: skip


# The skeleton's hook ---------------------------------------------------------------------------------------------
CLAIMS = (ClaimSpec("C9.1", "count is positive", "no paper", "count", lambda n: n["count"] > 0),)


def preset() -> Outer:
    return Outer()


def run(seed: int, config: Outer | None = None) -> dict:
    config = config or preset()
    return {"config": config, "count": config.count, "minutes": 0.0}


def toy(**changes) -> skeleton.Chapter:
    chapter = skeleton.Chapter("ch99", "Toy chapter", run, lambda r: {"count": float(r["count"])}, CLAIMS)
    return dataclasses.replace(chapter, **changes)


def test_main_applies_set_and_config_to_the_run(tmp_path, capsys):
    """The chapter's `preset` is found beside its `run` (this module's), a file then `--set` applied, and the run
    gets the result; without overrides the run is called exactly as before (no config passed)."""
    path = tmp_path / "c.yaml"
    path.write_text("count: 4\ninner: {rate: 0.25}\n")
    argv = ["--seeds", "0", "--config", str(path), "--set", "inner.names=u,v", "--set", "count=9"]
    [results] = command.main(toy(), argv)
    assert results["config"] == Outer(count=9, inner=Inner(rate=0.25, names=("u", "v")))
    assert capsys.readouterr().out.splitlines()[0] == f"ch99 with --config {path} --set inner.names=u,v --set count=9"
    [plain] = command.main(toy(), ["--seeds", "0"])
    assert plain["config"] == Outer()
    explicit = toy(preset=lambda: Outer(count=-2))  # an explicit preset wins over the module's
    assert command.main(explicit, ["--seeds", "0", "--set", "flag=1"])[0]["config"] == Outer(count=-2, flag=True)


def test_main_refuses_overrides_it_cannot_apply_or_record(capsys):
    def refused(chapter, argv):
        with pytest.raises(SystemExit) as exit_info:
            command.main(chapter, argv)
        assert exit_info.value.code == 2
        return capsys.readouterr().err

    assert "a run with --set or --config is printed, not recorded" in refused(toy(), ["--set", "count=2", "--record"])
    assert "unknown config key 'cuont'" in refused(toy(), ["--set", "cuont=2"])
    assert "Outer has count, flag, limit, kwargs, inner" in refused(toy(), ["--set", "cuont=2"])
    no_config = toy(run=lambda seed: {"count": 1, "minutes": 0.0})
    assert "ch99's run takes no config, so --set and --config cannot apply" in refused(no_config, ["--set", "count=2"])

    def other_mode(chapter, args, parser):
        return None

    with pytest.raises(SystemExit):
        command.main(dataclasses.replace(toy(), configure=other_mode), ["--set", "count=2"])
    assert "this mode did not use them" in capsys.readouterr().err


def test_record_puts_the_resolved_config_in_the_provenance(tmp_path, monkeypatch):
    from course_lib.course import recorded

    monkeypatch.setattr(recorded, "RESULTS_DIR", tmp_path)
    command.main(toy(), ["--seeds", "1", "--record"])
    [written] = tmp_path.glob("ch99*.json")
    provenance = json.loads(written.read_text())["seeds"]["1"]["provenance"]
    assert provenance["config"] == overrides.as_dict(Outer())


# Real chapters: the course's presets take overrides, and a command cut to seconds by --set alone runs ----------------
@pytest.mark.parametrize("module", ["ch00_tool_agent", "ch07_gigpo", "ch08_arpo"])
def test_every_course_chapter_config_takes_dotted_overrides(module):
    import importlib

    chapter = importlib.import_module(f"course_lib.chapters.{module}")
    config = skeleton.resolved_config(chapter.CHAPTER, ["grpo.learning_rate=1e-3", "eval_tasks=50"])
    assert type(config) is type(chapter.preset()) and config.grpo.learning_rate == 1e-3 and config.eval_tasks == 50
    assert dataclasses.replace(config, grpo=chapter.preset().grpo, eval_tasks=chapter.preset().eval_tasks) == (
        chapter.preset()
    )
    with pytest.raises(overrides.OverrideError, match="GRPOConfig.rollout_mode must be one of 'trajectory', 'step'"):
        skeleton.resolved_config(chapter.CHAPTER, ["grpo.rollout_mode=steps"])


TINY = ["--set", "grpo.iterations=1", "--set", "grpo.prompts_per_iteration=2", "--set", "eval_tasks=4"]


def test_chapter00_command_runs_with_overrides_only(capsys):
    [results] = command.main(
        __import__("course_lib.chapters.ch00_tool_agent", fromlist=["CHAPTER"]).CHAPTER,
        ["--seeds", "0", *TINY, "--set", "grpo.group_size=4"],
    )
    assert [record["iteration"] for record in results["history"]] == [0, 1], "one iteration, then the final record"
    assert "ch00 with --set grpo.iterations=1" in capsys.readouterr().out


def test_chapter07_and_08_commands_run_with_overrides_only(tmp_path):
    from course_lib.chapters import ch07_gigpo as ch07
    from course_lib.chapters import ch08_arpo as ch08

    [results] = command.main(ch07.CHAPTER, ["--seeds", "0", *TINY, "--set", "noisy_iterations=1"])
    assert {arm: [r["iteration"] for r in results["histories"][arm]] for arm in ch07.ARMS} == {
        arm: [0, 1] for arm in ch07.ARMS
    }
    path = tmp_path / "ch08.yaml"
    path.write_text("ablations: {}\nvariance_prompts: 2\ngrpo: {group_size: 4}\n")
    [results] = command.main(ch08.CHAPTER, ["--seeds", "0", "--config", str(path), *TINY])
    assert set(results["histories"]) == {"grpo", "arpo"} and len(results["histories"]["arpo"]) == 2


def test_a_fork_records_into_its_own_folder_with_its_config_and_code_version(tmp_path, monkeypatch, capsys):
    """Issue 42, item 14: `--record --out DIR` writes a fork's records into its own folder, overrides allowed, each
    record's provenance holding the resolved config, the overrides given and the code version of the chapter's
    module (its file's hash, and its repository's commit); the course's own `results/` still refuses overrides,
    and `--out` without `--record` or at the course's `results/` is refused."""
    import hashlib
    from pathlib import Path

    from course_lib.course import recorded

    monkeypatch.setattr(recorded, "_run_provenance", None)
    course = recorded.RESULTS_DIR
    before = sorted(p.name for p in course.iterdir())
    out = tmp_path / "my_fork" / "results"
    command.main(toy(), ["--seeds", "1", "2", "--record", "--out", str(out), "--set", "count=5"])
    assert recorded.RESULTS_DIR == course, "the course's folder is the results folder again afterwards"
    assert sorted(p.name for p in course.iterdir()) == before, "nothing written to the course's results/"
    written = json.loads((out / "ch99.json").read_text())
    assert sorted(written["seeds"]) == ["1", "2"]
    provenance = written["seeds"]["1"]["provenance"]
    assert provenance["config"] == overrides.as_dict(Outer(count=5))
    assert provenance["overrides"] == ["--set count=5"]
    [code] = provenance["code"]
    assert code["module"] == __name__ and Path(code["file"]) == Path(__file__).resolve()
    assert code["sha256"] == hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    assert code["git_commit"] == provenance["git_commit"], "this module lives in the course's repository"
    assert f"recorded seed 1 in {out / 'ch99.json'}" in capsys.readouterr().out

    def refused(argv):
        with pytest.raises(SystemExit):
            command.main(toy(), argv)
        return capsys.readouterr().err

    assert "--out DIR records a fork's runs into a folder of its own" in refused(["--record", "--set", "count=2"])
    assert "a run with --set or --config is printed, not recorded" in refused(
        ["--record", "--out", str(course), "--set", "count=2"]
    )
    assert "--out names where --record writes: give --record" in refused(["--out", str(out)])


@dataclass
class WithBase:
    base: str = ""
    count: int = 1


def test_a_forks_record_names_its_base_by_content_and_its_untracked_module_as_dirty(tmp_path, monkeypatch):
    """Issue 58: a fork's record named its base by path only, and its top-level `git_dirty` was false while the
    fork's own module sat untracked in the course's repository (code the commit does not name)."""
    from course_lib.course import recorded

    base = tmp_path / "my_base"
    base.mkdir()
    (base / "model.safetensors").write_bytes(b"weights v1")
    monkeypatch.setattr(recorded, "_run_provenance", None)
    chapter = skeleton.Chapter("ch99", "Toy", lambda seed, config=None: {"count": 1}, lambda r: {"count": 1.0}, CLAIMS,
                               preset=WithBase)  # fmt: skip
    out = tmp_path / "out"
    command.main(chapter, ["--seeds", "0", "--record", "--out", str(out), "--set", f"base={base}"])
    provenance = json.loads((out / "ch99.json").read_text())["seeds"]["0"]["provenance"]
    assert provenance["base"] == {"path": str(base.resolve()), "sha256": recorded.folder_digest(base)}
    (base / "model.safetensors").write_bytes(b"weights v2")
    assert recorded.folder_digest(base) != provenance["base"]["sha256"], "other weights, another digest"

    untracked = recorded.ROOT / "tests" / "base" / "_untracked_fork_module.py"
    untracked.write_text("x = 1\n")
    try:
        monkeypatch.setattr(recorded, "_run_provenance", None)
        monkeypatch.setattr(recorded, "_run_extra", {})
        code = [{"module": "_untracked_fork_module", "file": str(untracked), "git_dirty": True}]
        with recorded.recording_into(tmp_path / "fork_results"):
            recorded.begin({"code": code})
            started = recorded._started(None)
        assert started["git_dirty"] is True and started["git_dirty_modules"] == ["_untracked_fork_module"]
    finally:
        untracked.unlink()


def test_print_config_prints_the_resolved_config_and_runs_nothing(tmp_path, capsys):
    """Issue 58: no command printed the resolved config without running, and a run folder did not hold it."""
    calls = []
    chapter = toy(run=lambda seed, config=None: calls.append(seed) or {"count": 1})
    assert command.main(chapter, ["--print-config", "--set", "count=7", "--set", "inner.mode=slow"]) == []
    printed = json.loads(capsys.readouterr().out.split("\n", 1)[1])  # after the "ch99 with --set ..." line
    assert printed == overrides.as_dict(Outer(count=7, inner=Inner(mode="slow"))) and calls == []
    with pytest.raises(SystemExit):
        command.main(chapter, ["--print-config", "--set", "inner.mode=medium"])  # checked as a run checks it
    from course_lib.chapters import ch07_gigpo as ch07

    command.main(ch07.CHAPTER, ["--print-config", "--set", "grpo.learning_rate=1e-3"])
    assert json.loads(capsys.readouterr().out.split("\n", 1)[1])["grpo"]["learning_rate"] == 1e-3
    command.main(chapter, ["--seeds", "3", "--set", "count=4", "--report-to", "jsonl", "--run-dir", str(tmp_path)])
    assert json.loads((tmp_path / "ch99-seed3" / "config.json").read_text())["count"] == 4


def test_threads_can_be_set_for_an_unrecorded_run_and_are_said_otherwise(monkeypatch, capsys):
    """Issue 58: chapter commands forced 2 threads whatever OMP_NUM_THREADS said, silently; `--threads` now sets
    them for an unrecorded run (or a fork's records, whose provenance names the count), and the course's records
    keep their count."""
    import torch

    seen = []
    chapter = toy(run=lambda seed, config=None: seen.append(torch.get_num_threads()) or {"count": 1})
    before = torch.get_num_threads()
    try:
        command.main(chapter, ["--seeds", "0", "--threads", "1"])
        assert seen == [1]
        monkeypatch.setenv("OMP_NUM_THREADS", "7")
        command.main(chapter, ["--seeds", "0"])
        assert seen[-1] == 2 and "OMP_NUM_THREADS=7 is not used; --threads N sets it" in capsys.readouterr().out
        with pytest.raises(SystemExit):
            command.main(chapter, ["--seeds", "0", "--record", "--threads", "4"])
        assert "--threads is for unrecorded runs and --out" in capsys.readouterr().err
    finally:
        torch.set_num_threads(before)

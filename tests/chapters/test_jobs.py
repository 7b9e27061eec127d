"""`--jobs N` (`chapters.jobs`): a command's seeds in N processes, the threads divided; each seed's record equals a
serial run's on that many threads, and the processes' records land in one file (issue 58)."""

from __future__ import annotations

import json

import pytest

from course_lib.chapters import command, jobs

TOY = '''
import torch

from course_lib.chapters import skeleton


def run(seed, config=None):
    """A sum whose rounding depends on the thread count, and the count itself."""
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(256, 256, generator=generator)
    return {"value": float((a @ a).sum()), "threads": torch.get_num_threads()}


CHAPTER = skeleton.Chapter("ch98", "Toy of --jobs", run, lambda r: {"value": r["value"], "threads": r["threads"]}, ())

if __name__ == "__main__":
    CHAPTER.main()
'''


def test_shares_and_argv():
    assert jobs.shares([0, 1, 2, 3, 4], 2) == [[0, 2, 4], [1, 3]] and jobs.shares([7], 4) == [[7]]
    with pytest.raises(ValueError, match="at least 1"):
        jobs.shares([0], 0)
    argv = ["--seeds", "0", "1", "--jobs", "2", "--set", "a=1", "--threads=4", "--record"]
    assert jobs.without(argv, {"--jobs": 1, "--seeds": -1, "--threads": 1}) == ["--set", "a=1", "--record"]


def test_seeds_in_processes_record_what_a_serial_run_on_their_threads_records(tmp_path, monkeypatch):
    (tmp_path / "toy_jobs_chapter.py").write_text(TOY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    import toy_jobs_chapter

    parallel, serial = tmp_path / "parallel", tmp_path / "serial"
    argv = ["--seeds", "0", "1", "2", "--record", "--out"]
    assert command.main(toy_jobs_chapter.CHAPTER, [*argv, str(parallel), "--jobs", "2", "--threads", "2"]) == []
    command.main(toy_jobs_chapter.CHAPTER, [*argv, str(serial), "--threads", "1"])
    seeds = {name: json.loads((folder / "ch98.json").read_text())["seeds"] for name, folder in
             (("parallel", parallel), ("serial", serial))}  # fmt: skip
    assert sorted(seeds["parallel"]) == ["0", "1", "2"], "both processes' records are in the one file"
    for seed in ("0", "1", "2"):
        assert seeds["parallel"][seed]["numbers"] == seeds["serial"][seed]["numbers"]
        assert seeds["parallel"][seed]["numbers"]["threads"] == 1.0


def test_a_chapter_that_pools_its_seeds_is_refused(capsys):
    from course_lib.chapters import ch05_toolrl

    with pytest.raises(SystemExit):
        command.main(ch05_toolrl.CHAPTER, ["--seeds", "0", "1", "--jobs", "2"])
    assert "pools its seeds after the last one" in capsys.readouterr().err

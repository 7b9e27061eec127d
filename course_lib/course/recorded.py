"""Recorded claim numbers: `results/<chapter>.json`, one entry per seed, with provenance.

A chapter's CLI (`python -m course_lib.chapters.ch04_torl --seeds 0 1 2 3 4 --record`) writes, after each
seed, the flat numbers its claims use (`claim_numbers`), the verdicts, the minutes the seed took and
where they came from (git commit, library versions, CPU, threads, command line). The notebooks and
`docs/claims.md` read these files to show the spread over seeds beside a single run, and
`tests/course/test_recorded.py` recomputes every recorded verdict from the recorded numbers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import platform
import re
import subprocess
import sys
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from course_lib.course.claims import ClaimSpec, evaluate_all
from course_lib.overrides import as_dict

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ROOT = Path(__file__).resolve().parents[2]
RESULTS_DIR = ROOT / "results"
"""Where the files live (repo root's `results/`); tests point it at a temporary folder."""
CONFIRMATIONS = {
    "ch07_confirmation": "--seeds 10 11 12 13 14 15 16 17 18 19",
    "ch15_confirmation": "--seeds 10 11 12 13 14",
}
"""Results files of confirmations on fresh seeds -> the seeds their chapter's `--confirm` ran on."""
LIBRARIES = ("torch", "transformers", "peft", "datasets", "numpy")


class ResultsMissing(FileNotFoundError):
    """No (readable) recorded results for a chapter."""


def path(chapter: str, scale: str = "cpu") -> Path:
    """`results/<chapter>.json` for the cpu preset; `results/gpu/<chapter>.json` for the gpu preset, so that a gpu
    run never replaces the cpu records the notebooks and `docs/claims.md` quote."""
    if scale not in ("cpu", "gpu"):
        raise ValueError(f"scale must be 'cpu' or 'gpu', got {scale!r}")
    return (RESULTS_DIR if scale == "cpu" else RESULTS_DIR / "gpu") / f"{chapter}.json"


def record_command(chapter: str, scale: str = "cpu") -> str:
    """The command that (re)creates a chapter's results file."""
    prefix = "COURSE_SCALE=gpu " if scale == "gpu" else ""
    if chapter in CONFIRMATIONS:  # a chapter's own setting on fresh seeds, after a margin was set
        key = chapter.split("_")[0]
        return f"{prefix}python -m course_lib.chapters {key} --confirm {CONFIRMATIONS[chapter]} --record"
    if chapter.endswith(("_design", "_design_pilot")):  # a designed setting (`course_lib.course.designs`)
        step = "--pilot" if chapter.endswith("_pilot") else "--decide"
        return f"{prefix}python -m course_lib.lab.design_runs {chapter.split('_')[0]} {step} --record"
    if chapter.startswith("ch16_"):  # the survey on a real model: `course_lib.lab.real_survey`'s runs
        run = _real_survey_run(chapter.removeprefix("ch16_"))
        return f"{prefix}python -m course_lib.lab.real_survey {run} --record"
    return f"{prefix}python -m course_lib.chapters {chapter} --seeds 0 1 2 3 4 --record"


def _real_survey_run(name: str) -> str:
    """The `lab.real_survey` arguments that record `results/ch16_<name>.json`."""
    pilot = name.endswith("_pilot")
    name = name.removesuffix("_pilot")
    seeds = "--seeds 100 101 102 --pilot" if pilot else "--seeds 0 1 2 3 4"
    if name == "lora_blocks":
        return "lora-blocks --seeds 100 101 102"
    if name == "mismatch":
        return "mismatch --seeds 0 1 2 3 4"
    warm = re.fullmatch(r"warm_start_(\w+?)(?:_(\d+)steps)?", name)  # warm_start_<task>[_<steps>steps]
    if warm:
        seeds = seeds.replace("100 101 102", "100")
        if warm.group(2):
            return f"warm-start --tasks {warm.group(1)} {seeds} --steps {warm.group(2)}"
        return f"warm-start --tasks {warm.group(1)} {seeds} --premises"
    return f"compare {name} {seeds}"


Curves = Mapping[str, Sequence[tuple[float, float]]]
"""Named learning curves of one seed, e.g. `{"masked/eval_success": [(iteration, value), ...]}`."""


def make_record(
    seed: int,
    specs: Sequence[ClaimSpec],
    numbers: Mapping[str, float],
    minutes: float,
    curves: Curves | None = None,
    not_applicable: Mapping[str, str] | None = None,
) -> dict:
    """One seed's record: its numbers, each claim's verdict and whether it passed, and the minutes it took;
    with `curves`, also its learning curves (stored as `[[x, y], ...]` lists under `"curves"`), so notebooks
    can draw seed bands from the recorded seeds instead of re-running them. The claims of `not_applicable` (id ->
    reason; a fork's record) are not checked: their verdict says so, with the reason, kept under `not_applicable`."""
    claims = evaluate_all(specs, numbers, not_applicable=not_applicable)
    made = {
        "seed": seed,
        "numbers": {key: float(value) for key, value in numbers.items()},
        "verdicts": {claim.id: claim.status for claim in claims},
        "passed": {claim.id: claim.passed for claim in claims},
        "minutes": float(minutes),
    }
    if not_applicable:
        made["not_applicable"] = dict(not_applicable)
    if curves is not None:
        made["curves"] = {name: [[float(x), float(y)] for x, y in points] for name, points in curves.items()}
    return made


def history_curves(
    histories: Mapping[str, Sequence[Mapping]], keys: Sequence[str], x_key: str = "iteration"
) -> dict[str, list[tuple[float, float]]]:
    """Curves for `make_record` from per-iteration history dicts: `{"arm/key": [(x, value), ...]}` for each
    arm's history and each key, skipping iterations where the key is absent (e.g. evaluated every k)."""
    return {
        f"{arm}/{key}": [(float(row[x_key]), float(row[key])) for row in history if key in row]
        for arm, history in histories.items()
        for key in keys
        if any(key in row for row in history)
    }


def _git(*args: str) -> str:
    return _git_in(ROOT, *args)


def _git_in(folder: Path, *args: str) -> str:
    """`git args` run in `folder`, its output stripped; "" when git fails (no repository there, no git)."""
    try:
        done = subprocess.run(["git", *args], cwd=folder, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip()


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def provenance(config: object | None = None) -> dict:
    """Where a record came from: code (commit, dirty tree), libraries, machine, threads, command line, and with
    `config` (the chapter's resolved config, a dataclass) that config as plain data under `config`."""
    import torch

    # the same CPU description the golden run's digests are keyed by, without importing the golden run
    from course_lib.machine import cpu_description

    return {
        "git_commit": _git("rev-parse", "HEAD") or "unknown",
        # results/ itself is excluded: a multi-chapter re-record writes these files as it goes, and they are
        # outputs of the code, not part of it
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results")),
        "python": platform.python_version(),
        **{name: _version(name) for name in LIBRARIES},
        "cpu": cpu_description(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "command": " ".join(getattr(sys, "orig_argv", sys.argv)),
        **({"config": as_dict(config)} if config is not None else {}),
    }


class DirtyTree(RuntimeError):
    """`--record` into the course's `results/` from code with uncommitted changes."""


_run_provenance: dict | None = None
"""The provenance of this process's recording run, captured by `begin` before its first seed ran."""
_run_extra: dict = {}
"""What the last `begin(extra)` added for its run (a fork's overrides and code version)."""


def begin(extra: Mapping | None = None) -> dict:
    """Capture this process's provenance (commit, dirty flag, libraries, CPU, threads, command) before its first
    seed runs, once: every seed the process records carries this snapshot, so a file edited or committed while the
    seeds run cannot change what they say they ran on (the code a process runs is the code it loaded). `extra`, when
    given, is added to every record of this run (a fork's command: its overrides, `code_version` of its modules),
    taken now too. Refuses (`DirtyTree`) to record into the course's own `results/` from a tree with uncommitted
    changes, since such a record names a commit its numbers did not come from; a fork's or a test's folder is not
    refused."""
    global _run_provenance, _run_extra
    if _run_provenance is None:
        _run_provenance = provenance()
    if extra is not None:
        _run_extra = dict(extra)
        # A fork's module inside the course's repository but untracked (or edited) is code the commit does not name.
        inside = [c["module"] for c in _run_extra.get("code", ()) if c.get("git_dirty")
                  and Path(c["file"]).resolve().is_relative_to(ROOT.resolve())]  # fmt: skip
        if inside:
            _run_extra |= {"git_dirty": True, "git_dirty_modules": inside}
    if _run_provenance["git_dirty"] and RESULTS_DIR.resolve() == (ROOT / "results").resolve():
        raise DirtyTree(
            "--record writes the course's results/ and the tree has uncommitted changes (git status): commit them "
            "first, so that each record names the code its numbers came from"
        )
    return dict(_run_provenance) | _run_extra


def _started(config: object | None) -> dict:
    """The provenance `begin` captured (with its extra and `config` added), or a RuntimeError when no run has
    begun."""
    if _run_provenance is None:
        raise RuntimeError("results.begin() must run before the first seed of a recording run: it stamps the code "
                           "and machine the seeds run on")  # fmt: skip
    return _run_provenance | _run_extra | ({"config": as_dict(config)} if config is not None else {})


@contextlib.contextmanager
def recording_into(folder: str | Path) -> Iterator[Path]:
    """Within the block, records are written into (and read from) `folder` instead of the course's `results/`: a
    fork's command (`--record --out my_fork/results`) records its own runs there, through the same `begin`, `record`
    and `write` as the course's. A run that begins its recording in the block ends it there too: its extra is
    cleared on leaving. `RESULTS_DIR` is restored whatever happens."""
    global RESULTS_DIR, _run_extra
    saved, RESULTS_DIR = RESULTS_DIR, Path(folder)
    try:
        yield RESULTS_DIR
    finally:
        RESULTS_DIR, _run_extra = saved, {}


def code_version(modules: Sequence[object]) -> list[dict]:
    """What code a fork's record came from, per module (a module object or an imported module's name): its name,
    its file, the file's SHA-256, and the commit and dirty flag of the git repository holding it ("" and None when
    it is in none). A fork's chapter or environment may live outside the course's repository, whose commit
    (`provenance`'s `git_commit`) does not name it."""
    versions = []
    for module in modules:
        module = sys.modules[module] if isinstance(module, str) else module
        # a module run with `python -m` is `__main__`; its spec keeps the name it was run by
        name = getattr(getattr(module, "__spec__", None), "name", None) or module.__name__
        path = Path(module.__file__).resolve()
        commit = _git_in(path.parent, "rev-parse", "HEAD")
        dirty = bool(_git_in(path.parent, "status", "--porcelain", "--", path.name)) if commit else None
        versions.append({"module": name, "file": str(path),
                         "sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "git_commit": commit,
                         "git_dirty": dirty})  # fmt: skip
    return versions


def folder_digest(folder: str | Path) -> str:
    """The SHA-256 of a folder's files (their relative paths and bytes, in sorted order): a base's weights and
    tokenizer named by content, since a path names only where they were when the record was written."""
    folder = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def write(chapter: str, records: list[dict], scale: str | None = None, config: object | None = None) -> Path:
    """Merge `records` (from `make_record`) into the chapter's file of preset `scale` (default: the active
    `COURSE_SCALE`; `path`), keyed by seed: a later record for a seed replaces the earlier one. A record without a
    provenance gets the one `begin` captured at the start of this run (with `config`, the resolved config the run
    used, in it)."""
    from course_lib import course_config

    scale = scale or course_config.scale()
    target = path(chapter, scale)
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target):  # several processes of one command (--jobs) may record into one file at once
        seeds = load(chapter, scale)["seeds"] if target.exists() else {}
        extra = None
        for record in records:
            if "provenance" not in record:
                extra = extra or _started(config) | {"scale": scale}
            seeds[str(record["seed"])] = {"provenance": extra, **record}
        ordered = dict(sorted(seeds.items(), key=lambda item: int(item[0])))
        text = json.dumps({"chapter": chapter, "seeds": ordered}, indent=1, sort_keys=False)
        scratch = target.with_suffix(f".json.{os.getpid()}.tmp")
        scratch.write_text(text + "\n")
        scratch.replace(target)  # never leave a half-written file behind
    return target


@contextlib.contextmanager
def _locked(target: Path) -> Iterator[None]:
    """Hold an exclusive lock for `target` during the block (a lock file named by its path's hash in the system's
    temporary folder, so that no lock file litters `results/`), where the platform has `fcntl` (Linux, macOS);
    elsewhere, no lock (one process per file)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    import tempfile

    name = hashlib.sha256(str(target.resolve()).encode()).hexdigest()[:24]
    with open(Path(tempfile.gettempdir()) / f"course_lib-{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def record(
    chapter: str,
    seed: int,
    specs: Sequence[ClaimSpec],
    numbers: Mapping[str, float],
    minutes: float,
    curves: Curves | None = None,
    config: object | None = None,
    not_applicable: Mapping[str, str] | None = None,
) -> Path:
    """Write one seed's record (a chapter CLI's `--record`), with its curves, the run's config (into its
    provenance) and the claims that do not apply to it (a fork's) if given, and say where it went. `begin` must have
    run before the first seed."""
    target = write(chapter, [make_record(seed, specs, numbers, minutes, curves, not_applicable)], config=config)
    print(f"  recorded seed {seed} in {target}")
    return target


def load(chapter: str, scale: str = "cpu") -> dict:
    """`{"chapter": ..., "seeds": {"0": record, ...}}` of preset `scale` (the cpu records unless asked otherwise:
    the notebooks compare a run with them); `ResultsMissing` names the command to run."""
    target = path(chapter, scale)
    fix = f"run `{record_command(chapter, scale)}` to record it"
    if not target.exists():
        raise ResultsMissing(f"{target} does not exist: {fix}")
    try:
        loaded = json.loads(target.read_text())
    except (OSError, ValueError) as error:
        raise ResultsMissing(f"{target} is not readable JSON ({error}): {fix}") from error
    if not isinstance(loaded, dict) or not isinstance(loaded.get("seeds"), dict):
        raise ResultsMissing(f"{target} has no `seeds` table: {fix}")
    return loaded


TIMING = re.compile(r"seconds|minutes|extra_share|step_saving")
"""Numbers that time a run (seconds per iteration, GiGPO's share of an iteration, the SNR filter's saving per
step): they differ between two runs of the same seed even on one machine, so `origin` does not compare them."""


def describe(cpu: str, capability: str | None, threads: int | None) -> str:
    """`Intel Xeon (AVX512 kernels), 2 threads`: what decides whether two runs can agree bit for bit."""
    kernels = f" ({capability} kernels)" if capability else ""
    return f"{cpu}{kernels}, {threads} thread{'s' * (threads != 1)}"


def machine(provenance: Mapping) -> str:
    """`describe` of the machine a record's `provenance` names (its CPU, kernels and threads)."""
    return describe(provenance.get("cpu", "an unrecorded CPU"), provenance.get("cpu_capability"),
                    provenance.get("torch_threads"))  # fmt: skip


def origin(chapter: str, seed: int, numbers: Mapping[str, float] | None = None) -> str:
    """This run against its recorded seed: this machine's CPU and threads against those `results/<chapter>.json`
    recorded seed `seed` on, and, with `numbers` (this run's claim numbers), how many of the numbers both hold
    (timings aside) are equal, and which differ and by how much (`agreement`). Only on the same CPU and thread count
    can a live run repeat its recorded seed bit for bit (floating-point kernels and the split of sums over threads
    round differently); elsewhere the comparison shows how far it landed."""
    import torch

    from course_lib.machine import cpu_description

    record = load(chapter)["seeds"].get(str(seed))
    provenance = (record or {}).get("provenance", {})
    # an older record did not note the kernels: compare what it noted
    capability = torch.backends.cpu.get_cpu_capability() if "cpu_capability" in provenance or not record else None
    here = describe(cpu_description(), capability, torch.get_num_threads())
    if record is None:
        return f"this run: seed {seed} on {here}; results/{chapter}.json has no seed {seed} to compare it with"
    there = machine(provenance)
    if there == here:
        line = f"this run: seed {seed} on {here}, the machine and threads results/{chapter}.json recorded it on"
    else:
        line = (f"this run: seed {seed} on {here}; results/{chapter}.json recorded it on {there}: the numbers "
                "marked 'this run' are this machine's, the course-level verdicts the recorded seeds'")  # fmt: skip
    return line if numbers is None else f"{line}\n{agreement(numbers, record['numbers'])}"


SHOWN_DIFFERENCES = 12
"""At most this many differing numbers are listed (the largest differences first)."""


def agreement(numbers: Mapping[str, float], recorded: Mapping[str, float]) -> str:
    """`41 of 41 numbers equal the recorded seed's`, over the finite, untimed numbers both hold; when some differ,
    each of them (the largest differences first, at most `SHOWN_DIFFERENCES`) as `key: this run 0.860, recorded
    0.865 (-0.005)`, one per line."""
    shared = [key for key in numbers if key in recorded and not TIMING.search(key)
              and math.isfinite(float(numbers[key])) and math.isfinite(float(recorded[key]))]  # fmt: skip
    differ = [key for key in shared if float(numbers[key]) != float(recorded[key])]
    head = f"{len(shared) - len(differ)} of {len(shared)} numbers equal the recorded seed's"
    if not differ:
        return head
    differ.sort(key=lambda key: -abs(float(numbers[key]) - float(recorded[key])))
    lines = [f"{head}; {len(differ)} differ (this run, recorded, difference):"]
    for key in differ[:SHOWN_DIFFERENCES]:
        mine, theirs = float(numbers[key]), float(recorded[key])
        lines.append(f"  {key}: this run {format_number(mine)}, recorded {format_number(theirs)} "
                     f"({mine - theirs:+.4g})")  # fmt: skip
    if len(differ) > SHOWN_DIFFERENCES:
        lines.append(f"  ... and {len(differ) - SHOWN_DIFFERENCES} more")
    return "\n".join(lines)


def recorded_numbers(recorded: Mapping, key: str) -> list[float]:
    """One number over the seeds of a loaded results file (`load(chapter)`), in seed order; seeds that
    did not record it are skipped."""
    seeds = sorted(recorded["seeds"].items(), key=lambda item: int(item[0]))
    return [record["numbers"][key] for _, record in seeds if key in record["numbers"]]


def seed_range(chapter: str, key: str) -> tuple[float, float, int]:
    """`(min, max, number of seeds)` of one number over a chapter's recorded seeds."""
    values = recorded_numbers(load(chapter), key)
    if not values:
        raise KeyError(f"no recorded seed of {chapter} has the number {key!r}")
    return min(values), max(values), len(values)


def format_number(value: float) -> str:
    """Integers as integers, large or tiny magnitudes in 3 significant digits, the rest with 3 decimals
    (fractions such as success rates therefore read 0.760, never 76)."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    if abs(value) < 1e-12:  # a difference or mean that is zero up to float rounding (e.g. -9.25e-18)
        return "0"
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.3g}"
    return f"{value:.3f}"


def _seed_list(seeds: list[int]) -> str:
    seeds = sorted(seeds)
    if len(seeds) > 1 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"seeds {seeds[0]}-{seeds[-1]}"
    return ("seeds " if len(seeds) > 1 else "seed ") + ", ".join(map(str, seeds))


def table_cell(text: str) -> str:
    """`text` as one Markdown table cell: `|` escaped, on one line."""
    return text.replace("|", "\\|").replace("\n", " ")


def claims_table(
    specs: Sequence[ClaimSpec], numbers: Mapping[str, float], recorded: Mapping | None, unmeasured: Collection[str] = ()
) -> str:
    """A Markdown table: claim, its kind (`claims.KINDS`, induced or not), the paper's number, the miniature's test,
    this run's headline value, its range over the recorded seeds (`recorded` is `load(chapter)`, or None), and this
    run's verdict (none for the ids in `unmeasured`, whose arms the run did not train; the course-level verdict is
    `course_lib.lab.verdicts`')."""
    lines = [
        "| claim | kind | paper | miniature's test (margin) | this run | recorded seeds | this run's verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    seeds = (recorded or {}).get("seeds", {})
    for spec in specs:
        values = {int(s): r["numbers"][spec.value] for s, r in seeds.items() if spec.value in r["numbers"]}
        spread = "not recorded"
        if values:
            low, high = min(values.values()), max(values.values())
            seeds_text = _seed_list(list(values))
            if low == high:  # a pooled statistic, or a count every seed agrees on: one number, not a range
                spread = f"{format_number(low)} on every seed ({seeds_text})"
            else:
                spread = f"{format_number(low)} to {format_number(high)} ({seeds_text})"
        this_run = format_number(numbers[spec.value]) if spec.value in numbers else "not measured"
        verdict = spec.evaluate(numbers, spec.id not in unmeasured).status  # `unmeasured`: arms not run live
        cells = (spec.id, spec.label, spec.paper, f"{spec.statement} [`{spec.value}`]", this_run, spread, verdict)
        lines.append("| " + " | ".join(table_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def load_curves(chapter: str, name: str) -> dict[int, list[tuple[float, float]]]:
    """One recorded curve over seeds: `{seed: [(x, y), ...]}` for every seed whose record has `name`."""
    found = {
        int(seed): [(float(x), float(y)) for x, y in rec["curves"][name]]
        for seed, rec in load(chapter)["seeds"].items()
        if name in rec.get("curves", {})
    }
    if not found:
        raise KeyError(f"no recorded seed of {chapter} has the curve {name!r}; record with `{record_command(chapter)}`")
    return dict(sorted(found.items()))


def seed_table(chapter: str, columns: Sequence[tuple[str, str]]) -> str:
    """A Markdown table of recorded numbers: one row per seed, one column per `(number key, label)`, and a
    mean row over the seeds (a seed lacking a number shows "-" and is left out of that column's mean)."""
    seeds = load(chapter)["seeds"]
    lines = [
        "| seed | " + " | ".join(table_cell(label) for _, label in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    for seed, rec in seeds.items():
        cells = [format_number(rec["numbers"][key]) if key in rec["numbers"] else "-" for key, _ in columns]
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    means = []
    for key, _ in columns:
        values = [rec["numbers"][key] for rec in seeds.values() if key in rec["numbers"]]
        means.append(format_number(sum(values) / len(values)) if values else "-")
    lines.append(f"| mean of {len(seeds)} | " + " | ".join(means) + " |")
    return "\n".join(lines)


def seed_table_or_command(name: str, columns: Sequence[tuple[str, str]]) -> str:
    """`seed_table` of `results/<name>.json`, or, before it is recorded, a line with the command that records it."""
    if not path(name).exists():
        return f"*Not recorded yet:* `{record_command(name)}`"
    return seed_table(name, columns)


def verdict_table(chapter: str) -> str:
    """A Markdown table of recorded verdicts: one row per seed, one column per claim id, and a last row
    counting the seeds on which each claim passed."""
    seeds = load(chapter)["seeds"]
    ids = list(dict.fromkeys(claim for rec in seeds.values() for claim in rec["verdicts"]))
    lines = ["| seed | " + " | ".join(ids) + " |", "|---" * (len(ids) + 1) + "|"]
    for seed, rec in seeds.items():
        lines.append(f"| {seed} | " + " | ".join(rec["verdicts"].get(claim, "-") for claim in ids) + " |")
    passed = [sum(bool(rec["passed"].get(claim)) for rec in seeds.values()) for claim in ids]
    lines.append("| passed | " + " | ".join(f"{count} of {len(seeds)}" for count in passed) + " |")
    return "\n".join(lines)


def _by_seed(loaded: Mapping) -> list[tuple[str, dict]]:
    return sorted(loaded["seeds"].items(), key=lambda item: int(item[0]))


def seed_numbers(loaded: Mapping) -> list[dict[str, float]]:
    """Each recorded seed's numbers in seed order (`loaded` from `load`)."""
    return [dict(record["numbers"]) for _, record in _by_seed(loaded)]


def own_numbers(loaded: Mapping, prefix: str) -> list[dict[str, float]]:
    """Each recorded seed's numbers in seed order (`loaded` from `load`), without those pooled over seeds
    (names starting with `prefix`): what a pooled claim pools."""
    return [{k: v for k, v in numbers.items() if not k.startswith(prefix)} for numbers in seed_numbers(loaded)]


def repool(chapter: str, specs: Sequence[ClaimSpec], pool: Callable[[list[dict]], dict], prefix: str) -> dict:
    """Recompute the numbers pooled over seeds (their names start with `prefix`) of every recorded seed of
    `chapter` from all its recorded seeds (`pool(per-seed numbers) -> pooled numbers`) and rewrite the records
    (`rederive`), so that each record's verdicts follow from its own numbers. Returns the pooled numbers."""
    pooled = pool(own_numbers(load(chapter), prefix))
    rederive(chapter, specs, lambda numbers: {k: v for k, v in numbers.items() if not k.startswith(prefix)} | pooled)
    return pooled


def rederive(chapter: str, specs: Sequence[ClaimSpec], derive: Callable[[dict], dict] | None = None) -> Path:
    """Rewrite every recorded seed of `chapter` with its numbers replaced by `derive(numbers)` (default: unchanged)
    and its verdicts re-evaluated by `specs`, keeping provenance, minutes and curves: after numbers pooled over
    seeds change, or a claim's check is restated or split, so that each record's verdicts follow from its own
    numbers without a re-run."""
    rewritten = []
    for seed, record in _by_seed(load(chapter)):
        numbers = derive(dict(record["numbers"])) if derive else dict(record["numbers"])
        curves = {name: [tuple(p) for p in points] for name, points in record.get("curves", {}).items()}
        made = make_record(int(seed), specs, numbers, record["minutes"], curves or None)
        rewritten.append({**made, "provenance": record["provenance"]})
    return write(chapter, rewritten)


def panels(
    chapter: str,
    arms: Mapping[str, str],
    panels: Sequence[tuple[str, str]],
    this_run: Mapping[str, Sequence[Mapping]] | None = None,
    title: str = "",
    x_label: str = "RL iteration",
) -> Figure:
    """A `grid` with one panel per `(history key, y-axis label)`: for each arm (`label -> curve prefix`), the
    recorded seeds' mean and min-max band (`load_curves(chapter, f"{prefix}/{key}")`) and, for the
    arms in `this_run` (`label -> history`), this session's run as a dashed line of the same colour."""
    from course_lib.diagnostics.plots import curves_with_bands, grid, legend_outside

    fig, axes = grid(len(panels))
    for ax, (key, label) in zip(axes, panels, strict=True):
        series = {arm: load_curves(chapter, f"{prefix}/{key}") for arm, prefix in arms.items()}
        curves_with_bands(series, ax, x_label=x_label, y_label=label)
        colours = {arm: line.get_color() for arm, line in zip(series, ax.get_lines(), strict=True)}
        for arm, history in (this_run or {}).items():
            points = [(row["iteration"], row[key]) for row in history if key in row]
            ax.plot(*zip(*points, strict=True), linestyle="--", color=colours.get(arm), label=f"{arm}: this run")
    if title:
        fig.suptitle(title)
    legend_outside(fig)
    return fig

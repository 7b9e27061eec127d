"""The skeleton a chapter module fills in: its run and its claims.

A chapter describes itself once as a `Chapter` (how to run one seed, which numbers its claims read, which curves it
records, what to print, and what the course's tools need of it). `run_seeds` runs, prints and records its seeds; the
command line every chapter shares is `chapters.command`. The notebook calls the same `run_seed`, so what it shows
and what the command records come from one function.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import inspect
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from course_lib import overrides
from course_lib.course import recorded
from course_lib.course.claims import NOT_APPLICABLE, Claim, ClaimSpec, evaluate_all
from course_lib.rl import tracking

if TYPE_CHECKING:
    from course_lib.course.leakage import SplitAudit
    from course_lib.tasks.tool_task import ToolTask


@dataclass(frozen=True)
class Chapter:
    """What a chapter module provides."""

    id: str
    """`"ch07"`: the name of its results file and notebook prefix."""
    title: str
    """One line for the command line's help."""
    run: Callable[[int], dict]
    """Seed -> results (everything the chapter measured for that seed)."""
    claim_numbers: Callable[[Mapping], dict[str, float]]
    """Results -> the numbers its claims check (recorded per seed)."""
    claims: Sequence[ClaimSpec]
    curves: Callable[[Mapping], dict] | None = None
    """Results -> learning curves to record beside the numbers (for seed bands in the notebook)."""
    report: Callable[[Mapping], list[str]] | None = None
    """Results -> lines to print for a seed, before its claims."""
    checkpoint: bool = False
    """Whether its run starts from `base_for` (so `--model` can put a checkpoint in place of its base)."""
    preset: Callable[[], object] | None = None
    """() -> its config for `COURSE_SCALE`, which `run(seed, config=...)` takes (`--set`, `--config`). None: the
    `preset` of the module that defines `run`, if `run` takes `config` (every course chapter does)."""
    validate: Callable[..., object] | None = None
    """`(config, say=False)` -> the config its run will use, or a ValueError naming what to set: the command calls it
    (quietly) on an
    overridden config before any seed runs (chapters 07 and 08: `on_environment`), so that a combination the run
    would refuse stops the command first."""
    task: Callable[[], ToolTask] | None = None
    """() -> its training task (`ToolTask`) as TRL, verl, the golden run and the benchmarks train on it;
    None for a chapter none of them trains."""
    audit: Callable[[], list[SplitAudit]] | None = None
    """() -> the leakage audit of each of its held-out splits (`course.leakage`); None: not audited (a test names
    the chapters that may go without)."""
    golden: Callable[[], dict[str, Callable[[], object]]] | None = None
    """() -> its golden-run cases, name -> a function computing the values to hash (`lab.golden`)."""
    options: Callable[[argparse.ArgumentParser], object] | None = None
    """Adds the chapter's own flags to its command line."""
    configure: Callable[[Chapter, argparse.Namespace, argparse.ArgumentParser], Chapter | None] | None = None
    """`(chapter, args, parser)` -> the chapter to run under its own flags (e.g. with `run` bound to one), or None when
    it did the work itself (another mode; a designed experiment: `command.designed_experiment`)."""
    finish: Callable[[argparse.Namespace, list[dict]], object] | None = None
    """`(args, results)`, after the last seed (e.g. statistics over the seeds)."""
    print_claims: bool = True
    """Whether the command prints each seed's claims (chapter 05 pools its seeds in `finish` instead)."""
    arms: Callable[[object], Mapping[str, object]] | None = None
    """config -> the `GRPOConfig` each arm of its run trains with (its arm table applied): the command reads it to
    refuse a `grpo.*` override no arm would train with, and to say which arms keep their own value
    (`ignored_overrides`)."""

    def main(self, argv: list[str] | None = None) -> list[dict]:
        """Its command line, `python -m course_lib.chapters chNN ...` (`command.main`): each seed's results."""
        from course_lib.chapters import command  # the command line sits above the type it runs

        return command.main(self, argv)


def config_preset(chapter: Chapter) -> Callable[[], object] | None:
    """The function giving the config `chapter.run` takes as `config=`, or None when its run takes none (then
    `--set` and `--config` cannot apply). A `functools.partial` around `run` (a chapter's `configure` binding its
    own flags) is looked through."""
    run = chapter.run
    while isinstance(run, functools.partial):
        if "config" in run.keywords:
            return None  # already bound by the chapter: an override would be ignored
        run = run.func
    try:
        if "config" not in inspect.signature(run).parameters:
            return None
    except (TypeError, ValueError):
        return None
    if chapter.preset is not None:
        return chapter.preset
    preset = getattr(sys.modules.get(getattr(run, "__module__", None) or ""), "preset", None)
    return preset if callable(preset) else None


def resolved_config(chapter: Chapter, assignments: Sequence[str] = (), config_file: str | Path | None = None):
    """The chapter's preset with `config_file`'s mapping and then each `key=value` of `assignments` applied
    (`course_lib.overrides`), or None when the chapter's run takes no config. Raises `overrides.OverrideError`
    naming the key for an unknown key or a value the field refuses."""
    preset = config_preset(chapter)
    if preset is None:
        return None
    file_values = overrides.load_file(config_file) if config_file else None
    return overrides.apply(preset(), file_values, [overrides.parse_assignment(text) for text in assignments])


def arm_table(arm_config: Callable[[object, str], object], names) -> Callable[[object], dict[str, object]]:
    """`Chapter.arms` from a chapter's `arm_config(config, arm)` and its arm names: a collection, or a function of
    the config giving them (chapter 09's budget arms depend on it)."""
    return lambda config: {arm: arm_config(config, arm) for arm in (names(config) if callable(names) else names)}


def overridden_keys(assignments: Sequence[str] = (), file_values: Mapping | None = None) -> list[str]:
    """The dotted keys a command's `--set` assignments and `--config` mapping set (a nested mapping's leaves)."""

    def leaves(values: Mapping, prefix: str) -> list[str]:
        keys = []
        for key, value in values.items():
            dotted = f"{prefix}{key}"
            keys += leaves(value, dotted + ".") if isinstance(value, Mapping) and value else [dotted]
        return keys

    keys = leaves(file_values, "") if file_values else []
    return list(dict.fromkeys([*keys, *(overrides.parse_assignment(text)[0] for text in assignments)]))


def ignored_overrides(chapter: Chapter, config: object, keys: Sequence[str]) -> tuple[list[str], list[str]]:
    """`(refused, partly)`: for each `grpo.*` key in `keys`, compare its value in `config` with the value each arm
    trains with (`chapter.arms`). An override no arm trains with is refused (chapter 07's arms each set
    `grpo.advantage`: `--set grpo.advantage=rloo` trained its own four estimators and said nothing); one some arms
    keep their own value of is said, naming them."""
    refused, partly = [], []
    if chapter.arms is None:
        return refused, partly
    arms = chapter.arms(config)
    for key in keys:
        if not key.startswith("grpo."):
            continue
        path = key.split(".")[1:]
        wanted = functools.reduce(getattr, path, config.grpo)
        own = {arm: functools.reduce(getattr, path, grpo) for arm, grpo in arms.items()}
        keeping = [f"{arm} ({value!r})" for arm, value in own.items() if value != wanted]
        if len(keeping) == len(own):
            refused.append(f"{key}={wanted!r} would be ignored: {chapter.id} sets it per arm, and every arm keeps its "
                           f"own: {', '.join(keeping)}. To train yours, fork the chapter's arm table "
                           "(docs/extending.md, section 7)")  # fmt: skip
        elif keeping:
            partly.append(f"{key}={wanted!r} is trained by {len(own) - len(keeping)} of {len(own)} arms; "
                          f"{', '.join(keeping)} keep their own")  # fmt: skip
    return refused, partly


def run_seed(chapter: Chapter, seed: int) -> dict:
    """Run one seed: the chapter's results plus `minutes` (wall-clock) if the run did not time itself."""
    start = time.perf_counter()
    results = chapter.run(seed)
    results.setdefault("minutes", (time.perf_counter() - start) / 60)
    return results


def claim_line(claim: Claim) -> str:
    """`C7.1 PASS <statement>`; a claim that does not apply gives its reason apart from its statement:
    `C7.2 not applicable (<reason>): <statement>`."""
    if claim.not_applicable:
        return f"{claim.id} {NOT_APPLICABLE} ({claim.not_applicable}): {claim.name}"
    return f"{claim.id} {claim.status} {claim.name}"


def check(chapter: Chapter, results: Mapping) -> list[Claim]:
    """The chapter's claims evaluated on one seed's results (those its run says do not apply, not checked)."""
    return evaluate_all(chapter.claims, chapter.claim_numbers(results), not_applicable=results.get("not_applicable"))


def run_seeds(
    chapter: Chapter,
    seeds: Sequence[int],
    record: bool = False,
    print_claims: bool = True,
    config: object | None = None,
    observe: Callable[[int], Sequence[tracking.Observer]] | None = None,
    checkpoints: Callable[[int], contextlib.AbstractContextManager] | None = None,
    fork: bool = False,
) -> list[dict]:
    """The command line's loop: run, print and (with `record`) write each seed in turn. With `print_claims`
    False a seed's verdicts are not printed (a chapter whose claims pool over seeds prints them at the end).
    `config`, the config the runs use, goes into each record's provenance (as plain data). `observe(seed)`, if
    given, returns the observers (`tracking`: progress lines, trackers) that watch the seed's training runs;
    `checkpoints(seed)`, if given, the block its training runs checkpoint in (`session.checkpointing`). A
    KeyboardInterrupt leaves with the seed it stopped (its `seed` attribute). A seed whose claims do not all apply
    (a chapter forked onto another environment) is recorded only in a `fork`'s own folder (`--out`), with the
    reasons; the course's records hold every claim of their chapter."""
    if record:
        recorded.begin()  # stamp the code and machine before the first seed runs
    outputs = []
    for seed in seeds:
        try:
            with checkpoints(seed) if checkpoints else contextlib.nullcontext():
                if observe is None:
                    results = run_seed(chapter, seed)
                else:
                    with tracking.observing(chapter.id, seed, observe(seed)):
                        results = run_seed(chapter, seed)
        except KeyboardInterrupt as stop:
            stop.seed = seed
            raise
        print(f"seed {seed} ({results['minutes']:.2f} min)")
        for line in chapter.report(results) if chapter.report else []:
            print(f"  {line}")
        numbers = chapter.claim_numbers(results)
        for claim in check(chapter, results) if print_claims else []:
            print(f"  {claim_line(claim)}")
        sys.stdout.flush()
        if record and results.get("not_applicable") and not fork:
            raise SystemExit(f"--record: {sorted(results['not_applicable'])} do not apply to this setting; a record "
                             "holds every claim of its chapter")  # fmt: skip
        if record:
            curves = chapter.curves(results) if chapter.curves else None
            recorded.record(chapter.id, seed, chapter.claims, numbers, results["minutes"], curves, config=config,
                            not_applicable=results.get("not_applicable"))  # fmt: skip
        outputs.append(results)
    return outputs

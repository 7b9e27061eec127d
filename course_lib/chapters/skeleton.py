"""The skeleton a chapter module fills in: its run, its claims, its command line.

A chapter describes itself once as a `Chapter` (how to run one seed, which numbers its claims read,
which curves it records, what to print) and gets, from here, the command line every chapter shares:

    python -m course_lib.chapters.<module> --seeds 0 1 2 [--record] [--set grpo.learning_rate=1e-3] [--config f.yaml]

which runs each seed, prints the claims, and with `--record` writes `results/<id>.json`. `--set` and `--config`
override the chapter's config (`course_lib.overrides`; a run with overrides is never recorded into the course's
`results/`, but `--record --out DIR` records a fork's runs into a folder of its own, with the resolved config, the
overrides and the code version in each record's provenance). `--env-module` imports the module that registers a
fork's environment, `--checkpoint-dir` and `--resume` make every training run of a seed resumable
(`train.checkpointing`), `--report-to` tracks them (`course_lib.rl.tracking`), and `--model` puts a checkpoint in place
of the chapter's base. The notebook calls the same `run_seed`, so what it shows and what the command records come
from one function. A chapter with options of its own passes `main` hooks (`arguments`, `configure`, `finish`).

It also holds the glue the chapters' data builders share: `task_splits` (a task set's columns),
`warm_start_base` (a base warm-started on demonstrations), `write_base` (that base as a `data/` artifact)
and `held_out_seeds` (a chapter's cached `test_seeds`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import inspect
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from course_lib import course_config, envs, overrides
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
    `checkpoints(seed)`, if given, the block its training runs checkpoint in (`train.checkpointing`). A
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


Configure = Callable[[argparse.Namespace, argparse.ArgumentParser], Chapter | None]
"""`(args, parser)` -> the chapter to run with these arguments, or None when it did the work itself."""


def designed_experiment(chapter: Chapter, flag: str, experiment: Callable[..., object]) -> Configure:
    """A `configure` hook for a chapter whose command line can run a pre-registered experiment instead: when
    `args.<flag>` is set it calls `experiment(args.seeds, record=args.record)` and the chapter does not run."""

    def configure(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Chapter | None:
        if getattr(args, flag):
            if getattr(args, "set", None) or getattr(args, "config", None):
                parser.error(f"--set and --config apply to the chapter's own run, not to --{flag.replace('_', '-')}")
            experiment(args.seeds, record=args.record)
            return None
        return chapter

    return configure


def main(
    chapter: Chapter,
    argv: list[str] | None = None,
    *,
    arguments: Callable[[argparse.ArgumentParser], object] | None = None,
    configure: Configure | None = None,
    finish: Callable[[argparse.Namespace, list[dict]], object] | None = None,
    print_claims: bool = True,
) -> list[dict]:
    """`python -m course_lib.chapters.<module> --seeds ... [--record]`, plus a chapter's own options.

    `arguments(parser)` adds the chapter's flags; `configure(args, parser)` returns the chapter to run
    under them (e.g. with `run` bound to a flag), or None when it handled the command itself (another mode);
    `finish(args, results)` runs after the last seed (e.g. statistics over seeds). Returns each seed's results.
    """
    parser = argparse.ArgumentParser(description=f"{chapter.title}: run several seeds and print the claims.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--record", action="store_true", help=f"write each seed's numbers to results/{chapter.id}.json (or --out's)"
    )
    parser.add_argument(
        "--out", metavar="DIR",
        help="with --record: write the records into DIR (a fork's results folder) instead of the course's results/; "
        "there --set and --config are allowed, and each record's provenance holds the resolved config, the overrides "
        "and the code version of the chapter's module and of --env-module's",
    )  # fmt: skip
    parser.add_argument(
        "--checkpoint-dir", metavar="DIR",
        help="checkpoint every training run of a seed after each iteration, into DIR/<id>-seed<k>/<k>-<method>",
    )  # fmt: skip
    parser.add_argument(
        "--resume", action="store_true",
        help="continue each training run from its checkpoint under --checkpoint-dir (bit for bit as an uninterrupted "
        "run; a checkpoint from other settings is refused)",
    )  # fmt: skip
    parser.add_argument(
        "--model", help="a checkpoint folder (any causal LM with a chat template) in place of the chapter's base"
    )
    parser.add_argument(
        "--full-finetune", action="store_true", help="with --model: warm-start every weight instead of a LoRA adapter"
    )
    from course_lib.rl import checkpoint  # lazily: it imports peft

    checkpoint.add_observation_role_argument(parser)
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override one field of the chapter's config, dotted into nested configs (grpo.learning_rate=1e-3, "
        "eval_tasks=50, sampling.stop_tags=a,b); repeatable, applied after --config. A run with overrides is not "
        "recorded into the course's results/ (--record refuses them there, so it holds the course's own settings "
        "only); --record --out DIR records it into a folder of yours",
    )  # fmt: skip
    parser.add_argument(
        "--config", metavar="FILE",
        help="a YAML (or .json) file holding a nested mapping of config keys to values, applied before --set",
    )  # fmt: skip
    parser.add_argument(
        "--report-to", nargs="+", default=[], choices=list(tracking.TRACKERS), metavar="TRACKER",
        help="log every training record as it happens: jsonl (always available: <run-dir>/<id>-seed<k>/metrics.jsonl), "
        "tensorboard, trackio, wandb (offline unless WANDB_MODE is set); the last three need pip install -e '.[track]'",
    )  # fmt: skip
    parser.add_argument(
        "--run-dir", default="runs", help="where --report-to writes, one folder per seed (default runs)"
    )
    parser.add_argument(
        "--env-module", action="append", default=[], metavar="MODULE",
        help="a module to import first, one that registers an environment of yours (envs.register), e.g. "
        "my_pkg.my_env for --set env_name=my_env; repeatable",
    )  # fmt: skip
    if arguments is not None:
        arguments(parser)
    args = parser.parse_args(argv)
    course_config.use_threads()  # a recorded seed and the notebook's live run of it use the same count
    try:
        envs.import_modules(args.env_module)  # before the config: its env_name may be one they register
    except ValueError as error:
        parser.error(str(error))
    if absent := tracking.missing(args.report_to):
        parser.error(f"--report-to needs {', '.join(absent)}, which is not installed: pip install -e '.[track]'")
    if args.full_finetune and not args.model:
        parser.error("--full-finetune applies to a checkpoint: give --model")
    if args.observation_role and not args.model:
        parser.error("--observation-role applies to a checkpoint: give --model")
    if args.model:
        if not chapter.checkpoint:
            parser.error(f"{chapter.id} always starts from its own base; --model works for the chapters that use "
                         "bases.base_for (00, 04, 06, 07, 08)")  # fmt: skip
        from course_lib import real_models

        if args.record and args.model not in real_models.MODELS:
            parser.error("--record writes the course's own results; a checkpoint's run is printed, not recorded (the "
                         f"course's real models record: --model {' or '.join(real_models.MODELS)})")  # fmt: skip
        if args.record and course_config.scale() != "gpu":
            parser.error(f"--record --model {args.model} writes the gpu preset's record (COURSE_SCALE=gpu, into "
                         f"results/gpu/{chapter.id}_{args.model}.json); on the cpu preset a real model's recorded runs "
                         "are pre-registered designs of their own (chapter 00's: --smollm2)")  # fmt: skip
        os.environ["COURSE_MODEL"] = args.model  # read by `base_for` in the chapter's run
        if args.full_finetune:
            os.environ["COURSE_MODEL_FULL_FINETUNE"] = "1"
        if args.observation_role:
            os.environ["COURSE_MODEL_OBSERVATION_ROLE"] = args.observation_role
    overridden = bool(args.set or args.config)
    if args.out and not args.record:
        parser.error("--out names where --record writes: give --record")
    into_course = args.out is None or Path(args.out).resolve() == (recorded.ROOT / "results").resolve()
    if overridden and args.record and into_course:
        parser.error("--record writes the course's own results; a run with --set or --config is printed, not recorded "
                     "(--out DIR records a fork's runs into a folder of its own)")  # fmt: skip
    if args.resume and not args.checkpoint_dir:
        parser.error("--resume continues the runs under --checkpoint-dir: give it")
    if args.resume and not Path(args.checkpoint_dir).is_dir():
        parser.error(f"--resume: {args.checkpoint_dir} does not exist, so there is no checkpoint to resume from; check "
                     "the path, or leave --resume out to start a fresh run")  # fmt: skip
    if args.model and args.record:  # a real model's gpu run: a file of its own beside the chapter's
        chapter = dataclasses.replace(chapter, id=f"{chapter.id}_{args.model}")
    with recorded.recording_into(args.out) if args.out else contextlib.nullcontext():
        return _run_command(chapter, args, parser, configure, finish, print_claims, overridden)


def _run_command(
    chapter: Chapter,
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    configure: Configure | None,
    finish: Callable[[argparse.Namespace, list[dict]], object] | None,
    print_claims: bool,
    overridden: bool,
) -> list[dict]:
    """`main` once its flags are checked: stamp a recording run, resolve the config, run the seeds."""
    given = [f"--config {args.config}"] * bool(args.config) + [f"--set {text}" for text in args.set]
    if args.record:
        # a fork's record (--out) also names its overrides and the code of its chapter's and environments' modules
        extra = {"overrides": given, "code": recorded.code_version([_module(chapter.run), *args.env_module])}
        try:
            recorded.begin(extra if args.out else None)  # the code and machine, stamped before anything runs
        except recorded.DirtyTree as error:
            parser.error(str(error))
    if configure is not None:
        chapter = configure(args, parser)
        if chapter is None:
            if overridden:
                parser.error("--set and --config apply to the chapter's own run; this mode did not use them")
            return []
    try:
        config = resolved_config(chapter, args.set, args.config) if overridden or args.record else None
    except overrides.OverrideError as error:
        parser.error(str(error))
    if overridden:
        if config is None:
            parser.error(f"{chapter.id}'s run takes no config, so --set and --config cannot apply to it")
        try:
            if isinstance(getattr(config, "env_name", None), str):
                envs.check_name(config.env_name)  # here, not after the base loads and the first evaluation runs
            if chapter.validate is not None:
                chapter.validate(config, say=False)  # the run says what it resolves
        except ValueError as error:
            parser.error(str(error))
        chapter = dataclasses.replace(chapter, run=functools.partial(chapter.run, config=config))
        print(f"{chapter.id} with {' '.join(given)}", flush=True)

    def observe(seed: int) -> list[tracking.Observer]:
        """A line per evaluation (a bar too on a terminal), and the trackers of `--report-to`."""
        if args.report_to:
            folder = tracking.run_folder(args.run_dir, chapter.id, seed)
            print(f"seed {seed}: {', '.join(args.report_to)} under {folder}", flush=True)
        return [tracking.Progress(), *tracking.trackers(args.report_to, args.run_dir, chapter.id, seed)]

    checkpoints = None
    if args.checkpoint_dir:
        from course_lib.rl import train

        # the resolved config goes into every checkpoint's fingerprint: a resume with other settings is refused
        settings = config if config is not None else resolved_config(chapter)

        def checkpoints(seed: int):
            return train.checkpointing(Path(args.checkpoint_dir) / f"{chapter.id}-seed{seed}", args.resume, settings)

    try:
        outputs = run_seeds(
            chapter, args.seeds, args.record, print_claims, config, observe, checkpoints, fork=bool(args.out)
        )
    except KeyboardInterrupt as stop:
        seed = getattr(stop, "seed", None)
        during = f" during seed {seed}" if seed is not None else ""
        if args.checkpoint_dir:
            hint = (
                f"to continue, run the same command and add --resume (its checkpoints are under {args.checkpoint_dir})"
            )
        else:
            hint = "nothing was checkpointed: run with --checkpoint-dir DIR to make a run resumable (then --resume)"
        recorded_seeds = " (the seeds recorded before it are kept)" if args.record else ""
        print(f"\n{chapter.id} interrupted{during}{recorded_seeds}; {hint}", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
    if finish is not None:
        finish(args, outputs)
    return outputs


def _module(run: Callable) -> object:
    """The module that defines a chapter's `run` (through the `functools.partial`s a command wraps it in)."""
    while isinstance(run, functools.partial):
        run = run.func
    return inspect.getmodule(run)

"""The command line every chapter shares:

    python -m course_lib.chapters.<module> --seeds 0 1 2 [--record] [--set grpo.learning_rate=1e-3] [--config f.yaml]
    python -m course_lib.chapters chNN --seeds 0 1 2 [...]        # the same, the chapter found by its key

It runs each seed (`skeleton.run_seeds`), prints the claims, and with `--record` writes `results/<id>.json`. `--set`
and `--config` override the chapter's config (`course_lib.overrides`; a run with overrides is never recorded into the
course's `results/`, but `--record --out DIR` records a fork's runs into a folder of its own, with the resolved
config, the overrides and the code version in each record's provenance). `--env-module` imports the module that
registers a fork's environment. The run session (`rl.session`) carries the rest to every training run the chapter
makes: `--checkpoint-dir` and `--resume` make each resumable, `--report-to` tracks them (`course_lib.rl.tracking`),
and `--model` (with `--full-finetune`, `--observation-role`) puts a checkpoint in place of the chapter's base. A
chapter with options of its own declares them as `Chapter` hooks (`options`, `configure`, `finish`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import inspect
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from course_lib import course_config, envs, overrides
from course_lib.chapters import skeleton
from course_lib.chapters.skeleton import Chapter, resolved_config, run_seeds
from course_lib.course import recorded
from course_lib.rl import session, tracking

Configure = Callable[[Chapter, argparse.Namespace, argparse.ArgumentParser], Chapter | None]
"""`(chapter, args, parser)` -> the chapter to run with these arguments, or None when it did the work itself."""


def designed_experiment(flag: str, experiment: Callable[..., object]) -> Configure:
    """A `configure` hook for a chapter whose command line can run a pre-registered experiment instead: when
    `args.<flag>` is set it calls `experiment(args.seeds, record=args.record)` and the chapter does not run."""

    def configure(chapter: Chapter, args: argparse.Namespace, parser: argparse.ArgumentParser) -> Chapter | None:
        if getattr(args, flag):
            if getattr(args, "set", None) or getattr(args, "config", None):
                parser.error(f"--set and --config apply to the chapter's own run, not to --{flag.replace('_', '-')}")
            experiment(args.seeds, record=args.record)
            return None
        return chapter

    return configure


def main(chapter: Chapter, argv: list[str] | None = None, *, print_claims: bool | None = None) -> list[dict]:
    """`python -m course_lib.chapters.<module> --seeds ... [--record]`, plus the chapter's own options: its
    `options(parser)` adds its flags; `configure(chapter, args, parser)` returns the chapter to run under them (e.g.
    with `run` bound to a flag), or None when it handled the command itself (another mode); `finish(args, results)`
    runs after the last seed (e.g. statistics over seeds). `print_claims` (default: the chapter's) prints each seed's
    claims. Returns each seed's results.
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
    parser.add_argument(
        "--threads", type=int, metavar="N",
        help="torch's intra-op threads for an unrecorded run (or a fork's --record --out); the course's records use "
        "its own count, 2, so that a notebook's live run equals the recorded seed",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", type=int, default=1, metavar="N",
        help="run the seeds in N processes at once, the threads divided between them (each seed's numbers are a "
        "serial run's on that many threads); its records go into one file",
    )  # fmt: skip
    parser.add_argument(
        "--print-config", action="store_true",
        help="print the resolved config (the preset with --config and --set applied, checked as a run checks it) as "
        "JSON and exit without running anything",
    )  # fmt: skip
    if chapter.options is not None:
        chapter.options(parser)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what --jobs hands its processes
    threads = course_config.use_threads()  # a recorded seed and the notebook's live run of it use the same count
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads must be at least 1, got {args.threads}")
        if args.record and not args.out and args.threads != threads:
            parser.error(f"--record writes the course's results/, recorded on {threads} threads (sums split over "
                         "another count round differently); --threads is for unrecorded runs and --out")  # fmt: skip
        torch.set_num_threads(args.threads)
    elif os.environ.get("OMP_NUM_THREADS", str(threads)) != str(threads):
        print(f"{chapter.id}: {threads} threads, the course's count (OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} "
              "is not used; --threads N sets it for an unrecorded run)", flush=True)  # fmt: skip
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
    changes = {"model": args.model, "full_finetune": args.full_finetune, "observation_role": args.observation_role}
    # one run session for every seed: the checkpoint in place of the chapter's base, as `bases.base_for` reads it
    with session.using(**{k: v for k, v in changes.items() if v}) if args.model else contextlib.nullcontext():
        with recorded.recording_into(args.out) if args.out else contextlib.nullcontext():
            shown = chapter.print_claims if print_claims is None else print_claims
            return _run_command(chapter, args, parser, shown, overridden)


def _run_command(
    chapter: Chapter,
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
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
    if chapter.configure is not None:
        chapter = chapter.configure(chapter, args, parser)
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
        base = getattr(config, "base", None)
        if args.record and args.out and isinstance(base, str) and Path(base).is_dir():  # a fork's own base, by content
            recorded.begin(
                extra | {"base": {"path": str(Path(base).resolve()), "sha256": recorded.folder_digest(base)}}
            )
        file_values = overrides.load_file(args.config) if args.config else None
        refused, partly = skeleton.ignored_overrides(chapter, config, skeleton.overridden_keys(args.set, file_values))
        if refused:
            parser.error("; ".join(refused))
        for line in partly:
            print(f"{chapter.id}: {line}", flush=True)
        chapter = dataclasses.replace(chapter, run=functools.partial(chapter.run, config=config))
        print(f"{chapter.id} with {' '.join(given)}", flush=True)

    if args.print_config:
        resolved = config if config is not None else resolved_config(chapter)
        if resolved is None:
            parser.error(f"{chapter.id}'s run takes no config: there is nothing to print")
        print(json.dumps(overrides.as_dict(resolved), indent=2))
        return []

    if args.jobs != 1:
        return _in_processes(chapter, args, parser, threads=torch.get_num_threads())

    def observe(seed: int) -> list[tracking.Observer]:
        """A line per evaluation (a bar too on a terminal), and the trackers of `--report-to`; the run folder gets
        the resolved config the seed runs with (`config.json`)."""
        if args.report_to:
            folder = tracking.run_folder(args.run_dir, chapter.id, seed)
            print(f"seed {seed}: {', '.join(args.report_to)} under {folder}", flush=True)
            resolved = config if config is not None else resolved_config(chapter)
            if resolved is not None:
                folder.mkdir(parents=True, exist_ok=True)
                (folder / "config.json").write_text(json.dumps(overrides.as_dict(resolved), indent=2) + "\n")
        return [tracking.Progress(), *tracking.trackers(args.report_to, args.run_dir, chapter.id, seed)]

    checkpoints = None
    if args.checkpoint_dir:
        # the resolved config goes into every checkpoint's fingerprint: a resume with other settings is refused
        settings = config if config is not None else resolved_config(chapter)

        def checkpoints(seed: int):
            return session.checkpointing(Path(args.checkpoint_dir) / f"{chapter.id}-seed{seed}", args.resume, settings)

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
    if chapter.finish is not None:
        chapter.finish(args, outputs)
    return outputs


def _in_processes(chapter: Chapter, args: argparse.Namespace, parser: argparse.ArgumentParser, threads: int) -> list:
    """`--jobs N`: the seeds in N processes of this command (`chapters.jobs`), the threads divided between them: those
    `--threads` names, else the machine's cores. The course's own records keep its count per process, since a record
    of another count would not equal the serial one it replaces. Returns no results: they are each process's."""
    import os

    from course_lib.chapters import jobs

    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if chapter.finish is not None:
        parser.error(f"{chapter.id} pools its seeds after the last one (its finish step): run them in one process")
    course_records = args.record and not args.out
    per = threads if course_records else max(1, (args.threads or os.cpu_count() or 1) // args.jobs)
    name = getattr(getattr(_module(chapter.run), "__spec__", None), "name", None) or _module(chapter.run).__name__
    codes = jobs.run_in_processes(name, args.argv, args.seeds, args.jobs, per)
    if any(codes):
        raise SystemExit(f"{chapter.id}: {sum(map(bool, codes))} of {len(codes)} processes failed (exit codes {codes})")
    return []


def _module(run: Callable) -> object:
    """The module that defines a chapter's `run` (through the `functools.partial`s a command wraps it in)."""
    while isinstance(run, functools.partial):
        run = run.func
    return inspect.getmodule(run)

"""The gpu preset's measurement run: each chapter's command under `COURSE_SCALE=gpu`, one after another, within a
budget of minutes, with a summary of minutes and verdicts at the end.

    python -m course_lib.lab.gpu_preset --chapters 00 04 06 --budget-minutes 12 --record

This is the one prepared script to run on a machine with a GPU. Each chapter runs as its own process
(`python -m course_lib.chapters.<module> --seeds 0 [--record]`), so a chapter that fails or runs out of time does
not take the others with it. The first chapter to load a base builds the gpu data it needs (once, into
`data.gpu_data_dir()`); that build is part of its minutes, and the build line in its output says so. With
`--record` each chapter writes `results/gpu/<chapter>.json` (never the cpu records). Chapters the budget leaves no
time for are listed as not run. The gpu table of `docs/running.md` is to take its minutes from these records; none
are recorded yet.

The pretrained-model mode runs the chapters on a checkpoint of your own instead of the course's bases:

    python -m course_lib.lab.gpu_preset --model Qwen/Qwen2.5-0.5B-Instruct --chapters 00 07 --budget-minutes 12

Each chapter's command gets `--model <folder>` under `COURSE_SCALE=gpu`: the checkpoint is warm-started (LoRA, or
every weight with `--full-finetune`) on the chapter's demonstrations in its chat template, then RL, evaluation and
claims run as usual (`course_lib.rl.checkpoint`). Only the chapters whose run starts from `bases.base_for` take a
checkpoint (`model_chapters()`); they are the default. The course never downloads at run time: a hub id must already
be in the Hugging Face cache of the machine (`hf download <id>` beforehand), or be given as a folder, and the
chapters run with `HF_HUB_OFFLINE=1`. A checkpoint's run is printed, not recorded: `--record` is refused, except for
the course's real model, whose records go to `results/gpu/<chapter>_smollm2.json`:

    python -m course_lib.lab.gpu_preset --model smollm2 --record --budget-minutes 12

runs chapters 00, 04, 06, 07 and 08 on SmolLM2-135M-Instruct (`python -m course_lib.data build smollm2` first) with
LoRA and micro-batched updates at the gpu presets' sizes, each chapter within what is left of the budget. Those sizes
were set for the course's word-level models, and no GPU has run this yet: whether the five chapters fit 12 minutes
is not yet measured. The estimate in docs/bring-your-own-model.md (counted from the presets and chapter 00's
recorded episodes on a CPU) says most likely not: chapter 00 takes minutes, and chapters 04, 06 and 07 at their
gpu presets several times what is left, so the run records chapter 00 and lists the rest as not run. See that page
for the model per chapter and its memory.

Chapter 16's survey comparisons on SmolLM2 run after the chapters, or alone:

    python -m course_lib.lab.gpu_preset --survey gigpo arpo --seeds 0 1 2 3 4 --budget-minutes 12 --record

each as `python -m course_lib.lab.real_survey compare <name>` under `COURSE_SCALE=gpu`: the same warm starts and
held-out problems as on the CPU, the RL of `real_survey.GPU_RL_SHAPES`, records in `results/gpu/ch16_<name>.json`.
No GPU has run them yet.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from course_lib import chapters, real_models
from course_lib.chapters import chapter_key
from course_lib.tasks.real_model import COMPARISONS

CLAIM_LINE = re.compile(r"^\s+(C\d+\.\d+[a-z]?) (PASS|FAIL|not reproduced at this scale) ")
WARM_START_LINE = re.compile(r"(LoRA|full) warm start on the chapter's demonstrations, (loss [\d.]+ -> [\d.]+)")


@dataclass
class ChapterRun:
    """One chapter's process: its wall-clock minutes, how it ended, and the verdicts it printed."""

    chapter: str
    minutes: float = 0.0
    status: str = "not run"
    verdicts: dict[str, str] = field(default_factory=dict)
    tail: str = ""
    warm_start: str = ""
    """With `--model`: the warm start's kind and loss, first to last step (`bases.base_for`'s line), else empty."""

    def line(self) -> str:
        verdicts = ", ".join(f"{claim} {verdict}" for claim, verdict in self.verdicts.items()) or "-"
        warm = f"; warm start {self.warm_start}" if self.warm_start else ""
        return f"{self.chapter}: {self.status}, {self.minutes:.1f} min{warm}; {verdicts}"


def parse(output: str, run: ChapterRun) -> ChapterRun:
    """The verdicts a chapter's command printed for its seeds (`skeleton.run_seeds`' format)."""
    for line in output.splitlines():
        claim = CLAIM_LINE.match(line)
        if claim:
            run.verdicts[claim.group(1)] = claim.group(2)
        warm = WARM_START_LINE.search(line)
        if warm and not run.warm_start:
            run.warm_start = f"{warm.group(1)}, {warm.group(2)}"
    return run


def model_chapters() -> list[str]:
    """The chapter keys whose run starts from `bases.base_for`, so `--model` replaces their base: the chapters
    whose `Chapter` says `checkpoint=True` (`chapters.index()`, so a chapter wired later joins without an edit here).
    Every chapter command accepts the flag (the skeleton's parser), but the others would ignore it."""
    return [key for key, chapter in chapters.index().items() if chapter.checkpoint]


def resolve_model(model: str, cache_dir: str | Path | None = None) -> Path:
    """The local folder of `model`: a real model's name (`smollm2`: its checked cache), a folder as given (it must
    hold a `config.json`), or a hub id's snapshot in the Hugging Face cache (`cache_dir`, default the cache
    `huggingface_hub` uses). Nothing is downloaded: the course never downloads at run time. FileNotFoundError says
    what to do."""
    if model in real_models.MODELS:
        return real_models.path(model)
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise FileNotFoundError(f"{model}: a folder without config.json; save a checkpoint there with "
                                    "`save_pretrained` (model and tokenizer)")  # fmt: skip
        return path.resolve()
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        snapshot = Path(snapshot_download(model, cache_dir=cache_dir, local_files_only=True))
    except (LocalEntryNotFoundError, ValueError) as missing:  # ValueError: not a valid repo id
        raise FileNotFoundError(
            f"{model}: neither a folder nor a model in the Hugging Face cache. The course never downloads at run "
            f"time; download it beforehand on a machine with network (`hf download {model}`, into the cache this "
            f"machine reads) or pass a folder saved with `save_pretrained`"
        ) from missing
    if not (snapshot / "config.json").exists():
        raise FileNotFoundError(f"{model}: its cached snapshot {snapshot} has no config.json; download it whole")
    return snapshot


def run_chapter(
    chapter: str,
    seeds: list[int],
    record: bool,
    timeout_s: float,
    env: dict[str, str],
    extra: Sequence[str] = (),
) -> ChapterRun:
    """`python -m course_lib.chapters.<module> --seeds ... [extra]` under the gpu preset, stopped after `timeout_s`
    (`extra`: `--model <folder>` and `--full-finetune` in the pretrained-model mode)."""
    key = chapter_key(chapter)
    command = [sys.executable, "-m", f"course_lib.chapters.{chapters.modules()[key]}", "--seeds", *map(str, seeds)]
    command += ["--record"] if record else []
    return run_process(key, command + list(extra), timeout_s, env)


def survey_command(comparison: str, seeds: list[int], record: bool) -> list[str]:
    """`python -m course_lib.lab.real_survey compare <comparison> --seeds ...`: one of chapter 16's survey comparisons
    on SmolLM2 (`--pilot` when every seed is a pilot's, 100 and up)."""
    command = [sys.executable, "-m", "course_lib.lab.real_survey", "compare", comparison, "--seeds", *map(str, seeds)]
    return command + (["--pilot"] if min(seeds) >= 100 else []) + (["--record"] if record else [])


def run_process(label: str, command: list[str], timeout_s: float, env: dict[str, str]) -> ChapterRun:
    """`command` in its own process, stopped after `timeout_s`: its minutes, how it ended, the verdicts it printed."""
    start = time.perf_counter()
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
        status = "ok" if done.returncode == 0 else f"exit {done.returncode}"
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as stopped:
        status = f"stopped after {timeout_s / 60:.1f} min"
        output = (stopped.stdout or b"").decode() if isinstance(stopped.stdout, bytes) else (stopped.stdout or "")
    run = ChapterRun(label, (time.perf_counter() - start) / 60, status, tail="\n".join(output.splitlines()[-5:]))
    return parse(output, run)


def run_all(
    chapters: list[str],
    seeds: list[int],
    budget_minutes: float,
    record: bool,
    model: Path | None = None,
    full_finetune: bool = False,
    name: str | None = None,
    survey: Sequence[str] = (),
) -> list[ChapterRun]:
    """Each chapter in turn with what is left of the budget; the rest are reported as not run. With `model` (a
    checkpoint folder) every chapter runs on it, offline (`name`: the real model's name it was resolved from, which
    the chapters get instead, so that `record` writes `results/gpu/<chapter>_<name>.json`); a failing chapter's last
    lines are printed either way, and with a model every chapter's are. Then each of chapter 16's `survey`
    comparisons on SmolLM2 (`survey_command`), in what is left."""
    env = {**os.environ, "COURSE_SCALE": "gpu"}
    extra: list[str] = []
    if model is not None:
        env["HF_HUB_OFFLINE"] = "1"  # the course never downloads at run time
        # a real model goes by its name (its cache is checked again), which also names its records
        extra = ["--model", name or str(model)] + (["--full-finetune"] if full_finetune else [])
    deadline = time.perf_counter() + 60 * budget_minutes
    jobs = [(chapter_key(chapter), lambda left, c=chapter: run_chapter(c, seeds, record, left, env, extra))
            for chapter in chapters]  # fmt: skip
    offline = {**env, "HF_HUB_OFFLINE": "1"}  # the survey runs on the course's real model, from its checked cache
    jobs += [(f"ch16_{name}", lambda left, n=name: run_process(f"ch16_{n}", survey_command(n, seeds, record), left,
                                                               offline)) for name in survey]  # fmt: skip
    runs = []
    for label, run in jobs:
        left = deadline - time.perf_counter()
        if left < 30:
            runs.append(ChapterRun(label, status="not run (budget spent)"))
            continue
        runs.append(run(left))
        print(runs[-1].line(), flush=True)
        if runs[-1].status != "ok" or model is not None or label.startswith("ch16_"):
            print(runs[-1].tail, flush=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.lab.gpu_preset", description=__doc__.splitlines()[0])
    parser.add_argument("--chapters", nargs="+", help="default: every chapter (with --model: those that take one)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--budget-minutes", type=float, default=12.0)
    parser.add_argument("--record", action="store_true", help="write results/gpu/<chapter>.json")
    parser.add_argument(
        "--survey",
        nargs="+",
        default=[],
        choices=list(COMPARISONS),
        help="chapter 16's survey comparisons on SmolLM2, after the chapters (results/gpu/ch16_*.json)",
    )
    parser.add_argument(
        "--model",
        help="a hub id already in the Hugging Face cache, or a checkpoint folder: the chapters run on it (nothing is "
        "downloaded)",
    )
    parser.add_argument(
        "--full-finetune", action="store_true", help="with --model: warm-start every weight instead of a LoRA adapter"
    )
    args = parser.parse_args(argv)
    if args.full_finetune and not args.model:
        parser.error("--full-finetune goes with --model")
    if args.model and args.record and args.model not in real_models.MODELS:
        parser.error("--record writes the course's own results; a checkpoint's run is printed, not recorded (the "
                     f"course's real models record: --model {' or '.join(real_models.MODELS)})")  # fmt: skip
    allowed = model_chapters() if args.model else list(chapters.modules())
    chosen = args.chapters or ([] if args.survey else [key.removeprefix("ch") for key in allowed])
    unknown = [c for c in chosen if not c.removeprefix("ch").isdigit() or chapter_key(c) not in chapters.modules()]
    if unknown:
        parser.error(f"unknown chapters {unknown}; choose from {sorted(chapters.modules())}")
    without = [c for c in chosen if chapter_key(c) not in allowed]
    if without:
        parser.error(
            f"chapters {without} do not take a checkpoint (they would run their own base); choose from {allowed}"
        )
    model = None
    if args.model:
        try:
            model = resolve_model(args.model)
        except FileNotFoundError as missing:
            parser.error(str(missing))
        print(f"pretrained-model mode: {args.model} from {model}, chapters {', '.join(map(chapter_key, chosen))}")
    runs = run_all(chosen, args.seeds, args.budget_minutes, args.record, model, args.full_finetune,
                   name=args.model if args.model in real_models.MODELS else None, survey=args.survey)  # fmt: skip
    print("summary:")
    for run in runs:
        print(f"  {run.line()}")
    finished = sum(run.status == "ok" for run in runs)
    print(f"gpu_preset_chapters_ok={finished}/{len(runs)}")
    return 0 if finished == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Leakage audit: are the held-out problems of every chapter distinct, and unseen in training?

Each chapter audits its own held-out splits (`Chapter.audit`, written with `course.leakage`'s helpers: `problem_keys`,
`grpo_task_seeds`, `run_seeds`, `base_seed`, `problem_overlaps`, and the task families' sub-problem counts:
`blocks_split`, `state_overlaps`, `two_hop_overlaps`, `lake_split`). For each chapter that gives an audit and each
evaluation split, at the cpu preset, this prints

- `N`, the number of problems one evaluation asks, and how many of them are distinct (a split is a
  space of problems drawn *with replacement* by seed, so the first N seeds can repeat problems);
- how many of those problems the policy also meets in RL training (the problems `train.train_grpo`
  and each chapter's other training batches draw, for every run seed recorded in the chapter's
  `results/<chapter>*.json`, confirmations and experiments included, or 0-2 if none: `run_seeds`;
  chapter 05's SFT arm's traces too);
- how many occur in the warm-start demonstrations the committed base was built from (regenerated
  with the chapter's own generator and the seed recorded in `data/MANIFEST.json`);
- where a task decomposes into steps, how many of its sub-problems occur in that data: for
  Blocksworld (chapters 01 and 02), the (state, goal) pairs on the optimal paths of each held-out
  problem, against the labelled-step and plan corpora of the base LM; for function calling (chapter
  05), the held-out (tool, parameter, value) triples of the `novel` split, against the calls written
  in the noisy demonstrations (whose value and key noise can land on a held-out pair); for the grid
  world (chapter 07) and FrozenLake (chapters 09 and 10), the observation of every state a held-out
  problem can show, against the observations of the warm-start demonstrations and every observation
  the RL draws' problems can show; for FrozenLake also the held-out first prompts and layouts (goal
  and holes: the observation leaves the start out, so a layout shared with training shares states);
  for two-hop questions (chapters 08, 11, 12), their hop lookups, both forms of hop 1 and both
  candidates' hop 2, against those of the training and demonstration questions.

Overlaps that remain are labelled (inherent to the task, or pending a base rebuild), not hidden.
The last line is `audit: chapters=K duplicates=D overlaps=O leaked_states=S (chNN=s ...)`, with D
the repeated problems summed over evaluation splits, O every overlap count (problems and
sub-problems) summed and S the held-out state observations found in training data, per chapter
with states. A split that cannot be audited (chapter 13 without `trl`) is printed as skipped and
named at the end of that line.

    python -m course_lib.lab.audit        # about 40 s on one core; no model is loaded
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable, Sequence

from course_lib.course.leakage import STATES, SplitAudit


def audits() -> dict[str, Callable[[], list[SplitAudit]]]:
    """Chapter key -> its audit (`skeleton.Chapter.audit`), for every chapter that gives one, in order."""
    from course_lib import chapters  # the course's table of chapters: imports every chapter module

    found = {key: chapter.audit for key, chapter in chapters.index().items() if chapter.audit is not None}
    for key, reason in chapters.unavailable().items():  # a chapter whose module needs a missing optional package
        found[key] = functools.partial(_skipped, key, reason)
    return dict(sorted(found.items()))


def _skipped(chapter: str, reason: str) -> list[SplitAudit]:
    return [SplitAudit(chapter, "test", 0, 0, skipped=reason)]


def totals(audits: Sequence[SplitAudit]) -> tuple[int, int, int]:
    """`(chapters, duplicates, overlaps)` over every audited split (a skipped one is not audited)."""
    audited = [a for a in audits if not a.skipped]
    chapters = len({a.chapter for a in audited})
    return chapters, sum(a.duplicates for a in audited), sum(o.count for a in audited for o in a.overlaps)


def leaked_states(audits: Sequence[SplitAudit]) -> dict[str, int]:
    """Per chapter with state-level counts (`STATES`), the held-out state observations found in its training data:
    the leak a per-problem count cannot see, apart in the summary so that inherent overlaps do not hide it."""
    leaked: dict[str, int] = {}
    for a in audits:
        for o in a.overlaps:
            if o.unit == STATES:
                leaked[a.chapter] = leaked.get(a.chapter, 0) + o.count
    return leaked


def summary(audits: Sequence[SplitAudit]) -> str:
    """The last line: `audit: chapters=K duplicates=D overlaps=O`, then the leaked held-out states (summed, and per
    chapter) where any chapter counts them, and the skipped splits where any is."""
    chapters, duplicates, overlaps = totals(audits)
    line = f"audit: chapters={chapters} duplicates={duplicates} overlaps={overlaps}"
    states = leaked_states(audits)
    if states:
        line += f" leaked_states={sum(states.values())} (" + " ".join(f"{c}={n}" for c, n in states.items()) + ")"
    skipped = [f"{a.chapter} {a.split}" for a in audits if a.skipped]
    return line + (f" skipped={', '.join(skipped)}" if skipped else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.lab.audit", description=__doc__.splitlines()[0])
    parser.add_argument(
        "chapters", nargs="*", metavar="chNN", help="chapters to audit (default: every chapter with an audit)"
    )
    args = parser.parse_args(argv)
    table = audits()
    unknown = sorted(set(args.chapters) - set(table))
    if unknown:
        parser.error(f"unknown chapters {unknown}; choose from {sorted(table)}")
    import torch

    torch.set_num_threads(1)  # nothing here is a tensor workload; stay off the other cores
    start = time.perf_counter()
    found = []
    for name in args.chapters or table:
        for audit in table[name]():
            print("\n".join(audit.lines()), flush=True)
            found.append(audit)
    print(f"({time.perf_counter() - start:.0f} s)")
    print(summary(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())

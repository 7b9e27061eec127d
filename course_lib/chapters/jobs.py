"""`--jobs N`: a chapter command's seeds in N processes at once, the machine's threads divided between them.

Each process is the same command (`python -m <the chapter's module> ...`) on its share of the seeds, with `--threads`
set to its share of the threads; nothing else changes, so a seed's numbers are the ones a serial run on that many
threads gives (floating-point sums split over another thread count round differently, which is why the count is
part of the run). Records from several processes go into one file safely: `recorded.write` locks it while it merges.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence


def shares(seeds: Sequence[int], jobs: int) -> list[list[int]]:
    """`seeds` dealt round-robin into at most `jobs` non-empty shares, in order: [0, 1, 2] over 2 -> [[0, 2], [1]]."""
    if jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {jobs}")
    dealt = [list(seeds[start::jobs]) for start in range(min(jobs, len(seeds)))]
    return [share for share in dealt if share]


def without(argv: Sequence[str], flags: dict[str, int]) -> list[str]:
    """`argv` without each flag of `flags` and the values it takes (`{"--jobs": 1, "--seeds": -1}`: -1, every value
    up to the next flag), in both `--flag value` and `--flag=value` forms."""
    out, index = [], 0
    while index < len(argv):
        word = argv[index]
        name = word.split("=", 1)[0]
        if name in flags:
            index += 1
            if "=" in word:
                continue
            count = flags[name]
            while index < len(argv) and (count < 0 and not argv[index].startswith("--") or count > 0):
                index, count = index + 1, count - 1
            continue
        out.append(word)
        index += 1
    return out


def run_in_processes(module: str, argv: Sequence[str], seeds: Sequence[int], jobs: int, threads: int) -> list[int]:
    """Run `python -m module` with `argv` (its `--jobs`, `--seeds` and `--threads` removed) once per share of `seeds`
    (`shares`), each with `--threads threads`, all at once; wait for all. Returns each process's exit code."""
    rest = without(argv, {"--jobs": 1, "--seeds": -1, "--threads": 1})
    processes = []
    for share in shares(seeds, jobs):
        command = [sys.executable, "-m", module, *rest, "--seeds", *map(str, share), "--threads", str(threads)]
        print(f"seeds {' '.join(map(str, share))}: {' '.join(command[1:])}", flush=True)
        processes.append(subprocess.Popen(command))
    return [process.wait() for process in processes]

"""The machine description (`course_lib.machine`) and the layering it exists for: the records layer
(`course_lib.course.recorded`) must not import the golden run, which imports the rollout engine and, for its
cases, every chapter."""

from __future__ import annotations

import json
import subprocess
import sys

from course_lib import machine
from course_lib.course import recorded
from course_lib.lab import golden


def test_golden_keeps_the_same_machine_description():
    assert golden.machine is machine.machine  # existing callers of `golden.machine` keep working
    described = machine.machine()
    assert set(described) == {"cpu", "cpu_simd", "cpu_capability", "torch", "transformers", "peft", "threads"}
    assert described["threads"] == str(golden.THREADS) == "2"
    assert machine.cpu_description() == described["cpu"]


def test_cpu_description_reads_the_fields_it_is_given():
    cpu = {"model name": "Example CPU 9000", "cpu family": "25", "model": "1", "flags": "fpu avx2 sse4_2"}
    assert machine.cpu_description(cpu) == "Example CPU 9000 (family 25, model 1)"


def test_results_provenance_does_not_import_the_golden_run_or_any_chapter():
    # A fresh interpreter: this test process has imported golden and chapters already.
    script = (
        "import json, sys\n"
        "from course_lib.course import recorded\n"
        "record = recorded.provenance()\n"
        "names = [n for n in sys.modules if n == 'course_lib.lab.golden' or n.startswith('course_lib.chapters.')\n"
        "         or n == 'course_lib.engine.rollout']\n"
        "print(json.dumps({'cpu': record['cpu'], 'imported': names}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    reported = json.loads(done.stdout.strip().splitlines()[-1])
    assert reported["imported"] == []
    assert reported["cpu"] == machine.cpu_description()
    assert recorded.provenance()["cpu"] == golden.machine()["cpu"]

"""docs/extending.md's recipes run as written: its `python` blocks, in order, in one fresh interpreter."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "extending.md"


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)


def test_the_guide_has_a_recipe_per_extension():
    text = GUIDE.read_text()
    headings = (
        "A new environment",
        "Training on it",
        "A new method",
        "A model of your own",
        "Runs you can",
        "A new chapter",
    )
    for heading in headings:
        assert f"· {heading}" in text, heading
    assert len(blocks()) >= 5


def test_every_recipe_runs_as_written():
    """Each block's printed lines are kept; a failing block fails the test with its traceback. The environment
    passes its contract check, both methods and the registered one train, and the stand-in's checks are exact."""
    script = "\n\n".join(blocks())
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "ok    reset:" in out and "FAIL" not in out
    assert re.search(r"^base: held-out success 0\.\d\d$", out, flags=re.MULTILINE), out
    for method in ("grpo", "gigpo"):
        assert re.search(rf"^{method}: training reward \S+ -> \S+, held-out success \S+$", out, re.MULTILINE), out
    assert re.search(r"^C8\.1 not applicable: it reads the ambiguity two_hop_qa plants; my_line has none$", out, re.M)
    assert re.search(r"^C8\.4 (PASS|FAIL)$", out, flags=re.MULTILINE), out
    assert re.search(r"^rloo: 2 iterations, loss \S+$", out, flags=re.MULTILINE), out
    assert "{'id_errors': 0, 'mask_errors': 0, 'text_errors': 0}" in out
    assert re.search(r"^  seed 0 1-grpo iteration 2/2: eval_success \S+", out, flags=re.MULTILINE), out
    assert re.search(r"^tracked: 3 records of run 1-grpo, held-out success \S+$", out, flags=re.MULTILINE), out
    assert "resumed: 2 iterations, the first restored from the checkpoint: True" in out
    assert "ch20: ['gigpo', 'grpo'], resumed run identical to the uninterrupted one: True" in out
    assert re.search(r"^C20\.2 (PASS|not reproduced at this scale)$", out, flags=re.MULTILINE), out
    assert re.search(
        r"^openenv: '<question> at \d+ goal \d+ </question>', reward \S+, the same as the environment "
        r"played directly: True$",
        out,
        flags=re.MULTILINE,
    ), out

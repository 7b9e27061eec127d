"""The restricted `python` tool: honest programs compute, hostile ones get `error:` text fast."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from course_lib import tools
from course_lib.tools.python_tool import Limits, run_python


@pytest.mark.parametrize(
    "source, expected",
    [
        ("347 + 512", "859"),
        ("7 * 6 - 2 ** 3", "34"),
        ("7 / 2", "3.5"),
        ("8 / 2", "4"),
        ("17 // 5, 17 % 5", "[3, 2]"),
        ("x = 3\ny = x * x\ny + 1", "10"),
        ("total = 0\nfor i in range(1, 11):\n    total += i\nprint(total)", "55"),
        ("for i in range(10, 0, -3):\n    print(i)", "10\n7\n4\n1"),
        ("x = 5\nif x > 3:\n    print('big')\nelse:\n    print('small')", "big"),
        ("print(1, 2)\nprint('a')", "1 2\na"),
        ("xs = [3, 1, 2]\nxs[0] = 10\nprint(sum(xs), len(xs), max(xs), xs)", "13 3 10 [10, 1, 2]"),
        ("sqrt(16) + abs(-2) + floor(2.7) + ceil(2.1) + gcd(12, 18)", "17"),
        ("round(3.14159, 2)", "3.14"),
        ("-5 if 1 < 2 < 3 else 5", "-5"),
        ("x = 1\nx = x + 1\n", ""),
    ],
)
def test_honest_programs(source, expected):
    """Allowed constructs compute exactly what Python would print."""
    assert run_python(source) == expected


HOSTILE = {
    "import": "import os\nos.system('echo hi')",
    "from_import": "from os import system",
    "dunder_import": "__import__('os').system('echo hi')",
    "attribute": "().__class__.__bases__[0].__subclasses__()",
    "open": "open('/etc/passwd')",
    "eval": "eval('1+1')",
    "exec": "exec('x = 1')",
    "lambda": "f = lambda: 1\nf()",
    "def": "def f():\n    return 1\nf()",
    "class": "class A:\n    pass",
    "while": "while True:\n    pass",
    "tower": "9**9**9",
    "big_power": "2**100000",
    "big_int_product": "x = 10**50\nx * x * x",
    "string_times_huge": "'a' * 10**9",
    "list_times_huge": "[0] * 10**9",
    "huge_range_loop": "for i in range(10**9):\n    pass",
    "nested_loops": "for i in range(1000):\n    for j in range(1000):\n        x = i * j",
    "nested_parens": "(" * 180 + "1" + ")" * 180 + " + " + "-" * 900 + "1",
    "nested_lists": "[" * 150 + "]" * 150,
    "long_chain": "+".join(["1"] * 600),
    "very_long_source": "1 + " * 10_000 + "1",
    "null_bytes": "\x00\xff\xfe garbage \x01",
    "unicode_garbage": "∑ ≠ ☃ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ؟",
    "fstring": "f'{1+1}'",
    "slice": "[1, 2, 3][0:2]",
    "keywords": "print(1, end='')",
    "division_by_zero": "1 / 0",
    "name_error": "y + 1",
    "walrus": "(x := 5)",
    "comprehension": "[i for i in range(10)]",
    "global": "global x",
    "try": "try:\n    1\nexcept Exception:\n    pass",
    "with": "with open('x') as f:\n    pass",
    "print_flood": "for i in range(5000):\n    print(123456789)",
}


@pytest.mark.parametrize("source", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_programs_are_refused_quickly(source):
    """Every hostile program comes back as one `error: ...` line within a second."""
    start = time.perf_counter()
    result = run_python(source)
    assert time.perf_counter() - start < 1.0
    assert result.startswith("error:"), result
    assert "\n" not in result


@pytest.mark.parametrize("source", ["'a' * 9999 * 9999", "[0] * 9999 * 9999", "x = 'ab' * 5000\nx * 9999"])
def test_sequence_products_are_refused_before_allocation(source):
    """A too-long product of sequences is refused without allocating it (peak memory under 20 MB)."""
    tracemalloc.start()
    try:
        result = run_python(source)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.startswith("error:")
    assert peak < 20e6, f"peak {peak / 1e6:.0f} MB"


def test_nested_aliases_respect_the_time_limit():
    """`[x] * 1000` of a 1000-item list is refused, or stopped near the time limit (here 0.05 s)."""
    start = time.perf_counter()
    result = run_python("x = [0] * 1000\ny = [x] * 1000\nlen(y)", Limits(max_seconds=0.05))
    assert time.perf_counter() - start < 0.2
    assert result.startswith("error:")


def test_multiplication_below_limits_still_works():
    """The limits refuse big sequences without breaking ordinary ones."""
    assert run_python("len('ab' * 5000)") == "10000"
    assert run_python("x = [0] * 100\nlen(x * 100)") == "10000"
    assert run_python("x = [0] * 100\nlen([x] * 100)") == "error: nested lists are not allowed"


def test_lone_surrogate_source_is_an_error_not_an_exception():
    """run_python never raises, even on text that is not valid UTF-8."""
    assert run_python("1 + \ud800").startswith("error:")


def test_tools_call_registry():
    """The registry lists both tools and `call` turns bad names and arguments into error text."""
    assert {"python", "calculator"} <= set(tools.names())
    assert tools.call("python", "print(6 * 7)") == "42"
    assert tools.call("calculator", "6 * 7") == "42"
    assert tools.call("calculator", "x = 1").startswith("error:")
    assert tools.call("shell", "ls").startswith("error: unknown tool")
    for bad in (None, 42, b"1+1", ["1+1"]):
        assert tools.call("python", bad).startswith("error:")
    assert tools.call("python", "1 + \ud800").startswith("error:")

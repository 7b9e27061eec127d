"""The `lookup` tool: prices of generated goods in a small fixed table (chapter 06, ARTIST).

ARTIST's agents call more than one kind of tool. Chapter 06 pairs the restricted `python` tool
with this one: a read-only table of `TABLE_SIZE` made-up goods (word-level names such as `tamivo`)
and their prices, generated deterministically from `TABLE_SEED`. The argument is one name; any
other argument (an unknown name, several words, nothing) comes back as `error: ...` text, never an
exception.
"""

from __future__ import annotations

import random

from course_lib.tools import register

TABLE_SIZE = 48
TABLE_SEED = 6
PRICE_RANGE = (10, 99)
_SYLLABLES = ("ka", "mi", "to", "ru", "ve", "lo", "sa", "ni", "bo", "te", "fu", "da")


def _generate(size: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    table: dict[str, int] = {}
    while len(table) < size:
        name = "".join(rng.choice(_SYLLABLES) for _ in range(3))
        table.setdefault(name, rng.randint(*PRICE_RANGE))
    return table


TABLE: dict[str, int] = _generate(TABLE_SIZE, TABLE_SEED)
"""Name -> price, the whole table."""


def lookup(arguments: str) -> str:
    """The price of the one good named in `arguments` (surrounding spaces ignored), as text."""
    if not isinstance(arguments, str):
        return "error: arguments must be text"
    key = arguments.strip()
    if not key:
        return "error: lookup needs a name"
    if len(key.split()) != 1:
        return "error: lookup takes one name"
    if key not in TABLE:
        return "error: unknown key"
    return str(TABLE[key])


register("lookup", lookup)

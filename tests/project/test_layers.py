"""The package's folders draw its layers (course_lib's docstring): a module imports only from its own layer or the
layers below it, at module level, inside a function or for type checking alike; no chapter imports another; and
nothing looks a chapter up by a name or key written into the code. An exception is listed in `EXCEPTIONS` with its
reason, and the list only shrinks."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import course_lib

ROOT = Path(course_lib.__file__).parent
LAYERS = (
    {
        "course_config",
        "machine",
        "overrides",
        "validation",
        "tokenizer",
        "models",
        "data",
        "real_models",
        "implement_it",
        "bridges",
    },
    {"tools"},
    {"envs"},
    {"algos"},
    {"engine"},
    {"diagnostics"},
    {"rl"},
    {"search"},
    {"tasks"},
    {"course"},
    {"chapters"},
    {"lab", "integrations", "__main__"},  # what walks the chapters: the course's tools, the engines' routes, the CLI
)
LAYER = {name: depth for depth, names in enumerate(LAYERS) for name in names}
EXCEPTIONS = {
    ("course_lib.data", "course_lib.lab.build"): "`python -m course_lib.data build chNN` is the data command's name, "
    "and a missing gpu base is built on first use by its chapter's `build_data`: both need the builders' table, "
    "which only the build command above the chapters can read",
    ("course_lib.chapters.ch13_scale_out", "course_lib.integrations"): "chapter 13 is the TRL route's own chapter: it "
    "trains chapter 00's task through `course_trl` and checks the methods with `trl_checks`, which sit above the "
    "chapters because their commands find a chapter's task by its key",
}
"""`(importing module, imported module or package)` -> why the import goes up a layer."""
CHAPTER_MODULE = re.compile(r"course_lib\.chapters\.(ch\d\d)_\w+")
CHAPTER_KEY = re.compile(r"(?:course_lib\.chapters\.)?(?:ch)?\d\d(?:_\w+)?")
INDEX_LOOKUPS = {"module", "load", "task", "design"}
"""The chapters' index's functions that find a chapter from its key (`chapters.module("ch12")`)."""
TASK_LOOKUPS = {"chapter_task", "chapter_setup", "chapter_tasks"}
"""The integrations' functions that find a chapter's task from its key (`course_trl.chapter_task("00")`)."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str | None:
    """`course_lib.engine.rollout` -> `engine`; None outside course_lib or for the package itself."""
    parts = module.split(".")
    return parts[1] if parts[0] == "course_lib" and len(parts) > 1 else None


def imports(path: Path) -> list[tuple[int, str]]:
    """`(line, course_lib module)` of every import in a module: at its top level, inside functions and classes, and
    under `if TYPE_CHECKING:`. `from course_lib.x import y` counts as `course_lib.x.y` (a module or a name in one)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if layer_of(name)]


def excepted(me: str, target: str) -> bool:
    return any(me == a and (target == b or target.startswith(b + ".")) for a, b in EXCEPTIONS)


def modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def test_every_module_belongs_to_a_layer():
    names = {path.stem if path.is_file() else path.name for path in ROOT.iterdir()}
    names = {name for name in names if not name.startswith(("_", ".")) and name != "py"}
    assert names - set(LAYER) == set(), "a new module or package: add it to a layer here and in the docstring"


def test_no_module_imports_from_a_layer_above_its_own():
    """At module level, inside functions and for type checking alike."""
    violations = []
    for path in modules():
        me = module_name(path)
        own = layer_of(me)
        if own is None:
            continue
        for line, target in imports(path):
            if LAYER[layer_of(target)] > LAYER[own] and not excepted(me, target):
                violations.append(f"{path.relative_to(ROOT.parent)}:{line} imports {target}")
    assert violations == []


def test_every_exception_is_still_needed():
    """An exception that no import uses any more is taken off the list: the debts only shrink."""
    used = set()
    for path in modules():
        me = module_name(path)
        used |= {(a, b) for _, target in imports(path) for a, b in EXCEPTIONS if excepted(me, target) and me == a}
    assert set(EXCEPTIONS) - used == set()


def test_no_chapter_imports_another():
    """A chapter module (and its designed setting, `chNN_design`) imports no other chapter's module: what chapters
    share lives in `course_lib.tasks`."""
    violations = []
    for path in (ROOT / "chapters").glob("ch[0-9][0-9]_*.py"):
        for line, target in imports(path):
            match = CHAPTER_MODULE.match(target)
            if match and match.group(1) != path.name[:4]:
                violations.append(f"chapters/{path.name}:{line} imports {target}")
    assert violations == []


def test_the_tools_above_the_chapters_import_none_by_name():
    """`lab` and `integrations` walk the chapters (`chapters.index()`, `chapters.task(key)` from a command's
    `--chapter`) and import no chapter module by name."""
    violations = []
    for package in ("lab", "integrations"):
        for path in (ROOT / package).rglob("*.py"):
            violations += [f"{package}/{path.name}:{line} imports {t}" for line, t in imports(path)
                           if CHAPTER_MODULE.match(t)]  # fmt: skip
    assert violations == []


def test_nothing_looks_a_chapter_up_by_a_key_written_into_the_code():
    """No `chapters.module("ch12")`, `chapters.task("08")`, `importlib.import_module("course_lib.chapters.ch09_...")`:
    a key comes from the chapters' index or from a command line, never from the code."""
    violations = []
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            owner = getattr(getattr(node.func, "value", None), "id", None)
            first = node.args[0]
            if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                continue
            lookup = (
                (name in INDEX_LOOKUPS and owner == "chapters" and CHAPTER_KEY.fullmatch(first.value))
                or (name in TASK_LOOKUPS and CHAPTER_KEY.fullmatch(first.value))
                or (name == "import_module" and CHAPTER_MODULE.match(first.value))
            )
            if lookup:
                violations.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {name}({first.value!r})")
    assert violations == []


def test_the_checks_catch_what_they_are_for(tmp_path, monkeypatch):
    """The checks above find an upward import inside a function, a chapter importing another, and a lookup by key."""
    planted = ROOT / "engine" / "_planted_for_the_layer_test.py"
    planted.write_text(
        "def f():\n    from course_lib.rl import train\n    return train\n\n\n"
        "def g(chapters):\n    return chapters.module('ch12')\n"
    )
    try:
        found = [target for _, target in imports(planted)]
        assert "course_lib.rl.train" in found and LAYER[layer_of(found[0])] > LAYER["engine"]
        calls = [node for node in ast.walk(ast.parse(planted.read_text())) if isinstance(node, ast.Call)]
        assert any(CHAPTER_KEY.fullmatch(call.args[0].value) for call in calls if call.args)
    finally:
        planted.unlink()
    assert CHAPTER_MODULE.match("course_lib.chapters.ch07_gigpo.EnvFactory").group(1) == "ch07"


def test_the_docstring_names_every_layer_in_order():
    doc = course_lib.__doc__
    positions = [min(doc.index(f"`{name}`") for name in layer) for layer in LAYERS]
    assert positions == sorted(positions), "course_lib's docstring lists the layers in this test's order"


def test_the_library_page_and_the_docstring_name_the_same_top_level_modules():
    """The library's page (docs/library.md, linked from the README) and the package docstring list the same modules
    and packages: every top-level name of the package."""
    section = (ROOT.parent / "docs" / "library.md").read_text()

    def named(text: str) -> set[str]:
        return {name for name in re.findall(r"`([a-z_]+)`", text) if name in LAYER}

    assert named(section) == named(course_lib.__doc__) == set(LAYER)

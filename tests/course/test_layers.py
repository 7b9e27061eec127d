"""The package's folders draw its layers (course_lib's docstring): a module imports, at module level, only from its
own layer or the layers before it. An import inside a function (for a command line, or the table of the course's
chapters) is the one way down from above, and says why where it stands."""

from __future__ import annotations

import ast
from pathlib import Path

import course_lib

ROOT = Path(course_lib.__file__).parent
LAYERS = (
    {"course_config", "machine", "overrides", "validation", "tokenizer", "models", "data", "real_models"},
    {"tools"},
    {"envs"},
    {"algos"},
    {"engine"},
    {"diagnostics"},
    {"rl"},
    {"search"},
    {"tasks"},
    {"course", "chapters", "integrations"},  # the course's top: chapters describe themselves with `course.claims`,
    # and the course's tools read the chapters through `chapters.all()`, inside functions
)
LAYER = {name: depth for depth, names in enumerate(LAYERS) for name in names}


def top_name(module: str) -> str | None:
    """`course_lib.engine.rollout` -> `engine`; None outside course_lib or for the package itself."""
    parts = module.split(".")
    return parts[1] if parts[0] == "course_lib" and len(parts) > 1 else None


def module_level_imports(path: Path) -> list[tuple[int, str]]:
    """`(line, course_lib name)` of every import statement at a module's top level (not inside a def or class)."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "course_lib":
                found += [(node.lineno, f"course_lib.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, name) for line, name in found if top_name(name)]


def test_every_module_belongs_to_a_layer():
    names = {path.stem if path.is_file() else path.name for path in ROOT.iterdir()}
    names = {name for name in names if not name.startswith(("_", ".")) and name != "py"}
    assert names - set(LAYER) == set(), "a new module or package: add it to a layer here and in the docstring"


def test_no_module_imports_from_a_layer_above_its_own():
    violations = []
    for path in sorted(ROOT.rglob("*.py")):
        own = path.relative_to(ROOT).parts[0].removesuffix(".py")
        if own == "__init__":
            continue
        for line, name in module_level_imports(path):
            target = top_name(name)
            if target in LAYER and LAYER[target] > LAYER[own]:
                violations.append(f"{path.relative_to(ROOT.parent)}:{line} imports {name}")
    assert violations == []


def test_the_docstring_names_every_layer_in_order():
    doc = course_lib.__doc__
    positions = [min(doc.index(f"`{name}`") for name in layer) for layer in LAYERS]
    assert positions == sorted(positions), "course_lib's docstring lists the layers in this test's order"


def test_the_library_page_and_the_docstring_name_the_same_top_level_modules():
    """The library's page (docs/library.md, linked from the README) and the package docstring list the same modules
    and packages: every top-level name of the package."""
    import re

    section = (ROOT.parent / "docs" / "library.md").read_text()

    def named(text: str) -> set[str]:
        return {name for name in re.findall(r"`([a-z_]+)`", text) if name in LAYER}

    assert named(section) == named(course_lib.__doc__) == set(LAYER)

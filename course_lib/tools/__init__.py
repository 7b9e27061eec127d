"""Tools an agent can call, by name (chapters 00 and 04 onward).

`call(name, arguments)` never raises: unknown tools, bad arguments and failing programs all come
back as short text starting with `error:`, which is what a policy sees in `<tool_response>`.
"""

from __future__ import annotations

from collections.abc import Callable

from course_lib.tools.python_tool import Limits, run_python

_REGISTRY: dict[str, Callable[[str], str]] = {}


def register(name: str, function: Callable[[str], str]) -> None:
    """Register `function(arguments: str) -> str` as the tool `name`."""
    _REGISTRY[name] = function


def names() -> list[str]:
    """Names of the registered tools, sorted."""
    return sorted(_REGISTRY)


def call(name: str, arguments: str) -> str:
    """Call tool `name` with its argument text; errors come back as `error: ...` text."""
    if not isinstance(name, str) or name not in _REGISTRY:
        return f"error: unknown tool {name!r}"
    if not isinstance(arguments, str):
        return "error: arguments must be text"
    try:
        return _REGISTRY[name](arguments)
    except Exception as err:  # a tool bug must not crash a rollout; report it as the tool's answer
        return f"error: {type(err).__name__}"


def _calculator(expression: str) -> str:
    """One arithmetic expression, evaluated by the restricted interpreter."""
    if "\n" in expression.strip() or "=" in expression.replace("==", ""):
        return "error: the calculator takes a single expression"
    return run_python(expression, Limits(max_steps=2_000))


register("python", run_python)
register("calculator", _calculator)


def _import_all() -> None:
    """Import every other module of this package: each registers its tools when imported."""
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(__path__):
        if module.name != "python_tool":
            importlib.import_module(f"{__name__}.{module.name}")


_import_all()

__all__ = ["Limits", "call", "names", "register", "run_python"]

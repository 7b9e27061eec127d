"""Text environments by name: `names()`, `make(name, **kwargs)` (see `base.TextEnv` for the API), and
`check_env(env)`, the contract a new environment must keep (`check.py`).

The course's environments are imported when first made, so that importing the engine or one
environment does not load every environment and the tools behind them."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

from course_lib.envs.base import InvalidAction, TextEnv, extract_tag
from course_lib.envs.check import EnvContractError, check_env

_REGISTRY: dict[str, Callable[..., TextEnv]] = {}
_BUILT_IN = {
    "bandit": "bandit",
    "blocksworld": "blocksworld",
    "frozen_lake": "frozen_lake",
    "function_calling": "function_calling",
    "key_door": "key_door",
    "mini_travel": "mini_travel",
    "number_line": "template",
    "price_tools": "price_tools",
    "sokoban": "sokoban",
    "tool_arithmetic": "arithmetic",
    "two_hop_qa": "two_hop_qa",
    "word_math": "word_math",
}
"""Environment name -> the module of this package that registers it on import."""


def register(name: str, factory: Callable[..., TextEnv]) -> None:
    """Register `factory(**kwargs) -> TextEnv` under `name`."""
    _REGISTRY[name] = factory


def names() -> list[str]:
    """Registered and built-in environment names, sorted."""
    return sorted(set(_REGISTRY) | set(_BUILT_IN))


def import_modules(modules: Sequence[str]) -> None:
    """Import each of `modules` (a fork's `my_pkg.my_env`, which calls `register` for its environment): what a
    command's `--env-module` does. A module that cannot be imported is a ValueError naming it and why."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as error:  # ImportError, or whatever the module raised while registering
            raise ValueError(
                f"--env-module {module} cannot be imported ({type(error).__name__}: {error}); it must be importable "
                "from where the command runs (the current folder is on the path of `python -m`, or set PYTHONPATH)"
            ) from error


def check_name(name: str) -> None:
    """Raise a ValueError unless `name` is a registered or built-in environment, saying how a fork's registers."""
    if name not in names():
        raise ValueError(
            f"unknown environment {name!r}; registered: {', '.join(names())} (--env-module my_pkg.my_env imports the "
            "module that registers yours)"
        )


def make(name: str, **kwargs) -> TextEnv:
    """A new environment `name` built with `kwargs`."""
    if name not in _REGISTRY and name in _BUILT_IN:
        importlib.import_module(f"{__name__}.{_BUILT_IN[name]}")
    if name not in _REGISTRY:
        raise KeyError(f"unknown environment {name!r}; registered: {names()}")
    return _REGISTRY[name](**kwargs)


__all__ = [
    "EnvContractError", "InvalidAction", "TextEnv", "check_env", "check_name", "extract_tag", "import_modules", "make",
    "names", "register",
]  # fmt: skip

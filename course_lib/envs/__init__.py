"""Text environments by name: `names()`, `make(name, **kwargs)` (see `base.TextEnv` for the API), and
`check_env(env)`, the contract a new environment must keep (`check.py`).

The course's environments are imported when first made, so that importing the engine or one
environment does not load every environment and the tools behind them."""

from __future__ import annotations

import importlib
from collections.abc import Callable

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


def make(name: str, **kwargs) -> TextEnv:
    """A new environment `name` built with `kwargs`."""
    if name not in _REGISTRY and name in _BUILT_IN:
        importlib.import_module(f"{__name__}.{_BUILT_IN[name]}")
    if name not in _REGISTRY:
        raise KeyError(f"unknown environment {name!r}; registered: {names()}")
    return _REGISTRY[name](**kwargs)


__all__ = ["EnvContractError", "InvalidAction", "TextEnv", "check_env", "extract_tag", "make", "names", "register"]

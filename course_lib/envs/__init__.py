"""Text environments by name: `names()`, `make(name, **kwargs)` (see `base.TextEnv` for the API)."""

from __future__ import annotations

from collections.abc import Callable

from course_lib.envs.base import InvalidAction, TextEnv, extract_tag

_REGISTRY: dict[str, Callable[..., TextEnv]] = {}


def register(name: str, factory: Callable[..., TextEnv]) -> None:
    """Register `factory(**kwargs) -> TextEnv` under `name`."""
    _REGISTRY[name] = factory


def names() -> list[str]:
    """Registered environment names, sorted."""
    return sorted(_REGISTRY)


def make(name: str, **kwargs) -> TextEnv:
    """A new environment `name` built with `kwargs`."""
    if name not in _REGISTRY:
        raise KeyError(f"unknown environment {name!r}; registered: {names()}")
    return _REGISTRY[name](**kwargs)


from course_lib.envs.arithmetic import ToolArithmeticEnv  # noqa: E402  (registers itself)

__all__ = ["InvalidAction", "TextEnv", "ToolArithmeticEnv", "extract_tag", "make", "names", "register"]

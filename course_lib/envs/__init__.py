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


def _import_all() -> None:
    """Import every module of this package: each registers its environments when imported."""
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(__path__):
        if module.name != "base":
            importlib.import_module(f"{__name__}.{module.name}")


_import_all()

__all__ = ["InvalidAction", "TextEnv", "extract_tag", "make", "names", "register"]

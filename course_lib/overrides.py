"""Config overrides for chapter commands: `--set key=value` and `--config file.yaml`.

A chapter's configuration is a tree of dataclasses (`Chapter07Config` holding a `GRPOConfig` holding a
`GiGPOConfig`, ...). An override names a leaf by its dotted path (`grpo.gigpo.gamma`) and gives it a value:

- on the command line as text, parsed to the field's declared type (`int`, `float`, `bool`, `str`, `X | None`,
  `Literal[...]`, tuples such as `tuple[str, ...]` written `a,b` or `(a, b)`, a `dict` written as YAML `{k: v}`);
- in a YAML (or JSON) file as a nested mapping of the same shape, whose values YAML has already typed.

Every change goes through `dataclasses.replace`, so a config that validates on construction (`GRPOConfig`,
`SamplingConfig`, ...) refuses a bad value here, before anything runs. An unknown key is an error naming the keys
that level has, so a typo such as `grpo.lr` cannot silently train with the default.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path


class OverrideError(ValueError):
    """An override that names no field, or gives a value the field cannot take; the message names the key."""


TRUE = frozenset({"true", "yes", "on", "1"})
FALSE = frozenset({"false", "no", "off", "0"})
NONE = frozenset({"none", "null", "~"})


def parse_assignment(text: str) -> tuple[str, str]:
    """`"grpo.learning_rate=1e-3"` -> `("grpo.learning_rate", "1e-3")` (the value may itself hold `=`)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise OverrideError(f"--set takes key=value (a dotted key such as grpo.learning_rate=1e-3), got {text!r}")
    return key.strip(), value.strip()


def load_file(path: str | Path) -> dict:
    """A config file's nested mapping: YAML (`.yaml`, `.yml`) or JSON (`.json`)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise OverrideError(f"--config {path}: {error.strerror or error}") from error
    if path.suffix == ".json":
        loaded = json.loads(text, object_pairs_hook=lambda pairs: _unique(pairs, path))
    else:
        import yaml  # PyYAML comes with transformers and huggingface_hub

        class UniqueKeys(yaml.SafeLoader):
            """YAML keeps the last of two equal keys; a config file's second `grpo:` would then drop the first."""

            def construct_mapping(self, node, deep=False):
                seen = set()
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=deep)
                    if key in seen:
                        _unique([(key, None)] * 2, path, f" (line {key_node.start_mark.line + 1})")
                    seen.add(key)
                return super().construct_mapping(node, deep=deep)

        try:
            loaded = yaml.load(text, Loader=UniqueKeys)  # noqa: S506 (a SafeLoader)
        except yaml.YAMLError as error:
            raise OverrideError(f"--config {path} is not valid YAML: {error}") from error
    if loaded is None:
        return {}
    if not isinstance(loaded, Mapping):
        raise OverrideError(f"--config {path} must hold a mapping of config keys, got {type(loaded).__name__}")
    return dict(loaded)


def _unique(pairs: list[tuple], path: Path, where: str = "") -> dict:
    """`pairs` as a dict, or an OverrideError naming a key given twice in one mapping of config file `path`."""
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise OverrideError(f"--config {path}: key {key!r} is given twice in one mapping{where}; keep one")
        seen.add(key)
    return dict(pairs)


def apply(config, file_values: Mapping | None = None, assignments: Sequence[tuple[str, object]] = ()):
    """`config` with a file's nested mapping applied, then each `(dotted key, value)` in order (a later one wins).

    Returns a new config; `config` itself is not changed."""
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise OverrideError(f"overrides apply to a dataclass config, not {type(config).__name__}")
    if file_values:
        config = _merge(config, file_values, "")
    for key, value in assignments:
        config = _set(config, key.split("."), value, key)
    return config


def as_dict(value):
    """A config as plain JSON data (dataclasses and mappings to dicts, tuples to lists), e.g. for a results file's
    provenance or a tracker's run config; a value JSON cannot hold (a prompt format object) becomes its repr."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {spec.name: as_dict(getattr(value, spec.name)) for spec in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(key): as_dict(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_dict(item) for item in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def keys(config, prefix: str = "") -> list[str]:
    """Every settable dotted key of `config` (leaves only), in declaration order."""
    found = []
    for spec in _settable(config):
        value = getattr(config, spec.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            found += keys(value, f"{prefix}{spec.name}.")
        else:
            found.append(f"{prefix}{spec.name}")
    return found


# ---------------------------------------------------------------------------------------------------------------
def _settable(config) -> list[dataclasses.Field]:
    return [spec for spec in dataclasses.fields(config) if spec.init]


def _field(config, name: str, full_key: str) -> dataclasses.Field:
    fields = {spec.name: spec for spec in _settable(config)}
    if name in fields:
        return fields[name]
    prefix = full_key.rpartition(".")[0]
    close = difflib.get_close_matches(name, list(fields), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise OverrideError(
        f"unknown config key {full_key!r}{hint}: {type(config).__name__} "
        + (f"(at {prefix}) " if prefix else "")
        + "has "
        + ", ".join(fields)
    )


def _hints(config) -> dict[str, object]:
    """The config class's field types, resolved (`from __future__ import annotations` leaves them as strings)."""
    try:
        return typing.get_type_hints(type(config))
    except Exception:  # a name only imported under TYPE_CHECKING: fall back to each field's current value's type
        return {}


def _replace(config, name: str, value, full_key: str):
    try:
        return dataclasses.replace(config, **{name: value})
    except (ValueError, TypeError) as error:  # the config's own validation
        raise OverrideError(f"{full_key}={value!r} is refused by {type(config).__name__}: {error}") from error


def _set(config, path: list[str], value, full_key: str):
    spec = _field(config, path[0], _key_so_far(full_key, path))
    current = getattr(config, spec.name)
    if len(path) > 1:
        if dataclasses.is_dataclass(current) and not isinstance(current, type):
            return _replace(config, spec.name, _set(current, path[1:], value, full_key), full_key)
        if isinstance(current, Mapping) and len(path) == 2:  # e.g. env_kwargs.size=7: one entry of a dict field
            declared = typing.get_args(_hints(config).get(spec.name))
            hint = declared[1] if len(declared) == 2 else type(current[path[1]]) if path[1] in current else object
            return _replace(config, spec.name, {**current, path[1]: _coerce(value, hint, full_key)}, full_key)
        raise OverrideError(f"{full_key!r}: {'.'.join(full_key.split('.')[: -len(path) + 1])} is a value, not a group")
    if dataclasses.is_dataclass(current) and not isinstance(current, type):
        if isinstance(value, Mapping):
            return _replace(config, spec.name, _merge(current, value, full_key + "."), full_key)
        raise OverrideError(f"{full_key!r} is a group: set one of its keys, {', '.join(keys(current, full_key + '.'))}")
    hint = _hints(config).get(spec.name, type(current) if current is not None else object)
    return _replace(config, spec.name, _coerce(value, hint, full_key), full_key)


def _key_so_far(full_key: str, path: list[str]) -> str:
    """The part of `full_key` up to and including `path[0]` (for an unknown key's message)."""
    parts = full_key.split(".")
    return ".".join(parts[: len(parts) - len(path) + 1])


def _merge(config, values: Mapping, prefix: str):
    for key, value in values.items():
        config = _set(config, str(key).split("."), value, f"{prefix}{key}")  # a dotted key in a file works too
    return config


def _coerce(value, hint, key: str):
    """`value` (text from the command line, or a YAML value) as type `hint`, or an `OverrideError` naming `key`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any or hint is object:
        return _yaml_scalar(value) if isinstance(value, str) else value
    if origin is typing.Union or (hasattr(types, "UnionType") and isinstance(hint, types.UnionType)):
        if type(None) in args and (value is None or (isinstance(value, str) and value.lower() in NONE)):
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, option, key)
            except OverrideError as error:
                errors.append(str(error))
        raise OverrideError(f"{key}={value!r} fits none of {_name(hint)}: " + "; ".join(errors))
    if origin is typing.Literal:
        for option in args:
            if value == option or (isinstance(value, str) and str(option) == value):
                return option
        raise OverrideError(f"{key}={value!r}: allowed values are {', '.join(repr(a) for a in args)}")
    if hint is type(None):
        if value is None or (isinstance(value, str) and value.lower() in NONE):
            return None
        raise OverrideError(f"{key}={value!r}: only none is allowed")
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in TRUE | FALSE:
            return value.lower() in TRUE
        raise OverrideError(f"{key}={value!r} is not a bool (true/false)")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise OverrideError(f"{key}={value!r} is not an int")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
        raise OverrideError(f"{key}={value!r} is not a float")
    if hint is str:
        if isinstance(value, str):
            return value
        raise OverrideError(f"{key}={value!r} is not a string")
    if origin in (tuple, list) or hint in (tuple, list):
        items = _sequence(value, key)
        container = origin or hint
        if len(args) == 2 and args[1] is Ellipsis:
            items = [_coerce(item, args[0], f"{key}[{i}]") for i, item in enumerate(items)]
        elif args and container is tuple:
            if len(items) != len(args):
                raise OverrideError(f"{key}={value!r}: {_name(hint)} takes {len(args)} values, got {len(items)}")
            items = [_coerce(item, arg, f"{key}[{i}]") for i, (item, arg) in enumerate(zip(items, args))]
        elif args:
            items = [_coerce(item, args[0], f"{key}[{i}]") for i, item in enumerate(items)]
        return tuple(items) if container is tuple else list(items)
    if origin in (dict, Mapping) or hint in (dict, Mapping) or origin is typing.Mapping:
        loaded = _yaml_scalar(value) if isinstance(value, str) else value
        if not isinstance(loaded, Mapping):
            raise OverrideError(f"{key}={value!r} is not a mapping (write it as {{name: value, ...}})")
        if len(args) == 2:  # dict[str, TreeConfig]: each value to its declared type
            return {name: _coerce(item, args[1], f"{key}.{name}") for name, item in loaded.items()}
        return dict(loaded)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):  # a dataclass inside a dict, from a mapping
        if isinstance(value, hint):
            return value
        if not isinstance(value, Mapping):
            raise OverrideError(f"{key}={value!r}: a {hint.__name__} is given as a mapping of its fields")
        try:
            return _merge(hint(), value, key + ".")
        except TypeError as error:  # no defaults to start from
            raise OverrideError(f"{key}: a {hint.__name__} cannot be built from {value!r}: {error}") from error
    if isinstance(hint, type) and isinstance(value, hint):
        return value
    raise OverrideError(f"{key} is a {_name(hint)}, which cannot be set from text or a config file")


def _sequence(value, key: str) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    if not isinstance(value, str):
        raise OverrideError(f"{key}={value!r} is not a sequence (write it as a,b or (a, b))")
    text = value.strip()
    if text[:1] in "([" and text[-1:] in ")]":
        text = text[1:-1]
    parts = [part.strip().strip("'\"") for part in text.split(",")]
    return [part for part in parts if part] if any(parts) else []


def _yaml_scalar(text: str):
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")

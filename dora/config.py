"""Typed dataclass configs: built from YAML/dicts, overridden by `a.b=value` strings.

Unknown keys, wrong types and out-of-range values raise InputError naming the key.
Range checks live in each dataclass's `validate()` (called recursively by `build`).

A dataclass with a `sections` mapping and a `section_types()` classmethod (PolicyConfig: one
section per registered policy) takes each section as a key of its own, beside its fields:
`policy.dora.x`, not `policy.sections.dora.x`.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

import yaml

from dora.errors import InputError
from dora.io import read_text

T = TypeVar("T")
MAX_FLOAT = 1e12  # a float setting's largest magnitude (seconds, factors: far beyond any real one)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check/convert one value against a type annotation."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(value, a, where)
            except InputError as e:
                errors.append(str(e))
        raise InputError(errors[0] if errors else f"{where}: bad value {value!r}")
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            raise InputError(f"{where}: {value!r} is not one of {', '.join(map(repr, allowed))}")
        return value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise InputError(f"{where}: expected a list, got {value!r}")
        (arg,) = get_args(tp)[:1] or (Any,)
        out = [_coerce(v, arg, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(out) if origin is tuple else out
    if origin is dict:
        if not isinstance(value, dict):
            raise InputError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise InputError(f"{where}: expected a mapping of {_type_name(tp)} fields, got {value!r}")
        return _build(tp, value, where)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise InputError(f"{where}: expected true/false, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise InputError(f"{where}: expected an integer, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise InputError(f"{where}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise InputError(f"{where}: expected a number, got {value!r}")
        if isinstance(value, (int, float)):
            v = float(value)
        elif isinstance(value, str):
            try:
                v = float(value)
            except ValueError:
                raise InputError(f"{where}: expected a number, got {value!r}") from None
        else:
            raise InputError(f"{where}: expected a number, got {value!r}")
        if not math.isfinite(v) or abs(v) > MAX_FLOAT:
            raise InputError(f"{where}: {v} is not allowed; give a finite number of magnitude at most {MAX_FLOAT:g}")
        return v
    if tp is str:
        if isinstance(value, str):
            return value
        raise InputError(f"{where}: expected a string, got {value!r}")
    return value


def sections_of(cls: Any) -> dict[str, type]:
    """The section types of a dataclass with sections (see the module docstring), else {}."""
    get = getattr(cls, "section_types", None)
    return get() if get is not None else {}


def _build(cls: type[T], data: dict, where: str) -> T:
    hints = get_type_hints(cls)
    sections = sections_of(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init} - ({"sections"} if sections else set())
    for k in data:
        if k not in names and k not in sections:
            known = ", ".join(sorted(names | set(sections)))
            raise InputError(f"{where + '.' if where else ''}{k}: unknown key (known keys: {known})")
    defaults = {f.name: f.default_factory for f in dataclasses.fields(cls)
                if f.default_factory is not dataclasses.MISSING}
    defaults.update(sections)
    hints = {**hints, **sections}
    kwargs: dict[str, Any] = {}
    built: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, dict) and k in defaults and dataclasses.is_dataclass(hints[k]):
            v = deep_merge(to_dict(defaults[k]()), v)  # keys not given keep the field's own defaults
        (built if k in sections else kwargs)[k] = _coerce(v, hints[k], f"{where + '.' if where else ''}{k}")
    if sections:
        kwargs["sections"] = built
    return cls(**kwargs)


def deep_merge(base: dict, over: dict) -> dict:
    """A copy of `base` with `over` merged in, nested mappings key by key."""
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def validate_tree(obj: Any, where: str = "") -> None:
    """Call validate() on a dataclass and, depth first, on its dataclass fields."""
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if dataclasses.is_dataclass(v):
            validate_tree(v, f"{where}{f.name}.")
    if sections_of(obj):
        for name, v in obj.sections.items():
            if dataclasses.is_dataclass(v):
                validate_tree(v, f"{where}{name}.")
    check = getattr(obj, "validate", None)
    if check is not None:
        try:
            check()
        except InputError as e:
            raise InputError(f"{where}{e}") from None


def build(cls: type[T], data: dict | None = None) -> T:
    """Build and validate a config dataclass from a (nested) mapping."""
    obj = _build(cls, data or {}, "")
    validate_tree(obj)
    return obj


class _UniqueKeyLoader(yaml.SafeLoader):
    """yaml.SafeLoader that refuses a mapping with the same key twice (plain YAML keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                dup = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: construct_mapping below says so
                dup = False
            if dup:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, where: str) -> Any:
    """YAML text -> data (duplicate keys refused); InputError '<where> line N: ...' otherwise."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"{where}{line}: not valid YAML ({getattr(e, 'problem', None) or e}); fix the file") from None


def load_yaml(path: str | Path, what: str = "config file") -> dict:
    """A YAML file whose top level is a mapping (an empty file: {})."""
    p = Path(path)
    data = parse_yaml(read_text(p, what, "pass an existing UTF-8 YAML file"), f"{what} {p}")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{what} {p}: top level must be a mapping of keys, got {type(data).__name__}; write it as "
                         "KEY: VALUE lines, e.g. steps: 10")
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise InputError(f"{what} {p}: key {bad[0]!r} is not a name; use words such as steps or cluster as keys")
    return data


def parse_override(text: str) -> tuple[list[str], Any]:
    """'a.b=1' -> (['a', 'b'], 1); the value is parsed as YAML (numbers, bools, lists)."""
    if "=" not in text:
        raise InputError(f"--set {text!r}: expected KEY=VALUE, e.g. --set policy.eta=2")
    key, raw = text.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise InputError(f"--set {text!r}: empty key; write KEY=VALUE, e.g. --set policy.eta=2")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def merge(base: dict, path: list[str], value: Any) -> dict:
    """Set base[path[0]][path[1]]... = value, creating mappings as needed."""
    node = base
    for i, p in enumerate(path[:-1]):
        nxt = node.get(p)
        if p in node and not isinstance(nxt, dict):
            raise InputError(f"{'.'.join(path[:i + 1])}: is {nxt!r}, not a section, so {'.'.join(path)} cannot be "
                             "set; make it a mapping of keys")
        if p not in node:
            nxt = node[p] = {}
        node = nxt
    node[path[-1]] = value
    return base


def apply_cli(data: dict, flags: dict[tuple[str, ...], Any], overrides: list[str]) -> dict:
    """Set the flags that were given (path -> value, None = not given), then `--set KEY=VALUE`s."""
    for path, v in flags.items():
        if v is not None:
            merge(data, list(path), v)
    for text in overrides:
        path, value = parse_override(text)
        merge(data, path, value)
    return data


def to_dict(obj: Any) -> Any:
    """Dataclass tree -> plain dict (for --json config and YAML dumps)."""
    if dataclasses.is_dataclass(obj):
        out = {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        if sections_of(obj):
            out.update(out.pop("sections"))  # sections sit beside the fields
        return out
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj

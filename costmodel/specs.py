"""Safe YAML loading and typed field access for the spec files (hardware, models, runtimes).

Every loader goes through :func:`load_yaml` (``yaml.SafeLoader`` only: a ``!!python/...`` tag
is refused, never executed) and :class:`Fields`, which names file and field in every error.
"""

from __future__ import annotations

import functools
import os
from importlib import resources
from pathlib import Path

import yaml

from .errors import InputError, suggest


def load_yaml(path) -> object:
    """Parse a YAML file with the safe loader; malformed or hostile YAML raises InputError."""
    p = Path(path)
    if not p.is_file():
        raise InputError("file not found", source=str(path))
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read file: {exc}", source=str(path)) from None
    try:
        return yaml.safe_load(text)
    except yaml.constructor.ConstructorError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}" if mark else ""
        raise InputError(f"unsupported YAML tag{where}: {exc.problem} (only plain YAML is read; "
                         "python/object tags are refused)", source=str(path)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"malformed YAML: {where}{problem}", source=str(path)) from None


def zoo_dir(kind: str) -> Path:
    """Folder of a bundled zoo: 'hardware_specs', 'model_specs' or 'runtimes'.

    Installed: package data ``costmodel/<kind>``; from a source checkout: ``<repo>/<kind>``.
    """
    try:
        d = Path(str(resources.files("costmodel") / kind))
        if d.is_dir() and any(d.glob("*.yaml")):
            return d
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parent.parent / kind


def zoo_ids(kind: str) -> list[str]:
    return sorted(p.stem for p in zoo_dir(kind).glob("*.yaml"))


def resolve(kind: str, id_or_path, field: str) -> Path:
    """Zoo id (case-insensitive) or a path to a file -> Path; unknown ids list close matches."""
    s = str(id_or_path).strip()
    if not s:
        raise InputError("empty value", field=field, allowed=", ".join(zoo_ids(kind)))
    p = Path(s)
    looks_like_path = os.sep in s or s.endswith((".yaml", ".yml", ".json"))
    if looks_like_path:
        if not p.is_file():
            raise InputError("file not found", source=s, field=field)
        return p
    cand = zoo_dir(kind) / f"{s.lower()}.yaml"
    if cand.is_file():
        return cand
    ids = zoo_ids(kind)
    raise InputError(f"unknown id '{s}'{suggest(s.lower(), ids)}", field=field,
                     allowed=", ".join(ids) + ", or a path to a YAML file")


class Fields:
    """Typed access into a nested mapping read from ``source``: errors name file and dotted field."""

    def __init__(self, data, source: str, prefix: str = ""):
        if not isinstance(data, dict):
            raise InputError(f"expected a mapping, got {type(data).__name__}", source=source,
                             field=prefix or None)
        self.data, self.source, self.prefix = data, source, prefix

    def _name(self, key):
        return f"{self.prefix}.{key}" if self.prefix else key

    def _get(self, key, required=True):
        if key not in self.data:
            if required:
                raise InputError("missing required field", source=self.source, field=self._name(key))
            return None
        return self.data[key]

    def sub(self, key, required=True) -> "Fields | None":
        v = self._get(key, required)
        if v is None and not required:
            return None
        return Fields(v, self.source, self._name(key))

    def num(self, key, required=True, default=None, min_value=None, max_value=None,
            allow_null=False, integer=False):
        v = self._get(key, required)
        if v is None:
            if key in self.data and not allow_null:
                raise InputError("must be a number, got null", source=self.source, field=self._name(key))
            return default
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            hint = " (write floats as 3.12e+14: YAML reads 312e12 as a string)" if isinstance(v, str) else ""
            raise InputError(f"must be a number, got {type(v).__name__} {v!r}{hint}", source=self.source,
                             field=self._name(key))
        if integer and int(v) != v:
            raise InputError(f"must be an integer, got {v!r}", source=self.source, field=self._name(key))
        if min_value is not None and v < min_value:
            raise InputError(f"must be >= {min_value}, got {v!r}", source=self.source, field=self._name(key))
        if max_value is not None and v > max_value:
            raise InputError(f"must be <= {max_value}, got {v!r}", source=self.source, field=self._name(key))
        return int(v) if integer else float(v)

    def text(self, key, required=True, default=None, choices=None):
        v = self._get(key, required)
        if v is None:
            return default
        if not isinstance(v, str):
            raise InputError(f"must be text, got {type(v).__name__} {v!r}", source=self.source,
                             field=self._name(key))
        if choices is not None and v not in choices:
            raise InputError(f"unknown value {v!r}", source=self.source, field=self._name(key),
                             allowed=", ".join(choices))
        return v

    def flag(self, key, required=True, default=False):
        v = self._get(key, required)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise InputError(f"must be true or false, got {v!r}", source=self.source, field=self._name(key))
        return v

    def items(self, key, required=True) -> list:
        v = self._get(key, required)
        if v is None:
            return []
        if not isinstance(v, list):
            raise InputError(f"must be a list, got {type(v).__name__}", source=self.source,
                             field=self._name(key))
        return v


@functools.lru_cache(maxsize=None)
def cached_path(path: str, mtime: float):  # pragma: no cover - trivial
    return load_yaml(path)

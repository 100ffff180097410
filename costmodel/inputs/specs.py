"""Safe YAML loading and typed field access for the spec files (hardware, models, runtimes).

Every loader goes through :func:`load_yaml` (``yaml.SafeLoader`` only: a ``!!python/...`` tag
is refused, never executed) and :class:`Fields`, which names file and field in every error.
"""

from __future__ import annotations

import functools
import math
import os
from importlib import resources
from pathlib import Path

import yaml

from costmodel.errors import InputError, suggest


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that also refuses duplicate keys, and turns a scalar the safe constructors
    choke on (``2024-13-45``, ``0x_``, ``!!int abc``) into a marked error instead of a raw exception."""

    def construct_object(self, node, deep=False):
        try:
            return super().construct_object(node, deep=deep)
        except (yaml.YAMLError, RecursionError):
            raise
        except Exception as exc:  # noqa: BLE001 - the safe constructors' ValueError/IndexError/... on odd scalars
            value = node.value if isinstance(node, yaml.ScalarNode) else node.tag
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read value {value!r} ({node.tag.rsplit(':', 1)[-1]}): {exc}",
                node.start_mark) from None

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise _DuplicateKey(None, None, f"key {key_node.value!r} appears twice (first at line "
                                        f"{seen[key].line + 1}); give each field once", key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


class _DuplicateKey(yaml.constructor.ConstructorError):
    pass


MAX_YAML_BYTES = 16 << 20


def parse_yaml(text: str, source: str = "YAML") -> object:
    """Parse YAML text with the safe loader; malformed or hostile YAML raises InputError naming
    ``source`` and the line. Tags that would build Python objects (``!!python/...``) are refused."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except _DuplicateKey as exc:
        raise InputError(f"malformed YAML: {_where(exc)}{exc.problem}", source=source) from None
    except yaml.constructor.ConstructorError as exc:
        problem = str(exc.problem or "")
        if "could not determine a constructor" in problem:
            tag = problem.split("tag", 1)[-1].strip(" '").replace("tag:yaml.org,2002:", "!!")
            raise InputError(f"{_where(exc)}unsupported YAML tag {tag}: only plain YAML (mappings, lists, "
                             "numbers, text) is read; tags that would build Python objects are refused, never run",
                             source=source) from None
        raise InputError(f"malformed YAML: {_where(exc)}{problem}", source=source) from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(f"malformed YAML: {_where(exc)}{problem}", source=source) from None
    except RecursionError:
        raise InputError("malformed YAML: nested too deeply", source=source) from None


def _where(exc) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""


def load_yaml(path) -> object:
    """Parse a YAML file with the safe loader; a missing, unreadable, malformed or hostile file raises
    InputError naming the file (and the line, where the parser knows it)."""
    p = Path(path)
    if not p.exists():
        raise InputError("file not found", source=str(path))
    if not p.is_file():
        raise InputError("not a file", source=str(path), allowed="a YAML file")
    try:
        if p.stat().st_size > MAX_YAML_BYTES:
            raise InputError(f"file too large ({p.stat().st_size} bytes)", source=str(path),
                             allowed=f"at most {MAX_YAML_BYTES} bytes")
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start}): is this a YAML file?", source=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror or exc}", source=str(path)) from None
    return parse_yaml(text, str(path))


def read_csv(path) -> list:
    """Rows of a CSV file with a header: ``[(line_number, {column: cell}), ...]``.

    Cells stay text (empty = default); a row with more cells than the header, a missing header, a
    duplicate column or undecodable bytes raise InputError naming the file and line. Give each row
    to ``parse_record(row, source=f"{path}, line {n}")`` so that its errors name the line too.
    """
    import csv

    p = Path(path)
    if not p.exists():
        raise InputError("file not found", source=str(path))
    if not p.is_file():
        raise InputError("not a file", source=str(path), allowed="a CSV file")
    rows = []
    try:
        with p.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh, strict=True)
            header = None
            for cells in reader:
                line = reader.line_num
                if header is None:
                    if not any(c.strip() for c in cells):
                        continue
                    header = [c.strip() for c in cells]
                    if any(not h for h in header):
                        raise InputError(f"line {line}: empty column name in the header", source=str(path))
                    dup = sorted({h for h in header if header.count(h) > 1})
                    if dup:
                        raise InputError(f"line {line}: column {dup[0]!r} appears twice", source=str(path))
                    continue
                if not any(c.strip() for c in cells):
                    continue
                if len(cells) > len(header):
                    raise InputError(f"line {line}: {len(cells)} cells but the header has {len(header)} columns",
                                     source=str(path))
                rows.append((line, {h: (cells[i] if i < len(cells) else "") for i, h in enumerate(header)}))
    except csv.Error as exc:
        raise InputError(f"malformed CSV at line {reader.line_num}: {exc}", source=str(path)) from None
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte {exc.start}): is this a CSV file?", source=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror or exc}", source=str(path)) from None
    if header is None:
        raise InputError("empty file: expected a header row and records", source=str(path))
    return rows


@functools.lru_cache(maxsize=None)
def zoo_dir(kind: str) -> Path:
    """Folder of a bundled zoo: 'hardware_specs', 'model_specs' or 'runtimes'.

    Installed: package data ``costmodel/<kind>``; from a source checkout: ``<repo>/<kind>``. Looked
    up once per process (the package's location does not change while it runs).
    """
    try:
        d = Path(str(resources.files("costmodel") / kind))
        if d.is_dir() and any(d.glob("*.yaml")):
            return d
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parents[2] / kind


def zoo_ids(kind: str) -> list[str]:
    return sorted(p.stem for p in zoo_dir(kind).glob("*.yaml"))


#: (zoo, id) -> its file, once found (the bundled zoo does not change while the process runs)
_ZOO_FILES: dict = {}


def resolve(kind: str, id_or_path, field: str) -> Path:
    """Zoo id (case-insensitive) or a path to a file -> Path; unknown ids list close matches."""
    def allowed():
        return ", ".join(zoo_ids(kind)) + ", or a path to a YAML file"

    if not isinstance(id_or_path, (str, Path)):
        raise InputError(f"must be a zoo id or a path, got {type(id_or_path).__name__} {_short(id_or_path)}",
                         field=field, allowed=allowed())
    s = str(id_or_path).strip()
    if not s:
        raise InputError("empty value", field=field, allowed=allowed())
    if "\0" in s:
        raise InputError(f"not a valid id or path: {_short(s)}", field=field, allowed=allowed())
    p = Path(s)
    if os.sep in s or "/" in s or s.endswith((".yaml", ".yml", ".json")):
        if _path_test(p.is_file):
            return p
        stem = p.stem.lower()
        hint = (f" (the bundled '{stem}' is written without a path: {field}={stem})"
                if stem in zoo_ids(kind) else "")
        raise InputError(("not a file" if _path_test(p.exists) else "file not found") + hint, source=s, field=field)
    hit = _ZOO_FILES.get((kind, s.lower()))
    if hit is not None:
        return hit
    cand = zoo_dir(kind) / f"{s.lower()}.yaml"
    if _path_test(cand.is_file):
        _ZOO_FILES[(kind, s.lower())] = cand
        return cand
    ids = zoo_ids(kind)
    raise InputError(f"unknown id {_short(s)}{suggest(s.lower(), ids)}", field=field, allowed=allowed())


def _path_test(test) -> bool:
    """``Path.is_file`` / ``Path.exists``, False where the OS refuses the name itself (e.g. a name
    too long: ENAMETOOLONG, which pathlib raises instead of answering False)."""
    try:
        return test()
    except OSError:
        return False


MAX_SPEC_INT = 2 ** 53


class Fields:
    """Typed access into a nested mapping read from ``source``: errors name file and dotted field."""

    def __init__(self, data, source: str, prefix: str = ""):
        if not isinstance(data, dict):
            what = "nothing (the file is empty)" if data is None and not prefix else _kind(data)
            raise InputError(f"expected a mapping of field: value, got {what}", source=source,
                             field=prefix or None)
        self.data, self.source, self.prefix = data, source, prefix

    def check_keys(self, allowed) -> None:
        """Refuse a key not in ``allowed`` (keys of any type), suggesting the closest allowed one."""
        allowed = tuple(allowed)
        unknown = sorted({str(k) for k in self.data} - set(allowed))
        if unknown:
            raise InputError(f"unknown field{suggest(unknown[0], allowed)}", source=self.source,
                             field=self._name(unknown[0]), allowed=", ".join(allowed))

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
            raise InputError(f"must be a number, got {_kind(v)}{hint}", source=self.source,
                             field=self._name(key))
        try:
            finite = math.isfinite(v)
        except OverflowError:           # an integer too large for a float
            finite = False
        if not finite:
            raise InputError(f"must be a finite number, got {_short(v)}", source=self.source, field=self._name(key))
        if integer and int(v) != v:
            raise InputError(f"must be an integer, got {v!r}", source=self.source, field=self._name(key))
        if integer and abs(v) > MAX_SPEC_INT:   # beyond this, products of dimensions overflow a float
            raise InputError(f"must be <= {MAX_SPEC_INT}, got {_short(v)}", source=self.source, field=self._name(key))
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
            raise InputError(f"must be text, got {_kind(v)}", source=self.source, field=self._name(key))
        if choices is not None and v not in choices:
            raise InputError(f"unknown value {v!r}{suggest(v, choices)}", source=self.source,
                             field=self._name(key), allowed=", ".join(choices))
        return v

    def flag(self, key, required=True, default=False):
        v = self._get(key, required)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise InputError(f"must be true or false, got {_kind(v)}", source=self.source, field=self._name(key))
        return v

    def items(self, key, required=True) -> list:
        v = self._get(key, required)
        if v is None:
            return []
        if not isinstance(v, list):
            raise InputError(f"must be a list, got {_kind(v)}", source=self.source, field=self._name(key))
        return v


def _short(v, limit: int = 60) -> str:
    r = repr(v)
    return r if len(r) <= limit else r[:limit - 3] + "..."


def _kind(v) -> str:
    """'text 'abc'', 'list [1, 2]': a value as an error message shows it."""
    names = {str: "text", list: "a list", dict: "a mapping", bool: "a boolean", type(None): "null"}
    return f"{names.get(type(v), type(v).__name__)} {_short(v)}" if v is not None else "null"


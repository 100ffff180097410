"""Safe YAML loading and typed field access for the spec files (hardware, models, runtimes).

Every loader goes through :func:`load_yaml` (``yaml.SafeLoader`` only: a ``!!python/...`` tag
is refused, never executed) and :class:`Fields`, which names file and field in every error.
"""

from __future__ import annotations

import functools
import math
import os
import re
from importlib import resources
from pathlib import Path

import yaml

from costmodel.errors import InputError, shown, shown_text, suggest


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
                None, None, f"cannot read value {_short(value)} ({node.tag.rsplit(':', 1)[-1]}): {exc}",
                node.start_mark) from None

    def construct_document(self, node):
        _check_graph(node)
        return super().construct_document(node)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise _DuplicateKey(None, None, f"key {_short(key_node.value)} appears twice (first at line "
                                        f"{seen[key].line + 1}); give each field once", key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


class _DuplicateKey(yaml.constructor.ConstructorError):
    pass


class _TooLarge(yaml.constructor.ConstructorError):
    pass


# YAML 1.1 reads 1:30 as 90 (base 60) and 010 as 8 (octal); here both stay text, so that the field
# that expects a number refuses them instead of using a number nobody wrote.
_Loader.yaml_implicit_resolvers = {k: [(tag, rx) for tag, rx in v if tag not in (
    "tag:yaml.org,2002:int", "tag:yaml.org,2002:float")] for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"""^(?:[-+]?0b[0-1_]+
    |[-+]?(?:0|[1-9][0-9_]*)
    |[-+]?0x[0-9a-fA-F_]+)$""", re.X), list("-+0123456789"))
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
    |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.X), list("-+0123456789."))

#: largest spec file read (the bundled ones are under 32 KiB; PyYAML reads about 150 KB/s)
MAX_YAML_BYTES = 1 << 19
#: most nodes a YAML document may have once its aliases are expanded (a 342-byte "billion laughs"
#: document expands to 10^9): counted on the parsed graph before any value is built
MAX_YAML_NODES = 200_000
#: deepest nesting of mappings and lists
MAX_YAML_DEPTH = 64


def _check_graph(root) -> None:
    """Refuse a document whose alias-expanded size exceeds MAX_YAML_NODES, that nests deeper than
    MAX_YAML_DEPTH or whose alias refers to a node containing it. Linear in the distinct nodes:
    each node's expanded size is computed once."""
    size: dict = {}
    active: set = set()
    stack = [(root, 0, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            n = 1
            if isinstance(node, yaml.SequenceNode):
                n += sum(size[id(c)] for c in node.value)
            elif isinstance(node, yaml.MappingNode):
                n += sum(size[id(k)] + size[id(v)] for k, v in node.value)
            size[key] = n
            if n > MAX_YAML_NODES:
                raise _TooLarge(None, None, f"more than {MAX_YAML_NODES:,} values once aliases are expanded "
                                "(aliases that multiply, such as a 'billion laughs' document, are refused)",
                                node.start_mark)
            continue
        if key in size:
            continue
        if key in active:
            raise _TooLarge(None, None, "an alias refers to a node that contains it", node.start_mark)
        if depth > MAX_YAML_DEPTH:
            raise _TooLarge(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", node.start_mark)
        if isinstance(node, yaml.ScalarNode):
            size[key] = 1
            continue
        active.add(key)
        stack.append((node, depth, True))
        children = node.value if isinstance(node, yaml.SequenceNode) else [c for kv in node.value for c in kv]
        for c in children:
            if id(c) in active:
                raise _TooLarge(None, None, "an alias refers to a node that contains it", c.start_mark)
            if id(c) not in size:
                stack.append((c, depth + 1, False))


def parse_yaml(text: str, source: str = "YAML") -> object:
    """Parse YAML text with the safe loader; malformed or hostile YAML raises InputError naming
    ``source`` and the line. Tags that would build Python objects (``!!python/...``) are refused."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except (_DuplicateKey, _TooLarge) as exc:
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


#: largest CSV read (measurement files; the bundled one is under 64 KiB)
MAX_CSV_BYTES = 64 << 20


def input_path(path, what: str) -> Path:
    """``path`` as a Path after checking it names an existing regular file: a missing file, a
    directory, a name component over 255 bytes or a name the OS refuses is an InputError naming
    the path (cut to 200 characters)."""
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise InputError(f"must be a file path, got {type(path).__name__}", allowed=what)
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    shown_path = shown_text(text, 200)
    if "\0" in text or any(len(part.encode("utf-8", "surrogateescape")) > 255 for part in text.split(os.sep)):
        raise InputError("not a valid file name (a path component is longer than 255 bytes, or contains NUL)",
                         source=shown_path, allowed=what)
    p = Path(text)
    if not _path_test(p.exists):
        raise InputError("file not found", source=shown_path)
    if not _path_test(p.is_file):
        raise InputError("not a file", source=shown_path, allowed=what)
    return p


def load_yaml(path) -> object:
    """Parse a YAML file with the safe loader; a missing, unreadable, malformed or hostile file raises
    InputError naming the file (and the line, where the parser knows it)."""
    p = input_path(path, "a YAML file")
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
    from collections import Counter

    p = input_path(path, "a CSV file")
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror or type(exc).__name__}", source=str(path)) from None
    if size > MAX_CSV_BYTES:
        raise InputError(f"file too large ({size} bytes)", source=str(path), allowed=f"at most {MAX_CSV_BYTES} bytes")
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
                    dup = sorted(h for h, n in Counter(header).items() if n > 1)
                    if dup:
                        raise InputError(f"line {line}: column {_short(dup[0])} appears twice", source=str(path))
                    continue
                if not any(c.strip() for c in cells):
                    continue
                if len(cells) > len(header):
                    raise InputError(f"line {line}, column {len(header) + 1}: {len(cells)} cells but the header has "
                                     f"{len(header)} columns", source=str(path))
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

    if type(id_or_path) is str:              # a zoo id found before: no path parsing (a sweep's hot path)
        hit = _ZOO_FILES.get((kind, id_or_path))
        if hit is not None:
            return hit
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
        if any(len(part.encode("utf-8", "surrogateescape")) > 255 for part in s.split(os.sep)):
            raise InputError("not a valid file name: a path component is longer than 255 bytes",
                             source=shown_text(s, 200), field=field)
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
        if type(id_or_path) is str:
            _ZOO_FILES[(kind, id_or_path)] = cand      # the text as given, for the lookup above
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
            raise InputError(f"must be an integer, got {_short(v)}", source=self.source, field=self._name(key))
        if integer and abs(v) > MAX_SPEC_INT:   # beyond this, products of dimensions overflow a float
            raise InputError(f"must be <= {MAX_SPEC_INT}, got {_short(v)}", source=self.source, field=self._name(key))
        if min_value is not None and v < min_value:
            raise InputError(f"must be >= {min_value}, got {_short(v)}", source=self.source, field=self._name(key))
        if max_value is not None and v > max_value:
            raise InputError(f"must be <= {max_value}, got {_short(v)}", source=self.source, field=self._name(key))
        return int(v) if integer else float(v)

    def text(self, key, required=True, default=None, choices=None):
        v = self._get(key, required)
        if v is None:
            return default
        if not isinstance(v, str):
            raise InputError(f"must be text, got {_kind(v)}", source=self.source, field=self._name(key))
        if choices is not None and v not in choices:
            raise InputError(f"unknown value {_short(v)}{suggest(v, choices)}", source=self.source,
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
    return shown(v, limit)


def _kind(v) -> str:
    """'text 'abc'', 'list [1, 2]': a value as an error message shows it."""
    names = {str: "text", list: "a list", dict: "a mapping", bool: "a boolean", type(None): "null"}
    return f"{names.get(type(v), type(v).__name__)} {_short(v)}" if v is not None else "null"


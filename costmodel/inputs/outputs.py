"""Every file the project writes goes through here: checked before the work, written atomically.

* :func:`check_output_path` — before any computation: the extension is one the writer knows, the
  folder exists and is writable, no path component is longer than the file system allows. An
  InputError names the option (``--output``, ``output``, …) otherwise.
* :func:`atomic_path` — a context manager yielding a temporary path in the target's folder
  (``.NAME.XXXX.tmp``); when the block finishes the temporary file replaces the target with
  ``os.replace`` (atomic on POSIX and Windows within one file system). On any exception, Ctrl-C
  (KeyboardInterrupt) or a SIGTERM turned into SystemExit by the CLI, the temporary file is
  removed and the previous target is left untouched: a reader sees the old file or the new one,
  never a part.
* :func:`atomic_text` / :func:`atomic_open` — the same for text written in one go or streamed.
* :func:`staged_dir` — a directory (Dask Parquet parts) written to ``.NAME.staging-XXXX`` next to
  the target and swapped in when complete (the old directory is renamed aside, the staging
  directory renamed onto the target, then the old one deleted).
* :func:`spreadsheet_safe` — text cells that a spreadsheet would run as a formula (starting with
  ``=``, ``+``, ``-``, ``@``, tab or carriage return) get a leading apostrophe (the OWASP "CSV
  injection" rule); numbers are never touched, so ``-1.5`` stays a number.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from costmodel.errors import InputError

#: longest file-name component most file systems accept (ext4, APFS, NTFS: 255 bytes)
MAX_NAME_BYTES = 255


def check_output_path(path, extensions, field: str = "--output", directory_ok: bool = False) -> str:
    """``path`` as text after checking it can be written: a known extension (``extensions``, lower
    case with the dot; None = any), a name within :data:`MAX_NAME_BYTES`, an existing writable
    folder, and not an existing directory (unless ``directory_ok``)."""
    if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
        raise InputError(f"must be a file path, got {type(path).__name__}", field=field)
    p = os.fspath(path)
    if isinstance(p, bytes):
        raise InputError("must be a file path as text, got bytes", field=field)
    shown = short(p)
    if not p.strip() or "\0" in p:
        raise InputError(f"not a valid path: {shown}", field=field)
    for part in p.replace("\\", "/").split("/"):
        if len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
            raise InputError(f"a path component is longer than {MAX_NAME_BYTES} bytes: {shown}", field=field,
                             allowed=f"names of at most {MAX_NAME_BYTES} bytes")
    if extensions is not None and not p.lower().endswith(tuple(extensions)):
        raise InputError(f"unknown output type: {shown}", field=field,
                         allowed="a path ending in " + ", ".join(extensions))
    if "://" in p:                      # a remote (fsspec) URL: checked by its writer
        return p
    folder = os.path.dirname(os.path.abspath(p))
    if not os.path.isdir(folder):
        raise InputError(f"folder does not exist: {short(folder)}", field=field)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"folder is not writable: {short(folder)}", field=field)
    if os.path.isdir(p) and not directory_ok:
        raise InputError(f"is a directory: {shown}", field=field, allowed="a file path")
    if os.path.exists(p) and not os.path.isdir(p) and not os.access(p, os.W_OK):
        # os.replace would still succeed in a writable folder, but a read-only file is a statement
        raise InputError(f"file is read-only: {shown}", field=field)
    return p


def short(text, limit: int = 80) -> str:
    """A value as an error message shows it: at most ``limit`` characters (cut before any repr,
    so a huge value is never turned into text in full)."""
    if isinstance(text, str):
        s = text if len(text) <= limit else text[:limit - 3] + "..."
        return repr(s)
    return f"<{type(text).__name__}>"


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path next to ``path``; replace ``path`` with it when the block succeeds."""
    p = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(p))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(p)[:100]}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        yield tmp
        _keep_mode(p, tmp)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _keep_mode(target: str, tmp: str) -> None:
    """mkstemp creates 0600; give the new file the old file's mode, or the umask default."""
    try:
        mode = os.stat(target).st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    with contextlib.suppress(OSError):
        os.chmod(tmp, mode)


@contextlib.contextmanager
def atomic_open(path, mode: str = "w", encoding: str | None = "utf-8", newline: str | None = None):
    """``open()`` on a temporary file that replaces ``path`` when the block succeeds."""
    with atomic_path(path) as tmp:
        kw = {} if "b" in mode else {"encoding": encoding, "newline": newline}
        with open(tmp, mode, **kw) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())


def atomic_text(path, text: str, encoding: str = "utf-8") -> str:
    """Write ``text`` to ``path`` atomically; returns ``str(path)``."""
    with atomic_open(path, "w", encoding=encoding) as fh:
        fh.write(text)
    return str(path)


@contextlib.contextmanager
def staged_dir(path):
    """Yield an empty staging directory next to ``path``; when the block succeeds it becomes
    ``path`` (an earlier directory or file there is removed only then). On failure the staging
    directory is deleted and ``path`` is as it was."""
    p = os.path.abspath(os.fspath(path))
    folder, name = os.path.dirname(p), os.path.basename(p)
    stage = tempfile.mkdtemp(prefix=f".{name[:100]}.staging-", dir=folder)
    try:
        yield stage
        old = None
        if os.path.lexists(p):
            old = tempfile.mkdtemp(prefix=f".{name[:100]}.old-", dir=folder)
            os.rmdir(old)
            os.replace(p, old)
        os.replace(stage, p)
        if old is not None:
            if os.path.isdir(old) and not os.path.islink(old):
                shutil.rmtree(old, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.remove(old)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(df):
    """``df`` with every text cell that starts with a formula character prefixed by ``'``.
    Only text columns (object, string or categorical) are looked at; a column without such a cell
    is not copied."""
    import pandas as pd

    out = df
    for col in df.columns:
        s = df[col]
        if isinstance(s.dtype, pd.CategoricalDtype):     # text as categories: each category looked at once
            hits = {v: "'" + v for v in s.cat.categories if isinstance(v, str) and v.startswith(FORMULA_START)}
            if not hits:
                continue
            if not set(hits.values()) & set(s.cat.categories):
                if out is df:
                    out = df.copy(deep=False)
                out[col] = s.cat.rename_categories(hits)
                continue
            s = s.astype(object)        # a prefixed text is a category already: cell by cell below
        if s.dtype != object and not pd.api.types.is_string_dtype(s.dtype):
            continue                # numbers (negative ones included) and booleans are never touched
        try:                        # few distinct values in practice: look at each once
            seen = pd.unique(s.to_numpy())
        except TypeError:           # unhashable cells (lists)
            seen = s.to_numpy()
        hits = {v for v in seen if isinstance(v, str) and v.startswith(FORMULA_START)}
        if hits:
            bad = s.isin(hits)
            if out is df:
                out = df.copy(deep=False)
            fixed = s.astype(object).copy()
            fixed[bad.to_numpy()] = ["'" + v for v in s[bad]]
            out[col] = fixed
    renamed = {c: "'" + c for c in out.columns if isinstance(c, str) and c.startswith(FORMULA_START)}
    return out.rename(columns=renamed) if renamed else out


def safe_cell(v):
    """One value for a CSV cell: text starting with a formula character gets a leading ``'``."""
    return "'" + v if isinstance(v, str) and v.startswith(FORMULA_START) else v


def kept_sections(path, markers) -> list:
    """The sections of an existing text file between each (start, end) marker pair, as lines to append
    when the file is rewritten: a report rewritten by one command keeps what another script wrote
    into it. [] when the file or a marker is missing."""
    try:
        old = Path(path).read_text(encoding="utf-8")
    except OSError:
        return []
    out = []
    for start, end in markers:
        i, j = old.find(start), old.find(end)
        if 0 <= i < j:
            out += ["", old[i:j + len(end)], ""]
    return out

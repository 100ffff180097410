"""A sweep's chunks on several processes that write into one shared set of output columns.

Threads do not speed a sweep up: between numpy calls on cache-sized chunks the Python code holds
the GIL, so two threads take turns. Processes run truly in parallel. On platforms with ``fork``
the parent allocates every output column in anonymous shared memory (``mmap``), forks
``workers − 1`` children, and each process evaluates a contiguous share of the chunks and writes
its rows in place: nothing is pickled or copied back. The parent evaluates the first chunk before
forking to learn the columns:

* numeric columns (float64, int64, bool) live in shared memory;
* a text column that holds one value per chunk (model, hardware, strategy, ...) is filled by the
  parent from that value;
* a text column that names a bound (``bound``, ``prefill_bound``) arrives as int8 codes into
  :data:`costmodel.engine.roofline.BOUNDS` (``evaluate_arrays(bound_codes=True)``) and stays coded: the
  caller turns each into text once.

Anything else (another kind of text column, a column whose kind changes between chunks) makes
:func:`evaluate_forked` return None, and the caller evaluates the grid in one process. So does a
process with other threads running (forking it could deadlock a child on a lock held by one of
them) or a platform other than Linux. An error in a child is raised in the parent: an input
error as the same :class:`costmodel.errors.InputError`, anything else as a RuntimeError.
"""

from __future__ import annotations

import mmap
import os
import pickle
import sys
import threading

import numpy as np

from costmodel.errors import InputError
#: a child that finds a column it cannot write tells the parent to evaluate in one process
_FALLBACK = "fallback"


def can_fork() -> bool:
    """Linux (macOS's system libraries are not fork-safe once initialised; Windows has no fork) and
    this process runs no other thread."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and threading.active_count() == 1


def _spec(key, value, code_keys=()):
    """('num', dtype) | ('const', text) | ('code', None) | None (not expressible here)."""
    if key in code_keys:
        return ("code", None) if isinstance(value, np.ndarray) and value.dtype == np.int8 else None
    if isinstance(value, (bool, np.bool_)):
        return ("num", np.dtype(bool))
    if isinstance(value, (int, np.integer)):
        return ("num", np.dtype(np.int64))
    if isinstance(value, (float, np.floating)):
        return ("num", np.dtype(float))
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf":
            return ("num", np.dtype(bool) if value.dtype.kind == "b"
                    else np.dtype(np.int64) if value.dtype.kind in "iu" else np.dtype(float))
        return None
    if isinstance(value, str):
        return ("const", value)
    return None


def _shared(shape, dtype) -> np.ndarray:
    """A zeroed array in anonymous shared memory (visible to forked children)."""
    n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    buf = mmap.mmap(-1, max(n, 1))               # MAP_SHARED | MAP_ANONYMOUS
    return np.frombuffer(buf, dtype=dtype, count=int(np.prod(shape, dtype=np.int64))).reshape(shape)


def _write(out: dict, specs: dict, where, res: dict) -> bool:
    """Write one chunk's results; False when a value does not fit its column's spec."""
    for key, (kind, info) in specs.items():
        v = res.get(key)
        if kind == "num":
            s = _spec(key, v, ())
            if s is None or s[0] != "num" or not (s[1] == info or info == np.dtype(float)):
                return False                   # (ints and booleans fit a float column, as in _Columns)
            out[key][where] = v
        elif kind == "const":
            if not isinstance(v, str) or v != info:
                return False
        else:
            if not isinstance(v, np.ndarray) or v.dtype != np.int8:
                return False
            out[key][where] = v
    return True


def evaluate_forked(tasks: list, run, place, shape, skip, workers: int, progress=None, total: int = 0,
                    code_keys=()):
    """Evaluate ``tasks`` (``run(task)`` -> {key: value}; ``place(task)`` -> (grid index, rows)) on
    ``workers`` processes; keys in ``skip`` are not columns; ``code_keys`` arrive as int8 codes and
    are returned as codes. Returns {key: grid-shaped array} in the first chunk's key order, or None
    when the grid must be evaluated in one process (module doc)."""
    where_of = lambda t: place(t)[0]          # noqa: E731
    first = run(tasks[0])
    specs = {}
    for key, v in first.items():
        if key in skip:
            continue
        s = _spec(key, v, code_keys)
        if s is None:
            return None
        specs[key] = s
    out = {k: _shared(shape, np.int8 if kind == "code" else info)
           for k, (kind, info) in specs.items() if kind in ("num", "code")}
    if not _write(out, specs, where_of(tasks[0]), first):
        return None
    rest = tasks[1:]
    shares = [rest[i * len(rest) // workers:(i + 1) * len(rest) // workers] for i in range(workers)]
    children = [_fork_writer(share, run, out, specs, where_of) for share in shares[1:]]
    fallback = False
    try:
        done = place(tasks[0])[1]
        for t in shares[0]:
            if not _write(out, specs, where_of(t), run(t)):
                fallback = True
                break
            if progress is not None:                   # the parent's share, scaled to the whole grid
                done += place(t)[1]
                progress(min(done * workers, total), total)
    except BaseException:
        _stop(children)                                # stop the children's work too
        raise
    finally:
        failure = _collect(children)
    if failure is not None:
        if failure[0] != _FALLBACK:
            _raise(failure)
        fallback = True
    if fallback:
        return None
    if progress is not None:
        progress(total, total)
    return _columns(specs, out, shape)


def _collect(children: list):
    """Wait for the children and read their pipes: the first failure reported, or None."""
    failure = None
    for pid, r in children:
        msg = b""
        while True:
            part = os.read(r, 1 << 16)
            if not part:
                break
            msg += part
        os.close(r)
        os.waitpid(pid, 0)
        if msg and failure is None:
            failure = pickle.loads(msg)
    return failure


def _columns(specs: dict, out: dict, shape) -> dict:
    """The grid's columns in the first chunk's key order: the shared numeric and code arrays, and each
    constant non-numeric value filled into an object array."""
    cols = {}
    for key, (kind, info) in specs.items():
        if kind in ("num", "code"):
            cols[key] = out[key]
        else:
            a = np.empty(shape, dtype=object)
            a.fill(info)
            cols[key] = a
    return cols


def _fork_writer(share: list, run, out: dict, specs: dict, where_of) -> tuple:
    """Fork a child that evaluates ``share`` into the shared columns and exits; it reports through a
    pipe only when it cannot write a result (the fallback) or fails. Returns (pid, read end)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                       # the child: its share, then exit
        os.close(r)
        status = 0
        try:
            for t in share:
                if not _write(out, specs, where_of(t), run(t)):
                    os.write(w, pickle.dumps((_FALLBACK, None)))
                    status = 1
                    break
        except BaseException as exc:                   # noqa: BLE001 - reported to the parent
            status = 1
            try:
                os.write(w, pickle.dumps(_failure(exc)))
            except BaseException:                      # noqa: BLE001
                pass
        finally:
            os.close(w)
            os._exit(status)
    os.close(w)
    return pid, r


def _failure(exc: BaseException) -> tuple:
    """A child's exception as a picklable message: an InputError's args and attributes, else its text."""
    return (("input", exc.args, exc.__dict__) if isinstance(exc, InputError)
            else ("error", f"{type(exc).__name__}: {exc}"))


def _raise(failure: tuple):
    """Raise a child's failure in the parent: its InputError as such, anything else as a RuntimeError."""
    if failure[0] == "input":
        exc = InputError.__new__(InputError)
        exc.args = failure[1]
        exc.__dict__.update(failure[2])
        raise exc
    raise RuntimeError(f"a sweep worker process failed: {failure[1]}")


def _stop(children: list) -> None:
    """Terminate the forked children (SIGTERM), ignoring those already gone."""
    for pid, _r in children:
        try:
            os.kill(pid, 15)
        except OSError:
            pass


def map_forked(run, tasks: list, workers: int):
    """[run(t) for t in tasks] with the tasks dealt round-robin to ``workers`` processes (this one
    and ``workers − 1`` forked children, each returning its results pickled through a pipe): for
    grids of many groups, whose columns are not known before the last group is evaluated. Errors
    reach the caller as in :func:`evaluate_forked`. Needs :func:`can_fork`."""
    children = []
    for k in range(1, workers):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                                       # the child: every workers-th task from k
            os.close(r)
            status = 0
            try:
                msg = ("ok", [run(t) for t in tasks[k::workers]])
            except BaseException as exc:                   # noqa: BLE001 - reported to the parent
                status = 1
                msg = _failure(exc)
            try:
                with os.fdopen(w, "wb") as f:
                    pickle.dump(msg, f, protocol=pickle.HIGHEST_PROTOCOL)
            finally:
                os._exit(status)
        os.close(w)
        children.append((pid, r))
    results = [None] * len(tasks)
    failure = None
    try:
        results[0::workers] = [run(t) for t in tasks[0::workers]]
    except BaseException:
        _stop(children)
        raise
    finally:
        for k, (pid, r) in enumerate(children, start=1):
            with os.fdopen(r, "rb") as f:
                try:
                    msg = pickle.load(f)
                except (EOFError, pickle.UnpicklingError):
                    msg = ("error", "a sweep worker process exited without its results")
            os.waitpid(pid, 0)
            if msg[0] == "ok":
                results[k::workers] = msg[1]
            elif failure is None:
                failure = msg
    if failure is not None:
        _raise(failure)
    return results

"""A sweep's chunks on several processes, gathered into one set of output columns.

Threads do not speed a sweep up: between numpy calls on cache-sized chunks the Python code holds
the GIL, so two threads take turns. Processes run truly in parallel. On platforms with ``fork``
the parent puts the chunks in a work queue (a pipe of task numbers that every process reads from,
so a busier process simply takes fewer) and forks ``workers − 1`` children; each process learns
the columns from the first chunk it evaluates (a child's must equal the parent's, else the grid
goes to one process). The output columns are the parent's own private memory, allocated after
the fork: the kernel backs them with transparent huge pages where it can, as in a single-process
sweep. Each child evaluates the chunks it takes into one of a few slots of a small shared buffer
(:class:`_Ring`, reused chunk after chunk, so only its few pages are ever faulted in; a column
broadcast along a dimension is stored once along it) and tells the parent through a pipe; between
its own chunks the parent copies each ready slot into its columns and hands the slot back.
(Output columns in shared memory would be faulted in 4 KiB page by page wherever shared memory gets
no huge pages, which costs about as much as evaluating the rows: two workers then took longer than
one.) The columns:

* numeric columns (float64, int64, bool);
* a text column that holds one value in every chunk (model, hardware, strategy, ...) is returned
  as that value (a str);
* a text column that names a bound (``bound``, ``prefill_bound``) arrives as int8 codes into
  :data:`costmodel.engine.roofline.BOUNDS` (``evaluate_arrays(bound_codes=True)``) and is returned
  as those codes (an int8 column, copied like a numeric one).

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
import select
import struct
import sys
import threading

import numpy as np

from costmodel.errors import InputError
from costmodel.fast.arrays import compact, empty_aligned


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


#: slots of shared memory per child: a child blocks when the parent has not yet copied out this many
#: of its chunks (the parent copies them between its own chunks, every few milliseconds). Each slot's
#: pages are faulted in by every forked child (a shared mapping's pages are not mapped into a child
#: at fork): ~2,900 faults per slot for a 65,536-row speculative chunk; two slots measured faster
#: than three (1 M rows, two workers, best of 8: 90.5-92.1 ms against 94.3-98.8 ms) and one slower
SLOTS = 2
_MSG = struct.Struct("<iiq")             # (kind, a, b): a child's message to the parent
_READY, _DONE, _FALL, _FAIL, _SPECS = 0, 1, 2, 3, 4
_QUEUE_ITEMS = 1024                      # most entries in the work queue (4 bytes each: one page of pipe)


def _region_shape(shape, where) -> tuple:
    return np.broadcast_to(np.zeros((), np.int8), shape)[where].shape      # grid[where].shape, untouched


def _fits(specs: dict, res: dict) -> bool:
    """Every value of ``res`` fits its column: a number or numeric array of the column's kind (ints
    and booleans fit a float column, as in the single-process columns), the column's constant text,
    or int8 bound codes."""
    for key, (kind, info) in specs.items():
        v = res.get(key)
        if kind == "num":
            s = _spec(key, v, ())
            if s is None or s[0] != "num" or not (s[1] == info or info == np.dtype(float)):
                return False
        elif kind == "const":
            if not isinstance(v, str) or v != info:
                return False
        elif not isinstance(v, np.ndarray) or v.dtype != np.int8:
            return False
    return True


#: bytes per row a ring slot reserves (96 float64 columns; a sweep has 40-50): the slot is reserved
#: before any chunk is evaluated, and a grid whose columns need more is evaluated in one process
RING_ROW_BYTES = 96 * 8
#: a ring slot is a whole number of 4 KiB pages, and each column in it starts on a 64-byte cache line
_PAGE_BYTES = 4096
_LINE_BYTES = 64
#: the ring's shared mapping, kept for the next sweep when at most this large: its pages stay mapped
#: in this process, so the parent does not fault them in again (each child maps them afresh)
KEEP_RING_BYTES = 256 << 20
_KEPT: list = [None]


def _specs_of(res: dict, skip, code_keys):
    """{key: spec} of a chunk's results in order (``skip`` left out), or None when one has none."""
    specs = {}
    for key, v in res.items():
        if key in skip:
            continue
        s = _spec(key, v, code_keys)
        if s is None:
            return None
        specs[key] = s
    return specs


class _Ring:
    """``SLOTS`` slots per child in one anonymous shared mapping (reserved: only the pages written
    are ever backed), each holding one chunk's columns back to back (``rows`` values of each
    column's dtype, 64-byte aligned). Small and reused chunk after chunk, so its pages are faulted
    in once, however many rows the grid has; a mapping of at most KEEP_RING_BYTES is kept for the
    next sweep of this process."""

    def __init__(self, rows: int, children: int):
        self.rows = rows
        self.slot_bytes = -(-rows * RING_ROW_BYTES // _PAGE_BYTES) * _PAGE_BYTES
        need = self.slot_bytes * SLOTS * children
        kept = _KEPT[0]
        if kept is not None and len(kept) >= need:
            self.buf = kept
        else:
            self.buf = mmap.mmap(-1, need)            # MAP_SHARED | MAP_ANONYMOUS
            if need <= KEEP_RING_BYTES:
                _KEPT[0] = self.buf
        self.layout = None

    def lay_out(self, specs: dict) -> bool:
        """Place the columns of ``specs`` in each slot; False when they do not fit a slot."""
        self.layout, off = [], 0
        for key, (kind, info) in specs.items():
            if kind != "const":
                dt = np.dtype(np.int8 if kind == "code" else info)
                self.layout.append((key, dt, off))
                off += -(-self.rows * dt.itemsize // _LINE_BYTES) * _LINE_BYTES
        return off <= self.slot_bytes

    def write(self, child: int, slot: int, rshape, res: dict) -> bytes:
        """Write a chunk's columns into a slot, each in its compact form: a dimension along which the
        value is broadcast (stride 0: the same element, so equal values) is stored once. Returns
        those dimensions, a bit mask per column (little-endian uint64s), for :meth:`read`."""
        base = (child * SLOTS + slot) * self.slot_bytes
        masks = np.zeros(len(self.layout), dtype="<u8")
        for i, (key, dt, off) in enumerate(self.layout):
            small = compact(np.broadcast_to(res[key], rshape))
            m = sum(1 << d for d, n in enumerate(small.shape) if n == 1)
            np.frombuffer(self.buf, dtype=dt, count=small.size, offset=base + off).reshape(small.shape)[...] = small
            masks[i] = m
        return masks.tobytes()

    def read(self, child: int, slot: int, rshape, masks: bytes) -> dict:
        """{key: the slot's compact array of that column}, broadcastable to the chunk's region."""
        base = (child * SLOTS + slot) * self.slot_bytes
        out = {}
        for (key, dt, off), m in zip(self.layout, np.frombuffer(masks, dtype="<u8").tolist()):
            shape = tuple(1 if m >> d & 1 else n for d, n in enumerate(rshape))
            out[key] = np.frombuffer(self.buf, dtype=dt, count=int(np.prod(shape, dtype=np.int64)),
                                     offset=base + off).reshape(shape)
        return out


def evaluate_forked(tasks: list, run, place, shape, skip, workers: int, progress, total: int,
                    code_keys: tuple):
    """Evaluate ``tasks`` (``run(task)`` -> {key: value}; ``place(task)`` -> (grid index, rows)) on
    ``workers`` processes; keys in ``skip`` are not columns; ``code_keys`` arrive as int8 codes and
    are returned as such. Returns {key: grid-shaped array, or the text of a constant text column}
    in the first chunk's key order, or None when the grid must be evaluated in one process (module
    doc). Every process learns the columns from the first chunk it evaluates and the children's
    must equal the parent's."""
    per = -(-len(tasks) // _QUEUE_ITEMS)             # tasks per queue entry
    batches = [tasks[i:i + per] for i in range(0, len(tasks), per)]
    ring = _Ring(max(place(t)[1] for t in tasks), workers - 1)
    qr, qw = os.pipe()
    os.write(qw, np.arange(len(batches), dtype="<i4").tobytes())
    os.close(qw)                                     # an empty queue then reads as end of file
    children = []
    ok = clean = False
    try:
        for c in range(workers - 1):
            children.append(_fork_child(c, qr, batches, per, run, place, shape, ring, skip, code_keys))
        state = _Parent(children, ring, place, shape, tasks, progress, total, skip, code_keys)
        ok = True
        while ok:
            got = os.read(qr, 4)
            if not got:
                break
            for t in batches[int.from_bytes(got, "little", signed=True)]:
                if not state.put_result(place(t)[0], run(t)):
                    ok = False
                    break
                state.advance(place(t)[1])
            if ok:
                state.drain(block=False)
                ok = not state.fallback
        if ok:
            state.drain(block=True)
            ok = not state.fallback and state.specs is not None
            clean = ok
    finally:
        if not clean:                   # an error or a fallback: stop the children's work
            _stop(pid for pid, _r, _f in children)
        os.close(qr)
        for pid, r, f in children:
            os.close(r)
            os.close(f)
            os.waitpid(pid, 0)
    if not ok:
        return None
    if progress is not None:
        progress(total, total)
    return state.columns()


class _Parent:
    """The parent's columns (private, on huge-page boundaries, allocated after the fork: no copy-on-
    write) and its side of the children's messages: each chunk a child reports ready is copied from
    its slot into the columns and the slot handed back; failures are raised here."""

    def __init__(self, children, ring, place, shape, tasks, progress, total, skip, code_keys):
        self.children, self.ring, self.place, self.shape = children, ring, place, shape
        self.tasks, self.progress, self.total = tasks, progress, total
        self.skip, self.code_keys = skip, code_keys
        self.specs = None
        self.bufs = [b""] * len(children)
        self.open = set(range(len(children)))
        self.fallback = False
        self.done = 0
        for _pid, r, _f in children:
            os.set_blocking(r, False)

    def _adopt(self, specs) -> bool:
        """The columns, from the first chunk evaluated here (or a child's); False when they cannot be
        gathered here (the grid goes to one process)."""
        if specs is None or not self.ring.lay_out(specs):
            return False
        self.specs = specs
        self.out = {k: empty_aligned(self.shape, dtype=np.int8 if kind == "code" else info)
                    for k, (kind, info) in specs.items() if kind != "const"}
        return True

    def put_result(self, where, res: dict) -> bool:
        """One of the parent's chunks into its region; False when it does not fit the columns."""
        if self.specs is None and not self._adopt(_specs_of(res, self.skip, self.code_keys)):
            return False
        if not _fits(self.specs, res):
            return False
        self.put(where, res)
        return True

    def put(self, where, values: dict) -> None:
        """One chunk's values (fitting the columns) into its region ``where``."""
        for key, col in self.out.items():
            col[where] = values[key]

    def columns(self) -> dict:
        """The columns in the first chunk's key order (a constant text column as its text)."""
        return {key: self.out[key] if key in self.out else info for key, (_kind, info) in self.specs.items()}

    def advance(self, rows: int) -> None:
        self.done += rows
        if self.progress is not None:
            self.progress(min(self.done, self.total), self.total)

    def drain(self, block: bool) -> None:
        """Handle every message the children have sent; with ``block``, until each has finished."""
        while self.open and not self.fallback:
            if block:
                select.select([self.children[c][1] for c in self.open], [], [])
            got_any = False
            for c in list(self.open):
                try:
                    part = os.read(self.children[c][1], 1 << 16)
                except BlockingIOError:
                    continue
                got_any = True
                if not part:                               # the child exited without a last word
                    self.open.discard(c)
                    _raise(("error", _NO_RESULTS))
                self.bufs[c] += part
                self._handle(c)
            if not block and not got_any:
                return

    def _handle(self, c: int) -> None:
        buf = self.bufs[c]
        while len(buf) >= _MSG.size and not self.fallback:
            kind, a, b = _MSG.unpack_from(buf)
            if kind in (_FAIL, _SPECS):                    # a pickled payload of a bytes follows
                if len(buf) < _MSG.size + a:
                    break
                payload = pickle.loads(buf[_MSG.size:_MSG.size + a])
                buf = buf[_MSG.size + a:]
                if kind == _FAIL:
                    self.open.discard(c)
                    _raise(payload)
                if self.specs is None:                     # the parent has evaluated no chunk yet
                    self.fallback = not self._adopt(payload)
                elif list(payload.items()) != list(self.specs.items()):
                    self.fallback = True                   # the child's columns differ: one process
                continue
            if kind == _READY:                             # slot a holds task b; a mask per column follows
                n = 8 * len(self.ring.layout)
                if len(buf) < _MSG.size + n:
                    break
                masks, buf = buf[_MSG.size:_MSG.size + n], buf[_MSG.size + n:]
                where, rows = self.place(self.tasks[b])
                self.put(where, self.ring.read(c, a, _region_shape(self.shape, where), masks))
                try:
                    os.write(self.children[c][2], a.to_bytes(4, "little", signed=True))
                except BrokenPipeError:                    # the child has finished and exited
                    pass
                self.advance(rows)
                continue
            buf = buf[_MSG.size:]
            if kind == _DONE:
                self.open.discard(c)
            elif kind == _FALL:
                self.open.discard(c)
                self.fallback = True
        self.bufs[c] = buf


def _fork_child(c: int, qr: int, batches: list, per: int, run, place, shape, ring: _Ring, skip,
                code_keys) -> tuple:
    """Fork child ``c``: it takes batches of tasks from the queue ``qr`` until it is empty, evaluates
    each task into one of its free slots of ``ring`` and reports it ready (its columns first, from
    its first chunk); then it reports that it is done (or that a result does not fit, or its
    failure) and exits. Returns (pid, its messages' read end, the write end of its free slots)."""
    r, w = os.pipe()
    fr, fw = os.pipe()
    pid = os.fork()
    if pid != 0:
        os.close(w)
        os.close(fr)
        return pid, r, fw
    os.close(r)                                      # the child
    os.close(fw)
    status = 0
    try:
        free = list(range(SLOTS - 1, -1, -1))
        specs = None
        while True:
            got = os.read(qr, 4)
            if not got:
                break
            b = int.from_bytes(got, "little", signed=True)
            for k, t in enumerate(batches[b]):
                res = run(t)
                if specs is None:
                    specs = _specs_of(res, skip, code_keys)
                    if specs is None or not ring.lay_out(specs):
                        os.write(w, _MSG.pack(_FALL, 0, 0))
                        raise _Quit
                    msg = pickle.dumps(specs)
                    _write_all(w, _MSG.pack(_SPECS, len(msg), 0) + msg)
                if not _fits(specs, res):
                    os.write(w, _MSG.pack(_FALL, 0, 0))
                    raise _Quit
                if not free:
                    free.append(int.from_bytes(_read_exactly(fr, 4), "little", signed=True))
                slot = free.pop()
                masks = ring.write(c, slot, _region_shape(shape, place(t)[0]), res)
                _write_all(w, _MSG.pack(_READY, slot, b * per + k) + masks)
        os.write(w, _MSG.pack(_DONE, 0, 0))
    except _Quit:
        status = 1
    except BaseException as exc:                     # noqa: BLE001 - reported to the parent
        status = 1
        try:
            msg = pickle.dumps(_failure(exc))
            _write_all(w, _MSG.pack(_FAIL, len(msg), 0) + msg)
        except BaseException:                        # noqa: BLE001
            pass
    finally:
        os._exit(status)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


class _Quit(Exception):
    """A child stops: it has told the parent why."""


def _read_exactly(fd: int, n: int) -> bytes:
    out = b""
    while len(out) < n:
        part = os.read(fd, n - len(out))
        if not part:
            raise EOFError("the parent closed the sweep's slot pipe")
        out += part
    return out


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


_NO_RESULTS = "a sweep worker process exited without its results"    # its pipe closed before them


def _stop(pids) -> None:
    """Terminate the forked children (SIGTERM), ignoring those already gone."""
    for pid in pids:
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
        _stop(pid for pid, _r in children)
        raise
    finally:
        for k, (pid, r) in enumerate(children, start=1):
            with os.fdopen(r, "rb") as f:
                try:
                    msg = pickle.load(f)
                except (EOFError, pickle.UnpicklingError):
                    msg = ("error", _NO_RESULTS)
            os.waitpid(pid, 0)
            if msg[0] == "ok":
                results[k::workers] = msg[1]
            elif failure is None:
                failure = msg
    if failure is not None:
        _raise(failure)
    return results

"""``costmodel sweep KEY=VALUE ... AXIS=V1,V2,... AXIS=START:STOP[:STEP] [--output FILE]``.

A word whose value lists several values (``V1,V2``), a range (``START:STOP:STEP``, STOP included;
``START:STOP:*F`` geometric) or, for the list fields ``rank_acceptance`` / ``tree_parents``,
alternatives separated by ``|`` is an axis; every other word is a fixed record field. The rows
are the Cartesian product of the axes (formulas: :mod:`costmodel.analysis.sweep`). A progress bar (tqdm
when installed) is drawn on stderr only when stderr is a terminal.
"""

from __future__ import annotations

import sys
import time


def register(subparsers, common):
    p = subparsers.add_parser(
        "sweep", parents=[common], help="evaluate a grid: costmodel sweep KEY=VALUE ... AXIS=V1,V2 "
        "AXIS=START:STOP:STEP --output FILE.csv|.parquet",
        description="Evaluate the Cartesian grid of the axes (every row equals 'costmodel eval' of it).",
        epilog="A word is an axis when its value lists several values (batch_size=1,8,64), is a range "
               "(prompt_len=16:16000:16, STOP included; batch_size=1:1024:*2 geometric) or, for rank_acceptance "
               "and tree_parents, alternatives separated by | ; every other word is a fixed field. A progress "
               "bar is drawn on stderr only when it is a terminal. See docs/sweep.md.")
    p.add_argument("fields", nargs="+", metavar="KEY=VALUE")
    p.add_argument("--output", "-o", metavar="FILE",
                   help="write the rows to FILE.csv or FILE.parquet (with --engine dask: a .csv is "
                        "streamed, any other path becomes a directory of Parquet parts)")
    p.add_argument("--engine", choices=("numpy", "dask"), default="numpy",
                   help="numpy: in this process (default); dask: chunks on a dask.distributed cluster")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="Dask scheduler address, e.g. tcp://10.0.0.5:8786 (default: a local cluster)")
    p.add_argument("--chunk-rows", type=int, metavar="N", help="rows per evaluation call / Dask task")
    p.add_argument("--workers", type=int, metavar="N",
                   help="processes (forked) evaluating chunks (default: the CPU count, at most 8, but this process "
                        "alone for a grid of several groups over arrays; 1 = this process alone)")
    p.add_argument("--on-invalid", choices=("error", "mark", "drop"), default="error",
                   help="a row evaluate would refuse: error (refuse the grid, default), mark (outputs empty, "
                        "the reason in an invalid_reason column) or drop (left out); the count goes to stderr")
    p.add_argument("--no-progress", action="store_true", help="never draw a progress bar")
    p.set_defaults(func=cmd_sweep)


def split_words(fields: dict) -> tuple[dict, dict]:
    """(fixed fields, axes): a value with several values or a range is an axis."""
    from costmodel.analysis.sweep_grid import LIST_FIELDS, parse_axis
    base, axes = {}, {}
    for k, v in fields.items():
        s = v.strip()
        if k in LIST_FIELDS:
            is_axis = "|" in s
        else:
            is_axis = "," in s or (s.count(":") in (1, 2) and parse_axis(k, s) != [s])
        if is_axis:
            axes[k] = parse_axis(k, s)
        else:
            base[k] = v
    return base, axes


class _Progress:
    """tqdm when installed, else a one-line counter; only on a terminal."""

    def __init__(self, total: int):
        self.total, self.bar, self.last = total, None, 0.0
        try:
            from tqdm import tqdm
            # no monitor thread: a process with other threads does not fork its sweep workers
            tqdm.monitor_interval = 0
            self.bar = tqdm(total=total, unit="row", unit_scale=True, file=sys.stderr, desc="sweep")
        except ImportError:
            pass

    def __call__(self, done: int, total: int):
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
            return
        now = time.monotonic()
        if now - self.last > 0.1 or done >= total:
            self.last = now
            print(f"\rsweep: {done:,}/{total:,} rows ({100.0 * done / max(total, 1):.0f}%)", end="",
                  file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
        else:
            print(file=sys.stderr)


def cmd_sweep(args):
    from costmodel.cli import format as fmt
    from costmodel.cli.main import parse_kv
    from costmodel.analysis.sweep import check_output, grid_size, sweep

    check_output(args.output, args.engine)          # before any row is computed
    base, axes = split_words(parse_kv(args.fields))
    total = grid_size(**axes)
    show = not args.no_progress and sys.stderr.isatty()
    bar = _Progress(total) if show else None
    local = args.engine == "numpy"
    mode = args.on_invalid
    try:
        if args.output and local:          # streamed: one chunk in memory at a time
            from costmodel.analysis.sweep_stream import stream_sweep
            res = stream_sweep(base, axes, args.output, chunk_rows=args.chunk_rows, workers=args.workers,
                               progress=bar, on_invalid=mode)
        else:
            res = sweep(base, engine=args.engine, scheduler=args.scheduler, chunk_rows=args.chunk_rows,
                        workers=args.workers, output=None if local else args.output, progress=bar,
                        on_invalid=mode, **axes)
    finally:
        if bar is not None:
            bar.close()
    if isinstance(res, dict):
        _report_invalid(mode, res["invalid"], total)
        print(f"wrote {res['rows']:,} rows × {res['columns']} columns to {args.output}")
        return
    if args.output:
        ncols = "" if isinstance(res, str) else f" × {len(res.columns)} columns"
        print(f"wrote {total:,} rows{ncols} to {args.output}")
        return
    df = res
    if mode != "error":
        _report_invalid(mode, total - len(df) if mode == "drop" else int(df["invalid_reason"].notna().sum()), total)
    if args.format == "json":
        print(fmt.dumps_json({"axes": list(axes), "n_rows": len(df), "rows": df.to_dict(orient="records")}))
    elif args.format == "csv":
        from costmodel.inputs.outputs import spreadsheet_safe
        spreadsheet_safe(df).to_csv(sys.stdout, index=False)
    else:
        shown = {c[0] for c in fmt.TABLE_COLUMNS}
        cols = [(a, a, None, "{}") for a in axes if a not in shown] + list(fmt.TABLE_COLUMNS)
        rows = df.to_dict(orient="records")
        text = [c for c in df.columns if df[c].dtype == "category"]
        for r in rows if text else ():         # a missing text (an invalid row's) prints blank, not nan
            for c in text:
                if not isinstance(r[c], str):
                    r[c] = None
        print(fmt.table(rows, cols))


def _report_invalid(mode: str, n: int, total: int) -> None:
    if mode == "error":
        return
    what = "marked in the invalid_reason column" if mode == "mark" else "left out"
    print(f"sweep: {n:,} of {total:,} rows invalid ({what})", file=sys.stderr)

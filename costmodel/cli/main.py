"""Command line: ``costmodel eval|run|sweep|check|validate|recommend|plan|probe|plot|serve|hardware|models``.

Exit status: 0 done; 2 bad input (the message names file, field, value and what is allowed).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from costmodel.cli import format as fmt
from costmodel.errors import InputError, shown_text

EXTRA_COMMANDS = ("sweep", "check", "validate", "recommend", "plan", "probe", "plot", "serve")


def parse_kv(words, what="KEY=VALUE") -> dict:
    """``['a=1', 'b=x']`` -> ``{'a': '1', 'b': 'x'}``; a word without '=' is an input error."""
    out = {}
    for w in words:
        if "=" not in w:
            raise InputError(f"expected {what}, got {_cut(w)}", allowed="words like batch_size=8 model=llama-2-7b")
        k, v = w.split("=", 1)
        if not k.strip():
            raise InputError(f"empty field name in {_cut(w)}")
        if k.strip() in out:
            raise InputError(f"given twice ({_cut(k.strip() + '=' + out[k.strip()])} and {_cut(w)})",
                             field=k.strip(), allowed="each field once")
        out[k.strip()] = v.strip()
    return out


def _cut(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit - 3] + "...")


def emit(args, obj, rows=None, kv=None):
    """Print ``obj`` as JSON, or ``rows`` as a table/CSV (``kv``: one result as a two-column table)."""
    f = getattr(args, "format", "table")
    if f == "json":
        print(fmt.dumps_json(obj))
    elif f == "csv":
        print(fmt.csv_text(rows if rows is not None else [kv or obj]), end="")
    else:
        if kv is not None:
            print(fmt.key_value_table(kv))
        elif rows is not None:
            print(fmt.table(rows))
        else:
            print(fmt.dumps_json(obj))


def cmd_eval(args):
    from costmodel.engine.evaluate import evaluate
    rec = parse_kv(args.fields)
    out = evaluate(rec, details=args.details)
    emit(args, out, rows=[out] if args.format == "csv" else None, kv=out)


def cmd_run(args):
    from costmodel.analysis.scenario import run_scenario
    res = run_scenario(args.scenario)
    if args.format == "table":
        print(f"scenario: {res['scenario']}")
        if res.get("description"):
            print(res["description"].strip())
        rows = []
        for r in res["results"]:
            r = dict(r)
            if r.get("hardware_label"):
                r["hardware"] = r["hardware_label"]
            rows.append(r)
        print(fmt.table(rows))
    else:
        emit(args, res, rows=res["results"])


def _list_or_show(args, kind: str, load, row, cols, details):
    """``hardware|models list`` (one row per zoo id) or ``show ID_OR_PATH`` (every field)."""
    from costmodel.inputs.specs import zoo_ids
    if args.action == "list":
        rows = [row(i, load(i)) for i in zoo_ids(kind)]
        if args.format == "table":
            print(fmt.table(rows, cols))
        else:
            emit(args, rows, rows=rows)
        return
    if not args.id:
        raise InputError(f"{args.command} show needs an id or a path", allowed=f"costmodel {args.command} list")
    d = details(load(args.id))
    emit(args, d, kv=_flatten(d))


def cmd_hardware(args):
    from dataclasses import asdict

    from costmodel.inputs.hardware import load_hardware
    cols = (("id", "id", None, "{}"), ("name", "name", None, "{}"), ("memory_GB", "memory GB", 1, "{:.1f}"),
            ("bandwidth_GB_per_s", "bandwidth GB/s", 1, "{:.0f}"), ("fp16_TFLOP_per_s", "fp16 TFLOP/s", 1, "{:.1f}"),
            ("l2_MB", "L2 MB", 1, "{:.1f}"))
    _list_or_show(args, "hardware_specs", load_hardware,
                  lambda i, h: {"id": i, "name": h.name, "memory_GB": h.capacity_bytes / 1e9,
                                "bandwidth_GB_per_s": h.bandwidth_bytes_per_s / 1e9,
                                "fp16_TFLOP_per_s": h.matrix_peak("fp16") / 1e12, "l2_MB": h.l2_bytes / 1e6},
                  cols, asdict)


def _attention_words(m) -> str:
    """The attention kind in a few words: MLA, full, or windowed (sliding/chunked, with the global share)."""
    kind = "MLA" if m.mla is not None else ("MHA" if m.n_kv_heads == m.n_heads else f"GQA {m.n_kv_heads} kv")
    if m.n_window_layers:
        glob = f", 1 in {m.global_layer_every} global" if m.global_layer_every else ""
        kind += f", {m.window_kind} {m.attention_window}{glob}"
    return kind


def _moe_words(m) -> str:
    if not m.n_moe_layers:
        return "dense"
    shared = f" +{m.n_shared_experts} shared" if m.n_shared_experts else ""
    return f"{m.n_experts} top-{m.experts_per_token}{shared}"


def model_facts(m) -> dict:
    """What ``models show`` adds to a model's fields: derived architecture facts."""
    return {"n_params": m.n_params, "active_params_per_token": m.active_params_per_token,
            "n_moe_layers": m.n_moe_layers, "n_dense_layers": m.n_dense_layers,
            "n_window_layers": m.n_window_layers, "n_global_layers": m.n_global_layers,
            "kv_bytes_per_token_fp16": m.kv_bytes_per_token(2.0),
            "kv_bytes_per_token_fp8": m.kv_bytes_per_token(1.0),
            "mtp_params": m.mtp_params if m.mtp_layers else 0}


def cmd_models(args):
    from dataclasses import asdict

    from costmodel.inputs.model import load_model
    cols = (("id", "id", None, "{}"), ("params_B", "params (1e9)", 1, "{:.1f}"),
            ("active_params_B", "active (1e9)", 1, "{:.1f}"), ("layers", "layers", 1, "{:.0f}"),
            ("experts", "experts", None, "{}"), ("attention", "attention", None, "{}"),
            ("kv_KiB_per_token_fp16", "KV KiB/token fp16", 1, "{:.1f}"), ("max_context", "max context", 1, "{:.0f}"),
            ("mtp_layers", "MTP", 1, "{:.0f}"))
    _list_or_show(args, "model_specs", load_model,
                  lambda i, m: {"id": i, "name": m.name, "params_B": m.n_params / 1e9,
                                "active_params_B": m.active_params_per_token / 1e9, "layers": m.n_layers,
                                "d_model": m.d_model, "kv_heads": m.n_kv_heads, "experts": _moe_words(m),
                                "attention": _attention_words(m),
                                # KV of one token while the context is within every window
                                "kv_KiB_per_token_fp16": m.kv_bytes_per_token(2) / 1024,
                                "max_context": m.max_context, "mtp_layers": m.mtp_layers},
                  cols, lambda m: dict(asdict(m), **model_facts(m)))


def _flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        elif isinstance(v, (list, tuple)):
            continue
        else:
            out[key] = v
    return out


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--format", choices=("table", "json", "csv"), default="table",
                        help="output format (default: table)")
    from costmodel import __version__
    from costmodel.inputs.fields import help_text

    p = argparse.ArgumentParser(prog="costmodel", description="Roofline cost model for LLM decoding: "
                                "autoregressive, speculative, token-tree and shared-prefix. "
                                "'costmodel eval --help' lists the record fields.")
    p.add_argument("--version", action="version", version=f"costmodel {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    e = sub.add_parser("eval", parents=[common], help="evaluate one record: costmodel eval KEY=VALUE ...",
                       description="Evaluate one record: its outputs (docs/design.md lists them) as a table, "
                                   "JSON or CSV.", epilog=help_text(),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("fields", nargs="+", metavar="KEY=VALUE")
    e.add_argument("--details", action="store_true", help="add the per-operator breakdown (JSON)")
    e.set_defaults(func=cmd_eval)
    r = sub.add_parser("run", parents=[common], help="run a scenario YAML and compare its strategies")
    r.add_argument("scenario", metavar="SCENARIO.yaml")
    r.set_defaults(func=cmd_run)
    h = sub.add_parser("hardware", parents=[common], help="list or show hardware specs")
    h.add_argument("action", choices=("list", "show"))
    h.add_argument("id", nargs="?")
    h.set_defaults(func=cmd_hardware)
    m = sub.add_parser("models", parents=[common], help="list or show models")
    m.add_argument("action", choices=("list", "show"))
    m.add_argument("id", nargs="?")
    m.set_defaults(func=cmd_models)
    for name in EXTRA_COMMANDS:
        try:
            mod = importlib.import_module(f".commands.{name}", __package__)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.endswith(f"commands.{name}"):
                s = sub.add_parser(name, parents=[common], help=f"({name}: not available in this build)")
                s.add_argument("rest", nargs="*")
                s.set_defaults(func=_unavailable(name))
                continue
            raise
        mod.register(sub, common)
    return p


def _unavailable(name):
    def f(args):
        raise InputError(f"'costmodel {name}' is not available in this build yet")
    return f




def _terminate(signum, frame):
    """SIGTERM: unwind like Ctrl-C, so that temporary output files are removed and the previous
    output stays in place (costmodel.inputs.outputs)."""
    raise KeyboardInterrupt


def main(argv=None) -> int:
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    before = signal.signal(signal.SIGTERM, _terminate)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, before)


def _main(argv) -> int:
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:     # argparse usage errors exit 2 with a message already printed
            return int(exc.code or 0)
        args.func(args)
    except InputError as exc:
        print(f"costmodel: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("costmodel: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("costmodel: error: out of memory (the input is larger than this machine can hold; see "
              "docs/errors.md for the stated limits)", file=sys.stderr)
        return 2
    except Exception as exc:  # an internal bug: say so plainly; the traceback only on request
        if os.environ.get("COSTMODEL_DEBUG"):
            raise
        print(f"costmodel: internal error: {type(exc).__name__}: {shown_text(str(exc), 300)} (set COSTMODEL_DEBUG=1 for the "
              "traceback and please report it)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

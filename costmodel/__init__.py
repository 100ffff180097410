"""costmodel: a roofline cost model for LLM decoding strategies.

    >>> import costmodel
    >>> r = costmodel.evaluate({"model": "llama-2-7b", "hardware": "t4", "batch_size": 1, "prompt_len": 512})
    >>> r["bound"]
    'memory'

Public API (docs/design.md, "Python API"): evaluate, sweep, check, validate, recommend, plan, serve,
load_hardware, load_model, load_runtime, parse_record; ``costmodel.plots`` (decision_map, roofline, sweep)
loads on first use.
"""

import sys as _sys

try:
    from costmodel.analysis.claims import check
    from costmodel.errors import InputError
    from costmodel.engine.evaluate import OUTPUT_KEYS, evaluate
    from costmodel.inputs.hardware import load_hardware
    from costmodel.inputs.model import load_model
    from costmodel.analysis.plan import plan
    from costmodel.analysis.recommend import recommend
    from costmodel.inputs.record import parse_record
    from costmodel.inputs.runtime import load_runtime
    # The entry points are imported eagerly (numpy only; pandas, scipy and matplotlib load on first use,
    # about 20 ms in all): a submodule imported later would otherwise shadow a lazily exported function
    # of the same name (costmodel.sweep, costmodel.plan, costmodel.validate are both).
    from costmodel.analysis.sweep import sweep
    from costmodel.calibration.validate import validate
    from costmodel.serving.api import serve
except KeyboardInterrupt:         # Ctrl-C while the command line starts: one line, no traceback
    _argv = list(getattr(_sys, "orig_argv", _sys.argv))
    if _sys.argv[0].replace("\\", "/").rsplit("/", 1)[-1] in ("costmodel", "costmodel.exe") or any(
            a == "-m" and b == "costmodel" for a, b in zip(_argv, _argv[1:])):
        print("costmodel: interrupted", file=_sys.stderr)
        raise SystemExit(130) from None
    raise

__version__ = "0.1.0"


def __getattr__(name):
    """``costmodel.plots`` (:mod:`costmodel.analysis.plots`: decision_map, roofline, sweep) is imported on
    first use, so that ``import costmodel`` does not load the plotting code."""
    if name == "plots":
        import importlib
        mod = importlib.import_module("costmodel.analysis.plots")
        globals()["plots"] = mod
        return mod
    raise AttributeError(f"module 'costmodel' has no attribute {name!r}")


__all__ = ["evaluate", "sweep", "check", "validate", "recommend", "plan", "load_hardware", "load_model",
           "load_runtime", "parse_record", "InputError", "OUTPUT_KEYS", "serve"]

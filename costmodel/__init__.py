"""costmodel: a roofline cost model for LLM decoding strategies.

    >>> import costmodel
    >>> r = costmodel.evaluate({"model": "llama-2-7b", "hardware": "t4", "batch_size": 1, "prompt_len": 512})
    >>> r["bound"]
    'memory'

Public API (DESIGN §6): evaluate, sweep, check, validate, recommend, load_hardware, load_model.
"""

from .errors import InputError
from .evaluate import OUTPUT_KEYS, evaluate
from .hardware import load_hardware
from .model import load_model
from .record import parse_record
from .runtime import load_runtime
# eager (numpy only; pandas loads on first call): the submodule costmodel.sweep would otherwise
# shadow the lazy attribute below once anything imports it, leaving costmodel.sweep a module
from .sweep import sweep

__version__ = "0.1.0"

__all__ = ["evaluate", "sweep", "check", "validate", "recommend", "plan", "load_hardware", "load_model",
           "load_runtime", "parse_record", "InputError", "OUTPUT_KEYS"]


def __getattr__(name):
    """Lazy access to the heavier entry points (pandas, scipy) so ``import costmodel`` stays fast."""
    import importlib
    where = {"sweep": "sweep", "check": "claims", "validate": "validate", "recommend": "recommend",
             "plan": "plan"}
    if name in where:
        try:
            mod = importlib.import_module(f".{where[name]}", __name__)
        except ModuleNotFoundError as exc:
            raise AttributeError(f"costmodel.{name} is not available in this build") from exc
        fn = getattr(mod, name)
        globals()[name] = fn
        return fn
    raise AttributeError(f"module 'costmodel' has no attribute {name!r}")

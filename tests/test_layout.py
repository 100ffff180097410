"""The package stays readable: no module over MAX_MODULE_LINES lines, no function over
MAX_FUNCTION_LINES lines unless its docstring says why ("long because ..."), and no import cycle
between the modules of costmodel/ (read from the source with ast, nothing imported).

Import cycles: imports that run when a module is imported (anything outside a function body) may
form no cycle at all. Imports deferred into a function body may form none either, except the
cycles listed in KNOWN_DEFERRED_CYCLES (each a module that dispatches to a helper module which
uses the first one's core); a new one, or one that grows, fails, and so does an entry that no
longer exists (remove it from the list)."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "costmodel"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
#: what a long function's docstring must contain
LONG_MARKER = "long because"

#: deferred-import cycles that exist today, each {module, ...}
KNOWN_DEFERRED_CYCLES = [
    {"costmodel.inputs.model", "costmodel.inputs.hf_config"},
    {"costmodel.engine.strategies.speculative", "costmodel.engine.strategies.tree",
     "costmodel.engine.strategies.heads"},
    {"costmodel.analysis.sweep", "costmodel.analysis.sweep_dask"},
    {"costmodel.analysis.sweep_grid", "costmodel.analysis.sweep_stack"},
    {"costmodel.serving.api", "costmodel.serving.search"},
]


def _modules() -> dict:
    """{dotted module name: path} of every module of the package."""
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _rel(p: Path) -> str:
    return str(p.relative_to(PACKAGE.parent))


class _Imports(ast.NodeVisitor):
    """The package modules a module imports, split into import-time and deferred (in a function)."""

    def __init__(self, name: str, is_package: bool):
        self.name, self.is_package = name, is_package
        self.depth = 0
        self.now, self.later = set(), set()

    def _targets(self, node) -> list:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        base = node.module or ""
        if node.level:                                   # relative: from its package upwards
            pkg = self.name.split(".") if self.is_package else self.name.split(".")[:-1]
            pkg = pkg[:len(pkg) - node.level + 1]
            base = ".".join(pkg + ([base] if base else []))
        # `from pkg import module` imports that module; `from module import name`, the module
        return [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]

    def _add(self, node):
        for t in self._targets(node):
            while t and t not in MODULES:                # `import a.b.c` of a name inside a.b
                t = t.rpartition(".")[0]
            if t and t != self.name:
                (self.later if self.depth else self.now).add(t)

    visit_Import = visit_ImportFrom = _add

    def _function(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function


def _graph() -> tuple[dict, dict]:
    """({module: modules imported at import time}, {module: every module imported})."""
    now, every = {}, {}
    for name, p in MODULES.items():
        v = _Imports(name, p.name == "__init__.py")
        v.visit(ast.parse(p.read_text(encoding="utf-8")))
        # a package imports its parent package on the way: not a dependency worth a cycle
        now[name] = {t for t in v.now if not name.startswith(t + ".")}
        every[name] = now[name] | {t for t in v.later if not name.startswith(t + ".")}
    return now, every


def _cycles(graph: dict) -> list:
    """The strongly connected components with more than one module (Tarjan), each a set."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_modules_are_short():
    long = {_rel(p): n for p in MODULES.values()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by concept): {long}"


def test_long_functions_say_why():
    long = []
    for p in MODULES.values():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES and LONG_MARKER not in (ast.get_docstring(node) or "").lower():
                    long.append(f"{_rel(p)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, (f"functions over {MAX_FUNCTION_LINES} lines: split them into named steps, or say in "
                      f"the docstring why not ('{LONG_MARKER} ...'): {long}")


def test_no_import_cycle_at_import_time():
    now, _ = _graph()
    assert _cycles(now) == [], "modules that import each other when imported"


def test_no_new_deferred_import_cycle():
    _, every = _graph()
    found = _cycles(every)
    new = [sorted(c) for c in found if c not in KNOWN_DEFERRED_CYCLES]
    assert not new, f"import cycles (deferred imports included) not in KNOWN_DEFERRED_CYCLES: {new}"
    gone = [sorted(c) for c in KNOWN_DEFERRED_CYCLES if c not in found]
    assert not gone, f"no longer a cycle: remove from KNOWN_DEFERRED_CYCLES: {gone}"


# --------------------------------------------------------------------------- the checks bite

def test_cycle_finder_finds_a_cycle_and_only_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [{"a", "b", "c"}]


@pytest.mark.parametrize("source, deferred", [
    ("import costmodel.engine.roofline\n", False),
    ("from costmodel.engine import roofline\n", False),
    ("from .roofline import Cost\n", False),
    ("try:\n    from costmodel.engine.roofline import Cost\nexcept ImportError:\n    pass\n", False),
    ("def f():\n    from costmodel.engine.roofline import Cost\n", True),
    ("class K:\n    def m(self):\n        import costmodel.engine.roofline\n", True),
])
def test_imports_are_read_as_import_time_or_deferred(source, deferred):
    v = _Imports("costmodel.engine.pass_cost", is_package=False)
    v.visit(ast.parse(source))
    assert (v.later if deferred else v.now) == {"costmodel.engine.roofline"}
    assert not (v.now if deferred else v.later)

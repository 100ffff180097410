"""Records: the one flat shape for API calls, scenario entries, measurements and claims (DESIGN §4).

``parse_record(mapping)`` is the single place input errors are raised: unknown fields (with a
'did you mean'), wrong types, out-of-range values and contradictions all raise InputError naming
the field, the bad value and what is allowed. Values may be strings (command line, CSV cells);
None or blank text means "default", while 'nan', 'inf' and a float NaN are refused. The kinds of
bad input and their messages: docs/errors.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from costmodel.errors import InputError, suggest

STRATEGIES = ("autoregressive", "speculative", "tree", "shared_prefix")
DRAFT_KINDS = ("none", "medusa", "eagle", "self")
KERNELS = ("prefix_aware", "per_branch", "dense_masked")
PLACEMENTS = ("same_device", "separate_device", "separate_node")
SCHEDULES = ("serial", "overlap")
SYNC = ("ragged", "lockstep")
DTYPE_CHOICES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4")
KV_DTYPE_CHOICES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4")
TREE_SHAPES = ("full", "optimal", "optimal_for_hardware", "explicit", "chain")


@dataclass(frozen=True)
class Record:
    """A validated record. Defaults follow DESIGN §4."""

    model: str
    hardware: str
    batch_size: int
    prompt_len: int
    gen_len: int = 128
    n_devices: int = 1
    tensor_parallel: int | None = None
    pipeline_parallel: int = 1
    weight_dtype: str = "fp16"
    kv_dtype: str | None = None
    runtime: str | None = None
    strategy: str = "autoregressive"
    draft_model: str | None = None
    draft_kv_budget: int | None = None
    draft_placement: str = "same_device"
    draft_schedule: str = "serial"
    gamma: int = 4
    acceptance_rate: float | None = None
    mean_accepted_tokens: float | None = None
    batch_sync: str = "ragged"
    tree_width: int | None = None
    tree_depth: int | None = None
    tree_nodes: int | None = None
    tree_shape: str | None = None
    tree_parents: tuple | None = None
    rank_acceptance: tuple | None = None
    attention_kernel: str = "prefix_aware"
    n_branches: int = 1
    shared_prefix_len: int = 0
    power_mode: str | None = None
    allreduce_algorithm: str = "auto"

    def replace(self, **kw) -> "Record":
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(kw)
        return Record(**d)


FIELD_NAMES = tuple(f.name for f in fields(Record))
# fields that describe a measurement or claim rather than the configuration
META_FIELDS = ("id", "metric", "value", "values", "source", "text", "reliability", "notes", "unit",
               "source_locator", "runtime_note", "measured")

INT_FIELDS = {"batch_size": 1, "prompt_len": 1, "gen_len": 1, "n_devices": 1, "tensor_parallel": 1,
              "pipeline_parallel": 1, "gamma": 1, "draft_kv_budget": 1, "tree_width": 1, "tree_depth": 1,
              "tree_nodes": 1, "n_branches": 1, "shared_prefix_len": 0}
CHOICES = {"strategy": STRATEGIES, "attention_kernel": KERNELS, "draft_placement": PLACEMENTS,
           "draft_schedule": SCHEDULES, "batch_sync": SYNC, "weight_dtype": DTYPE_CHOICES,
           "kv_dtype": KV_DTYPE_CHOICES, "tree_shape": TREE_SHAPES, "allreduce_algorithm": ("auto", "ring", "tree")}
MAX_INT = {"batch_size": 1 << 20, "prompt_len": 1 << 24, "gen_len": 1 << 24, "n_devices": 4096,
           "gamma": 64, "tree_width": 64, "tree_depth": 64, "tree_nodes": 1024, "n_branches": 4096}


def _short(v, limit: int = 40) -> str:
    """A bad value as messages show it: command-line text as typed, anything else as its repr."""
    r = v.strip() if isinstance(v, str) and v.strip() and v.strip() == v.strip().strip("'\"") else repr(v)
    return r if len(r) <= limit else r[:limit - 3] + "..."


def _as_number(name, v, src, what, allowed=None):
    """bool/str/int/float -> int or float, refusing non-numbers and non-finite values ('nan', 'inf')."""
    if isinstance(v, bool):
        raise InputError(f"must be {what}, got {v!r}", source=src, field=name, allowed=allowed)
    if isinstance(v, str):
        s = v.strip().replace("_", "")
        try:
            v = int(s)
        except ValueError:
            try:
                v = float(s)
            except ValueError:
                raise InputError(f"must be {what}, got {v!r}", source=src, field=name, allowed=allowed) from None
    if not isinstance(v, (int, float)):
        kind = {list: "a list", tuple: "a list", dict: "a mapping"}.get(type(v), type(v).__name__)
        raise InputError(f"must be {what}, got {kind} {_short(v)}", source=src, field=name, allowed=allowed)
    try:
        finite = math.isfinite(v)
    except OverflowError:                       # an integer beyond float range
        finite = False
    if not finite:
        raise InputError(f"must be a finite number, got {_short(v)}", source=src, field=name,
                         allowed=allowed or "a finite number (not nan or inf)")
    return v


def _as_int(name, v, src):
    raw = v
    lo, hi = INT_FIELDS[name], MAX_INT.get(name)
    allowed = f"an integer >= {lo}" + (f" and <= {hi}" if hi else "")
    v = _as_number(name, v, src, "an integer", allowed)
    if isinstance(v, float):
        if v != int(v):
            raise InputError(f"must be an integer, got {_short(raw)}", source=src, field=name, allowed=allowed)
        v = int(v)
    if v < lo or (hi is not None and v > hi):
        raise InputError(f"out of range: {_short(raw)}", source=src, field=name, allowed=allowed)
    return v


def _as_float(name, v, src):
    return float(_as_number(name, v, src, "a number"))


def _as_float_list(name, v, src):
    if isinstance(v, str):
        parts = [p for p in v.replace(";", ",").split(",") if p.strip()]
    elif isinstance(v, (list, tuple)):
        parts = list(v)
    else:
        parts = [v]
    return tuple(_as_float(name, p, src) for p in parts)


def _as_int_list(name, v, src):
    if isinstance(v, str):
        parts = [p for p in v.replace(";", ",").split(",") if p.strip()]
    elif isinstance(v, (list, tuple)):
        parts = list(v)
    else:
        raise InputError(f"must be a list of parent indices, got {_short(v)}", source=src, field=name,
                         allowed="node i's parent for i = 1..n, e.g. 0,0,1,1 (0 = the root)")
    out = []
    for p in parts:
        try:
            f = _as_number(name, p, src, "a list of integer parent indices")
        except InputError:
            raise InputError(f"parent indices must be integers, got {_short(p)}", source=src, field=name,
                             allowed="node i's parent for i = 1..n, e.g. 0,0,1,1 (0 = the root)") from None
        if f != int(f):
            raise InputError(f"parent indices must be integers, got {_short(p)}", source=src, field=name)
        out.append(int(f))
    return tuple(out)


def _empty(v) -> bool:
    """None or blank text means 'default'. A float NaN does not: it is refused like 'nan' (a pandas
    row must turn its NaN cells into None first)."""
    return v is None or (isinstance(v, str) and v.strip() == "")


def parse_record(data, source: str = "record", allow_meta: bool = False) -> Record:
    """Validate a mapping into a :class:`Record`; InputError on anything wrong (see module doc)."""
    if isinstance(data, Record):
        return data
    if not isinstance(data, dict):
        raise InputError(f"a record must be a mapping of field: value, got {type(data).__name__}", source=source)
    kw, seen = {}, set()
    for raw_key, v in data.items():
        key = str(raw_key).strip()
        if key in seen:
            raise InputError("given twice", source=source, field=key, allowed="each field once")
        seen.add(key)
        if key in META_FIELDS or key.startswith("target_"):
            if allow_meta:
                continue
            raise InputError("not a configuration field here", source=source, field=key,
                             allowed="the record fields of DESIGN §4")
        if key not in FIELD_NAMES:
            raise InputError(f"unknown field{suggest(key, FIELD_NAMES)}", source=source, field=key,
                             allowed=", ".join(FIELD_NAMES))
        if _empty(v):
            continue
        if key in INT_FIELDS:
            kw[key] = _as_int(key, v, source)
        elif key in ("acceptance_rate", "mean_accepted_tokens"):
            kw[key] = _as_float(key, v, source)
        elif key == "rank_acceptance":
            kw[key] = _as_float_list(key, v, source)
        elif key == "tree_parents":
            kw[key] = _as_int_list(key, v, source)
        else:
            if not isinstance(v, (str, int, float)) or isinstance(v, bool):
                kind = {list: "a list", tuple: "a list", dict: "a mapping"}.get(type(v), type(v).__name__)
                raise InputError(f"must be text, got {kind} {_short(v)}", source=source, field=key)
            s = str(v).strip()
            if key == "draft_model" and s.lower() in DRAFT_KINDS:
                s = s.lower()
            if key in CHOICES:
                s = s.lower().replace("-", "_") if key not in ("weight_dtype", "kv_dtype") else s.lower()
                if key == "strategy":
                    s = {"ar": "autoregressive", "spec": "speculative", "shared": "shared_prefix"}.get(s, s)
                if s not in CHOICES[key]:
                    raise InputError(f"unknown value {v!r}{suggest(s, CHOICES[key])}", source=source, field=key,
                                     allowed=", ".join(CHOICES[key]))
            kw[key] = s
    for req in ("model", "hardware", "batch_size", "prompt_len"):
        if req not in kw:
            raise InputError("missing required field", source=source, field=req,
                             allowed="model, hardware, batch_size and prompt_len are required")
    rec = Record(**kw)
    _check_consistency(rec, source)
    return rec


def _check_consistency(r: Record, src: str) -> None:
    a, tau = r.acceptance_rate, r.mean_accepted_tokens
    if a is not None and not 0.0 <= a < 1.0:
        raise InputError(f"out of range: {a}", source=src, field="acceptance_rate",
                         allowed="0 <= α < 1 (α = 1 would mean the draft is never wrong; give "
                                 "mean_accepted_tokens = gamma + 1 for that)")
    if tau is not None and tau < 1.0:
        raise InputError(f"out of range: {tau}", source=src, field="mean_accepted_tokens",
                         allowed="τ >= 1 (every verification step gains at least the bonus token)")
    tp, pp = r.tensor_parallel, r.pipeline_parallel
    if tp is not None and tp * pp != r.n_devices:
        raise InputError(f"tensor_parallel {tp} × pipeline_parallel {pp} = {tp * pp} devices, but n_devices is "
                         f"{r.n_devices}", source=src, field="tensor_parallel",
                         allowed=f"n_devices = tensor_parallel × pipeline_parallel (e.g. n_devices={tp * pp})")
    if r.n_devices % pp:
        raise InputError(f"pipeline_parallel ({pp}) must divide n_devices ({r.n_devices})",
                         source=src, field="pipeline_parallel", value=pp)
    if r.shared_prefix_len > r.prompt_len:
        raise InputError(f"shared_prefix_len ({r.shared_prefix_len}) exceeds prompt_len ({r.prompt_len})",
                         source=src, field="shared_prefix_len",
                         allowed=f"0..prompt_len = 0..{r.prompt_len} (0: the whole prompt is shared)")
    if r.rank_acceptance is not None:
        p = r.rank_acceptance
        if not p or len(p) > MAX_RANKS or any(x < 0 or x > 1 for x in p) or sum(p) > 1.0 + 1e-9:
            raise InputError(f"invalid rank acceptance {_short(list(p), 80)}", source=src, field="rank_acceptance",
                             allowed=f"1 to {MAX_RANKS} probabilities p_1..p_k in [0, 1] with Σ p_i <= 1 (the "
                                     "ranked children's acceptances are mutually exclusive)")
    spec_like = r.strategy in ("speculative", "tree")
    if spec_like:
        if a is None and tau is None and r.rank_acceptance is None:
            raise InputError(f"strategy '{r.strategy}' needs an acceptance figure", source=src,
                             field="acceptance_rate",
                             allowed="acceptance_rate (α), mean_accepted_tokens (τ)"
                                     + (", or rank_acceptance" if r.strategy == "tree" else ""))
        if r.draft_model is None:
            raise InputError(f"strategy '{r.strategy}' needs a draft_model", source=src, field="draft_model",
                             allowed="a zoo id or path, or " + ", ".join(DRAFT_KINDS))
    if r.strategy == "speculative":
        if tau is not None and not 1.0 <= tau <= r.gamma + 1:
            raise InputError(f"out of range: {tau}", source=src, field="mean_accepted_tokens",
                             allowed=f"1 <= τ <= gamma + 1 = {r.gamma + 1}")
        if tau is not None and a is not None:
            from costmodel.engine.acceptance import chain_tokens_per_step
            implied = float(chain_tokens_per_step(a, r.gamma))
            if abs(implied - tau) > 0.05 * tau:
                raise InputError(f"acceptance_rate {a} implies τ = {implied:.3f} at gamma {r.gamma}, but "
                                 f"mean_accepted_tokens is {tau}", source=src, field="mean_accepted_tokens",
                                 allowed="give one of α and τ, or two that agree within 5%")
        if r.draft_model in ("medusa", "eagle"):
            raise InputError(f"draft_model '{r.draft_model}' proposes a tree", source=src, field="draft_model",
                             allowed="use strategy=tree for medusa/eagle, or a draft model / none / self "
                                     "for a chain")
    if r.strategy == "tree":
        _check_tree(r, src)


MAX_RANKS = 64
SHAPES = "tree_width and tree_depth (full tree), tree_nodes [+ tree_depth as a bound] (optimal tree), " \
         "or tree_parents (explicit parent list)"


def _full_tree_nodes(width: int, depth: int, cap: int) -> int:
    """Σ_{d=1..depth} width^d, stopping once it passes ``cap`` (width 64, depth 64 must not be built)."""
    n, level = 0, 1
    for _ in range(depth):
        level *= width
        n += level
        if n > cap:
            break
    return n


def _check_tree(r: Record, src: str) -> None:
    """A tree's shape is given one way and is consistent; τ fits it; α or ranks and τ agree."""
    from costmodel.engine.tree import MAX_TREE_NODES, full_tree, optimal_tree, validate_parents
    from costmodel.engine.acceptance import default_rank_acceptance

    w, d, n, parents = r.tree_width, r.tree_depth, r.tree_nodes, r.tree_parents
    if w is None and d is None and n is None and parents is None:
        raise InputError("a tree needs a shape", source=src, field="tree_nodes", allowed=SHAPES)
    if parents is not None and (w is not None or d is not None or n is not None):
        other = next(k for k, v in (("tree_width", w), ("tree_depth", d), ("tree_nodes", n)) if v is not None)
        raise InputError(f"tree_parents fixes the whole tree; {other} would be ignored", source=src,
                         field=other, allowed="give either tree_parents alone, or " + SHAPES.split(", or")[0])
    if w is not None and n is not None:
        raise InputError("tree_width (full tree) and tree_nodes (optimal tree for a node budget) describe "
                         "different trees", source=src, field="tree_width", allowed=SHAPES)
    if w is not None and d is None:
        raise InputError("a full tree needs both tree_width and tree_depth", source=src, field="tree_depth",
                         allowed=SHAPES)
    if d is not None and w is None and n is None:
        raise InputError("tree_depth alone is not a shape", source=src, field="tree_nodes", allowed=SHAPES)
    shape = r.tree_shape
    need = {"full": ("tree_width", w), "explicit": ("tree_parents", parents), "optimal": ("tree_nodes", n),
            "optimal_for_hardware": ("tree_nodes", n)}.get(shape)
    if need is not None and need[1] is None:
        raise InputError(f"tree_shape={shape} needs {need[0]}", source=src, field=need[0], allowed=SHAPES)
    if shape == "chain" and (w not in (None, 1)):
        raise InputError("tree_shape=chain has width 1", source=src, field="tree_width", value=w)
    if shape == "optimal_for_hardware" and n > MAX_HW_SEARCH_NODES:
        raise InputError(f"out of range: {n}", source=src, field="tree_nodes",
                         allowed=f"at most {MAX_HW_SEARCH_NODES} nodes for tree_shape=optimal_for_hardware "
                                 "(it searches every size up to tree_nodes)")
    tree = None
    if parents is not None:
        try:
            tree = validate_parents(parents)
        except InputError as exc:
            raise InputError(str(exc).split(": ", 1)[-1], source=src, field="tree_parents") from None
        depth = tree.depth
    elif w is not None:
        nodes = _full_tree_nodes(w, d, MAX_TREE_NODES)
        if nodes > MAX_TREE_NODES:
            raise InputError(f"a {w}-ary tree of depth {d} has more than {MAX_TREE_NODES} nodes", source=src,
                             field="tree_width", allowed=f"at most {MAX_TREE_NODES} nodes in all")
        depth = d
    else:
        depth = n if d is None else min(n, d)
    tau = r.mean_accepted_tokens
    if tau is not None and shape == "optimal_for_hardware":
        # the search compares tree sizes: a fixed τ would make the smallest tree always win
        raise InputError("tree_shape=optimal_for_hardware compares tree sizes by their expected tokens, which "
                         "a single mean_accepted_tokens cannot give", source=src, field="mean_accepted_tokens",
                         allowed="acceptance_rate (α) or rank_acceptance instead of τ")
    if tau is not None and not 1.0 <= tau <= depth + 1:
        raise InputError(f"out of range: {tau}", source=src, field="mean_accepted_tokens",
                         allowed=f"1 <= τ <= tree depth + 1 = {depth + 1}")
    ranks = r.rank_acceptance or (default_rank_acceptance(r.acceptance_rate) if r.acceptance_rate is not None
                                  else None)
    if tau is None or ranks is None:
        return
    given = "rank_acceptance" if r.rank_acceptance else "acceptance_rate"
    if tree is None:
        tree = full_tree(w, d) if w is not None else optimal_tree(int(n), tuple(ranks), d)
    implied = tree.expected_tokens(ranks)
    if abs(implied - tau) > 0.05 * tau:
        raise InputError(f"{given} implies τ = {implied:.3f} for this tree, but mean_accepted_tokens is {tau}",
                         source=src, field="mean_accepted_tokens",
                         allowed=f"give one of {given} and τ, or two that agree within 5%")


MAX_HW_SEARCH_NODES = 256

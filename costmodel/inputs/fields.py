"""Every record field, described once: type, allowed values or range, default, unit and help.

This table is the single source for

* :class:`costmodel.inputs.record.Record` (its fields and defaults are built from it),
* :func:`costmodel.inputs.record.parse_record` (types, choices, ranges and the "allowed:" part of
  every message about a single field),
* the sweep's conversion of axis values (:mod:`costmodel.analysis.sweep`),
* ``costmodel eval --help`` (the field list), and
* the README's and ``docs/design.md``'s field tables (``python scripts/gen_readme.py`` rewrites them;
  a test fails when they disagree).

Rules that tie several fields together (α and τ agreeing, tree shapes, devices) live in
:mod:`costmodel.inputs.rules`.

Kinds: ``text`` (an id, a path or a keyword), ``choice`` (one of ``choices``, case-insensitive,
``-`` read as ``_``), ``int``, ``float``, ``floats`` (a list of numbers, comma-separated on the
command line), ``ints`` (a list of integers), ``schedule`` (a γ schedule,
:mod:`costmodel.inputs.schedule`; kept as its canonical text).
"""

from __future__ import annotations

from dataclasses import dataclass

from costmodel.inputs.schedule import ALLOWED as SCHEDULE_ALLOWED

#: marks a field without a default
REQUIRED = object()

STRATEGIES = ("autoregressive", "speculative", "tree", "shared_prefix")
DRAFT_KINDS = ("none", "medusa", "eagle", "eagle3", "suffix", "self", "mtp")
#: draft kinds that are heads on the target's hidden states (they run on the target's devices and TP;
#: mtp: the target's own multi-token-prediction module)
HEAD_DRAFTS = ("medusa", "eagle", "eagle3", "mtp")
#: draft kinds without weights of their own to place or shard
WEIGHTLESS_DRAFTS = ("none", "suffix", "medusa", "self")
#: EAGLE-3's reduced draft vocabulary in its released heads (SafeAILab/EAGLE eagle/traineagle3/config.json
#: "draft_vocab_size": 32000)
EAGLE3_DRAFT_VOCAB = 32000
KERNELS = ("prefix_aware", "per_branch", "dense_masked")
PLACEMENTS = ("same_device", "separate_device", "separate_node")
SCHEDULES = ("serial", "overlap")
SYNC = ("ragged", "lockstep")
DTYPE_CHOICES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4")
#: KV-cache formats (no 4-bit block formats for the KV cache)
KV_DTYPE_CHOICES = ("fp32", "fp16", "bf16", "fp8", "int8", "int4")
TREE_SHAPES = ("full", "optimal", "optimal_for_hardware", "explicit", "chain")
ALLREDUCE = ("auto", "ring", "tree", "custom")

#: most ranked children a rank_acceptance list may give
MAX_RANKS = 64


@dataclass(frozen=True)
class FieldSpec:
    """One record field. ``default`` is the Record's value when the field is not given (None: resolved
    later, as ``default_text`` says); ``minimum``/``maximum`` bound numbers (``maximum_exclusive``:
    the bound itself is refused); ``allowed`` overrides the generated "allowed:" text."""

    name: str
    kind: str
    default: object
    unit: str
    help: str
    choices: tuple = ()
    aliases: tuple = ()                 # (alias, value) pairs for choices
    keywords: tuple = ()                # text fields: words read case-insensitively
    minimum: float | None = None
    maximum: float | None = None
    maximum_exclusive: bool = False
    default_text: str | None = None
    allowed_text: str | None = None

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def default_shown(self) -> str:
        """The default as help and tables show it."""
        if self.default_text is not None:
            return self.default_text
        if self.required:
            return "required"
        if self.default is None:
            return "—"
        return str(self.default)

    @property
    def short_allowed(self) -> str:
        """The allowed values in a few words ("1..64", "0 <= α < 1", "fp16, bf16"), '' for text."""
        if self.kind == "choice":
            return ", ".join(self.choices)
        if self.kind == "int":
            lo, hi = self.minimum, self.maximum
            return f"{_num(lo)}..{_num(hi)}" if hi is not None else f">= {_num(lo)}"
        if self.kind == "float":
            return self.allowed.split(" (")[0]
        return ""

    @property
    def allowed(self) -> str:
        """What the field accepts, in words (the "allowed:" part of messages)."""
        if self.allowed_text is not None:
            return self.allowed_text
        if self.kind == "choice":
            return ", ".join(self.choices)
        if self.kind == "int":
            lo, hi = self.minimum, self.maximum
            return f"an integer >= {_num(lo)}" + (f" and <= {_num(hi)}" if hi is not None else "")
        if self.kind == "float":
            return "a number"
        return "text"

    def out_of_range(self, v):
        """True where ``v`` (a number or a numpy array) is outside [minimum, maximum]."""
        bad = False
        if self.minimum is not None:
            bad = v < self.minimum
        if self.maximum is not None:
            bad = bad | ((v >= self.maximum) if self.maximum_exclusive else (v > self.maximum))
        return bad


def _num(x) -> str:
    return str(int(x)) if x == int(x) else f"{x:g}"


def _f(name, kind, default, unit, help, **kw) -> FieldSpec:
    return FieldSpec(name, kind, default, unit, help, **kw)


#: the record's fields, in the order Record lists them
FIELDS: tuple[FieldSpec, ...] = (
    _f("model", "text", REQUIRED, "",
       "the model: a zoo id (costmodel models list), a model YAML or a Hugging Face config.json path",
       allowed_text="a zoo id or a path"),
    _f("hardware", "text", REQUIRED, "",
       "the device: a zoo id (costmodel hardware list) or a hardware YAML path",
       allowed_text="a zoo id or a path"),
    _f("batch_size", "int", REQUIRED, "sequences",
       "sequences decoded together (shared_prefix: prompts, each with n_branches branches)",
       minimum=1, maximum=1 << 20),
    _f("prompt_len", "int", REQUIRED, "tokens", "tokens already in context when decoding starts",
       minimum=1, maximum=1 << 24),
    _f("gen_len", "int", 128, "tokens",
       "tokens generated per sequence (decode figures are taken at prompt_len + gen_len/2)",
       minimum=1, maximum=1 << 24),
    _f("n_devices", "int", 1, "devices", "devices used: tensor_parallel × pipeline_parallel (× attention "
       "data-parallel groups with expert_parallel)",
       minimum=1, maximum=4096),
    _f("tensor_parallel", "int", None, "devices",
       "tensor-parallel degree: weights, heads and KV split; two all-reduces per layer",
       minimum=1, default_text="n_devices / pipeline_parallel"),
    _f("pipeline_parallel", "int", 1, "stages", "pipeline stages: the layers split in consecutive groups",
       minimum=1),
    _f("expert_parallel", "int", 1, "devices",
       "expert-parallel degree (MoE): the routed experts split over every device of a stage "
       "(n_devices / pipeline_parallel); attention tensor-parallel over tensor_parallel devices and "
       "data-parallel over the rest, tokens reaching their experts by all-to-all (dispatch, combine)",
       minimum=1, maximum=4096),
    _f("weight_dtype", "choice", "fp16", "", "weight format (int8/int4 stored as the runtime stores them)",
       choices=DTYPE_CHOICES),
    _f("kv_dtype", "choice", None, "", "KV-cache element format", choices=KV_DTYPE_CHOICES,
       default_text="weight_dtype (fp16 for int8/int4 weights)"),
    _f("runtime", "text", None, "",
       "software stack: compiled (torch.compile / CUDA graphs), eager (HF transformers), vllm, trt-llm, "
       "llama.cpp, mlc, or a runtime YAML path; an engine version after @ (vllm@0.6) selects that version's "
       "host work and scheduler defaults", default_text="compiled",
       allowed_text="a runtime id (optionally @VERSION) or a path"),
    _f("strategy", "choice", "autoregressive", "", "how tokens are generated", choices=STRATEGIES,
       aliases=(("ar", "autoregressive"), ("spec", "speculative"), ("shared", "shared_prefix"))),
    _f("draft_model", "text", None, "",
       "the draft: a model id or path, or none (n-gram / prompt lookup), self (the target with "
       "draft_kv_budget), medusa (heads), eagle (one-layer head), eagle3 (one-layer head on three target "
       "layers' features, reduced vocabulary), suffix (suffix-tree drafting on the CPU)", keywords=DRAFT_KINDS,
       allowed_text="a zoo id or path, or " + ", ".join(DRAFT_KINDS)),
    _f("draft_tensor_parallel", "int", 1, "devices",
       "devices a draft model is sharded over (its own all-reduces); heads use the target's",
       minimum=1, maximum=4096),
    _f("draft_vocab_size", "int", None, "tokens", "tokens of an eagle3 head's own LM head (mapped to the target's)",
       minimum=1, maximum=1 << 22, default_text=f"{EAGLE3_DRAFT_VOCAB} (at most the target's)"),
    _f("draft_kv_budget", "int", None, "tokens", "tokens of KV the draft keeps (self-draft, MagicDec)",
       minimum=1, default_text="full context"),
    _f("draft_placement", "choice", "same_device", "", "where the draft model runs", choices=PLACEMENTS),
    _f("draft_schedule", "choice", "serial", "",
       "draft and target passes in turn, or overlapped (draft on its own device)", choices=SCHEDULES),
    _f("gamma", "int", 4, "tokens", "γ: draft tokens per speculation step (chain)", minimum=1, maximum=64),
    _f("gamma_schedule", "schedule", None, "",
       "γ by running sequences, e.g. 1-64:3,65-128:1,129-:0 (0 = plain decoding; a tree runs whole for "
       "γ > 0): evaluate takes the γ for batch_size, serve the γ for the sequences of each step",
       allowed_text=SCHEDULE_ALLOWED),
    _f("acceptance_rate", "float", None, "", "α: probability that a draft token is accepted",
       minimum=0.0, maximum=1.0, maximum_exclusive=True,
       allowed_text="0 <= α < 1 (α = 1 would mean the draft is never wrong; give "
                    "mean_accepted_tokens = gamma + 1 for that)"),
    _f("acceptance_by_position", "floats", None, "",
       "α_1..α_γ: probability that chain draft token k is accepted given tokens 1..k−1 were",
       allowed_text=f"1 to {MAX_RANKS} probabilities in [0, 1], at least gamma of them"),
    _f("mean_accepted_tokens", "float", None, "tokens",
       "τ: tokens gained per verification step, bonus token included (instead of α)", minimum=1.0,
       allowed_text="τ >= 1 (every verification step gains at least the bonus token)"),
    _f("batch_sync", "choice", "ragged", "",
       "ragged: each sequence keeps its own accepted tokens; lockstep: the batch advances by its minimum",
       choices=SYNC),
    _f("medusa_heads", "int", None, "heads",
       "Medusa heads on the target (draft_model=medusa): all run every step, and a tree is at most this deep",
       minimum=1, maximum=64, default_text="5 (the Medusa-1 Vicuna checkpoints)"),
    _f("tree_width", "int", None, "children", "children per node of a full tree (with tree_depth)",
       minimum=1, maximum=64),
    _f("tree_depth", "int", None, "levels", "levels of a full tree, or the depth bound of an optimal tree",
       minimum=1, maximum=64),
    _f("tree_nodes", "int", None, "nodes", "node budget: the tree of that many nodes with the most expected tokens",
       minimum=1, maximum=1024),
    _f("tree_shape", "choice", None, "",
       "how the tree is built; optimal_for_hardware searches every size up to tree_nodes", choices=TREE_SHAPES,
       default_text="from the shape fields given"),
    _f("tree_parents", "ints", None, "", "an explicit tree: node i's parent for i = 1..n (0 = the root)",
       allowed_text="node i's parent for i = 1..n, e.g. 0,0,1,1 (0 = the root)"),
    _f("rank_acceptance", "floats", None, "",
       "p_1..p_k: probability that the i-th ranked child is the accepted one", default_text="α(1−α)^(i−1) from α",
       allowed_text=f"1 to {MAX_RANKS} probabilities p_1..p_k in [0, 1] with Σ p_i <= 1 (the ranked "
                    "children's acceptances are mutually exclusive)"),
    _f("attention_kernel", "choice", "prefix_aware", "",
       "prefix_aware: a shared prefix or tree context read once; per_branch: once per branch; "
       "dense_masked: the full q × context block", choices=KERNELS),
    _f("n_branches", "int", 1, "branches", "branches per prompt (shared_prefix)", minimum=1, maximum=4096),
    _f("shared_prefix_len", "int", 0, "tokens", "prompt tokens shared by all branches (0: the whole prompt)",
       minimum=0),
    _f("power_mode", "text", None, "", "a power mode id of the hardware YAML (Jetson)",
       default_text="the device's default", allowed_text="a power mode id of the device"),
    _f("allreduce_algorithm", "choice", "auto", "",
       "tensor-parallel all-reduce; auto: the runtime's own (its tp_allreduce: NCCL's faster of ring and "
       "tree per message, or vLLM's custom peer-to-peer kernel); custom: that kernel where it applies",
       choices=ALLREDUCE),
)

BY_NAME: dict[str, FieldSpec] = {f.name: f for f in FIELDS}
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)
REQUIRED_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.required)

#: fields that describe a measurement or claim rather than the configuration (plus any ``target_*``)
META_FIELDS = ("id", "metric", "value", "values", "source", "text", "reliability", "notes", "unit",
               "source_locator", "runtime_note", "measured")


def help_rows() -> list[dict]:
    """One row per field: name, default, unit, allowed, help (``eval --help`` and the tables)."""
    return [{"field": f.name, "default": f.default_shown, "unit": f.unit, "allowed": f.allowed, "help": f.help}
            for f in FIELDS]


def help_text(width: int = 100) -> str:
    """The field list of ``costmodel eval --help``: name, default, unit, then the help."""
    import textwrap

    rows = help_rows()
    name_w = max(len(r["field"]) for r in rows)
    out = ["record fields (KEY=VALUE; default in brackets, then the unit):"]
    for r in rows:
        head = f"  {r['field']:<{name_w}}  [{r['default']}]" + (f" {r['unit']}" if r["unit"] else "")
        short = BY_NAME[r["field"]].short_allowed
        body = r["help"] + (f" ({short})" if short else "")
        out.append(head)
        out += textwrap.wrap(body, width=width, initial_indent=" " * 6, subsequent_indent=" " * 6,
                             break_on_hyphens=False)
    return "\n".join(out)


def markdown_table() -> str:
    """The field table of the README and docs/design.md."""
    def cell(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| field | default | unit | allowed | meaning |", "|---|---|---|---|---|"]
    for f in FIELDS:
        allowed = f.short_allowed or f.allowed
        lines.append(f"| `{f.name}` | {cell(f.default_shown)} | {f.unit} | {cell(allowed)} | {cell(f.help)} |")
    return "\n".join(lines)

"""Pictures (matplotlib, Agg backend): decision map, roofline, sweep. CLI: ``costmodel plot``.

* :func:`decision_map` — which strategy wins over batch size × context length for one model and
  device. Each strategy family is tuned per cell exactly as :func:`costmodel.analysis.recommend.recommend`
  does (γ = 1..8, tree budgets 2..64); the cell's colour is the winner, its shade the margin over the
  runner-up (light ≈ 1×, full colour ≥ 1.5×, the number printed in the cell); hatched grey = nothing fits.
* :func:`roofline` — the device's roofline (datasheet and achievable) with each operator of each phase
  (prefill, AR decode step, the record's draft and verification passes) placed at its arithmetic
  intensity (FLOP/byte) and achieved FLOP/s.
* :func:`sweep` — any output metric over one axis, one line per strategy (each tuned per point).
"""

from __future__ import annotations

import math

import numpy as np

from costmodel.errors import InputError

COLORS = {"autoregressive": "#4C72B0", "speculative": "#DD8452", "tree": "#55A868", "shared_prefix": "#8172B3"}
LABELS = {"autoregressive": "autoregressive", "speculative": "speculative (chain)", "tree": "tree",
          "shared_prefix": "shared prefix"}
PHASE_STYLE = {"prefill": ("o", "#C44E52"), "AR decode step": ("s", "#4C72B0"), "draft pass": ("^", "#DD8452"),
               "verification pass": ("D", "#55A868"), "shared-prefix decode step": ("v", "#8172B3")}
FULL_MARGIN = 1.5          # a cell is drawn in full colour when the winner leads the runner-up by this much
SHORT = {"norm_rope_residual": "norm", "qkv_proj": "qkv", "o_proj": "o", "ffn_activation": "act", "lm_head": "lm_head",
         "embedding": "embed", "attention": "attention", "ffn": "ffn", "moe_ffn": "moe", "medusa_heads": "medusa"}
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
DEFAULT_CONTEXTS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
#: the grids the default axes are cut from (powers of two)
WIDE_BATCHES = tuple(2 ** i for i in range(13))                 # 1 .. 4096
WIDE_CONTEXTS = tuple(2 ** i for i in range(7, 18))             # 128 .. 131072
MAX_CELLS_PER_AXIS = 10


OBJECTIVE_TEXT = {"tokens_per_s": "aggregate tokens/s", "tokens_per_s_per_seq": "tokens/s per sequence",
                  "time_per_output_token_s": "time per output token", "e2e_latency_s": "end-to-end latency",
                  "step_latency_s": "step latency"}


def save_figure(fig, output) -> None:
    """``fig`` to ``output`` (.png/.svg/.pdf) atomically: a temporary file renamed when complete."""
    from costmodel.inputs.outputs import atomic_path, check_output_path
    p = check_output_path(output, PLOT_TYPES, field="--output")
    with atomic_path(p) as tmp:
        fig.savefig(tmp, format=p.rsplit(".", 1)[-1].lower())


PLOT_TYPES = (".png", ".svg", ".pdf")


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _need(fields: dict, *keys):
    for k in keys:
        if fields.get(k) in (None, ""):
            raise InputError("missing required field", field=k, allowed="e.g. model=llama-2-7b hardware=a100-80gb")


def _hw_name(hw_id) -> str:
    from costmodel.inputs.hardware import load_hardware
    return load_hardware(hw_id).name


def _pick_metric(e: dict, metric: str, shape) -> np.ndarray:
    """The metric of each cell's best variant of one family (NaN where nothing fits)."""
    vals = []
    for r in e["results"]:
        v = r.get(metric)
        if v is None:
            vals.append(np.full(shape, np.nan))
            continue
        a = np.asarray(v)
        vals.append(np.broadcast_to(a.astype(float) if a.dtype != object else np.full(a.shape, np.nan), shape))
    stack = np.stack(vals)
    out = np.take_along_axis(stack, np.asarray(e["index"])[None], axis=0)[0]
    return np.where(np.isfinite(e["goodness"]), out, np.nan)


def _fields_with_alpha(fields: dict) -> tuple[dict, str]:
    from costmodel.analysis.recommend_variants import acceptance_of
    a, note = acceptance_of(fields)
    return fields, (f"α = {a:.2f}" + (" (assumed)" if note and "assumed" in note else ""))


# --------------------------------------------------------------------------- decision map
def fitting_axes(fields: dict) -> tuple[tuple, tuple]:
    """Default decision-map axes: the powers of two where autoregressive decoding fits on the device.

    One vectorised evaluation of AR over WIDE_BATCHES × WIDE_CONTEXTS gives ``fits``; the batch axis
    runs from 1 to the largest batch that fits at the shortest context, the context axis from 128 to
    the longest context that fits at batch 1 (memory runs out along B·L ≈ constant, so the corner
    beyond that diagonal still shows where), thinned to at most MAX_CELLS_PER_AXIS values. When nothing fits at all, the
    classic defaults (the map then says so in every cell).
    """
    from costmodel.engine.evaluate import evaluate_arrays
    from costmodel.inputs.record import parse_record
    f = {k: v for k, v in fields.items() if k not in ("batch_size", "prompt_len")}
    rec = parse_record(dict(f, strategy="autoregressive", batch_size=1, prompt_len=1,
                            **{k: None for k in ("draft_model", "gamma", "acceptance_rate", "mean_accepted_tokens",
                                                 "tree_nodes", "tree_width", "tree_depth", "tree_shape")
                               if k in f}), allow_meta=True)
    wide = within_max_context(WIDE_CONTEXTS, rec)
    B = np.asarray(WIDE_BATCHES, dtype=float)[None, :]
    P = np.asarray(wide, dtype=float)[:, None]
    fits = np.broadcast_to(np.asarray(evaluate_arrays(rec, {"batch_size": B, "prompt_len": P},
                                                      with_baseline=False)["fits"], dtype=bool),
                           (P.size, B.size))
    if not fits.any():
        return DEFAULT_BATCHES, within_max_context(DEFAULT_CONTEXTS, rec)
    nb = int(np.flatnonzero(fits.any(axis=0))[-1]) + 1        # up to the last column with a fitting cell
    nc = int(np.flatnonzero(fits.any(axis=1))[-1]) + 1
    return _thin(WIDE_BATCHES[:nb]), _thin(wide[:nc])


def within_max_context(contexts: tuple, rec) -> tuple:
    """The prompt lengths P of ``contexts`` with P + gen_len within the model's max_context (the
    longest context it supports; a longer record is an input error), the first one at least."""
    from costmodel.inputs.model import load_model
    limit = load_model(rec.model).max_context
    if limit is None:
        return tuple(contexts)
    return tuple(c for c in contexts if c + rec.gen_len <= limit) or (max(1, limit - rec.gen_len),)


def _thin(values: tuple) -> tuple:
    """At most MAX_CELLS_PER_AXIS values, keeping both ends (every 2nd, 3rd, ... power of two)."""
    step = max(1, math.ceil((len(values) - 1) / (MAX_CELLS_PER_AXIS - 1)))
    out = list(values[::step])
    if out[-1] != values[-1]:
        out.append(values[-1])
    return tuple(out)


def decision_map_data(fields: dict, batch_sizes=DEFAULT_BATCHES, contexts=None,
                      objective: str = "tokens_per_s") -> dict:
    """Winner, margin and per-family objective on the batch × context grid (rows = contexts;
    default: DEFAULT_CONTEXTS within the model's max_context)."""
    from costmodel.analysis.recommend_variants import evaluate_families
    from costmodel.inputs.record import parse_record
    _need(fields, "model", "hardware")
    f = dict(fields)
    f.setdefault("batch_size", 1)
    f.setdefault("prompt_len", 1)
    if contexts is None:
        contexts = within_max_context(DEFAULT_CONTEXTS, parse_record(dict(f, prompt_len=1), allow_meta=True))
    B = np.asarray(batch_sizes, dtype=float)[None, :]
    P = np.asarray(contexts, dtype=float)[:, None]
    ev = evaluate_families(f, f["hardware"], {"batch_size": B, "prompt_len": P}, objective=objective)
    names = list(ev)
    shape = (len(contexts), len(batch_sizes))
    goods = np.stack([np.broadcast_to(ev[k]["goodness"], shape) for k in names])
    order = np.argsort(-goods, axis=0)
    best = order[0]
    g1 = np.take_along_axis(goods, order[:1], axis=0)[0]
    g2 = np.take_along_axis(goods, order[1:2], axis=0)[0] if len(names) > 1 else np.full(shape, -np.inf)
    fits = np.isfinite(g1)
    with np.errstate(divide="ignore", invalid="ignore"):
        margin = np.where(np.isfinite(g2) & (g2 > 0), g1 / g2, np.inf)
    configs = np.empty(shape, dtype=object)
    for i in range(shape[0]):
        for j in range(shape[1]):
            k = names[best[i, j]]
            idx = int(np.broadcast_to(ev[k]["index"], shape)[i, j])
            configs[i, j] = ev[k]["configs"][idx]
    return {"names": names, "winner": best, "margin": margin, "fits": fits, "configs": configs,
            "batch_sizes": list(batch_sizes), "contexts": list(contexts), "objective": objective,
            "goodness": {k: goods[n] for n, k in enumerate(names)}}


def decision_map(fields: dict, output: str, batch_sizes=None, contexts=None,
                 objective: str = "tokens_per_s") -> dict:
    """Write the decision map PNG to ``output``; returns the data (see :func:`decision_map_data`).
    Axes not given default to the region where the model fits on the device (:func:`fitting_axes`)."""
    from matplotlib.patches import Patch

    from costmodel.analysis.recommend_variants import OBJECTIVES
    plt = _plt()
    fields, alpha_txt = _fields_with_alpha(fields)
    if batch_sizes is None or contexts is None:
        _need(fields, "model", "hardware")
        auto_b, auto_c = fitting_axes(fields)
        batch_sizes = auto_b if batch_sizes is None else batch_sizes
        contexts = auto_c if contexts is None else contexts
    d = decision_map_data(fields, batch_sizes, contexts, objective)
    names, win, margin, fits = d["names"], d["winner"], d["margin"], d["fits"]
    ny, nx = win.shape
    img = _map_colours(names, win, margin, fits)
    fig, ax = plt.subplots(figsize=(1.0 * nx + 3.2, 0.62 * ny + 2.4), dpi=120)
    ax.imshow(img, origin="lower", aspect="auto", interpolation="nearest")
    for i in range(ny):
        for j in range(nx):
            if not fits[i, j]:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="#999999",
                                           linewidth=0))
                continue
            ax.text(j, i, _cell_text(margin[i, j], d["configs"][i, j]), ha="center", va="center", fontsize=7,
                    color="black")
    ax.set_xticks(range(nx), [str(b) for b in d["batch_sizes"]])
    ax.set_yticks(range(ny), [f"{c:,}" for c in d["contexts"]])
    ax.set_xlabel("batch size (sequences decoding together)")
    ax.set_ylabel("context length when decoding starts (tokens)")
    gen = fields.get("gen_len", 128)
    ax.set_title(f"Which strategy wins: {fields['model']} on {_hw_name(fields['hardware'])}\n"
                 f"best = {'highest' if OBJECTIVES[objective] > 0 else 'lowest'} {OBJECTIVE_TEXT[objective]}; {alpha_txt}; {gen} generated tokens; "
                 f"number = margin over the runner-up", fontsize=10)
    handles = [Patch(facecolor=COLORS[k], label=LABELS[k]) for k in names]
    handles.append(Patch(facecolor=(0.85, 0.85, 0.85), hatch="///", edgecolor="#999999", label="nothing fits"))
    handles.append(Patch(facecolor="white", edgecolor="#bbbbbb", label=f"paler = smaller margin\n(full colour ≥ {FULL_MARGIN:g}×)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    save_figure(fig, output)
    plt.close(fig)
    return d


def _map_colours(names: list, win, margin, fits) -> np.ndarray:
    """RGB per cell: the winner's colour, paler the smaller its margin over the runner-up (full colour
    from ``FULL_MARGIN``×: shade = 0.3 + 0.7 · min(1, ln m / ln FULL_MARGIN)); grey where nothing fits."""
    from matplotlib.colors import to_rgb
    ny, nx = win.shape
    img = np.ones((ny, nx, 3))
    for i in range(ny):
        for j in range(nx):
            if not fits[i, j]:
                img[i, j] = (0.85, 0.85, 0.85)
                continue
            base = np.array(to_rgb(COLORS[names[win[i, j]]]))
            m = margin[i, j]
            t = 1.0 if not math.isfinite(m) else min(1.0, max(0.0, math.log(m) / math.log(FULL_MARGIN)))
            shade = 0.3 + 0.7 * t
            img[i, j] = 1.0 - shade * (1.0 - base)
    return img


def _cell_text(m: float, cfg: dict) -> str:
    """A cell's text: the margin over the runner-up ("only fit" when alone), and the winner's γ or tree."""
    sub = ""
    if "gamma" in cfg:
        sub = f"γ={cfg['gamma']}"
    elif "tree_nodes" in cfg:
        sub = f"{cfg.get('draft_model', '')[:6]} T={cfg['tree_nodes']}"
    return ("only fit" if not math.isfinite(m) else f"{m:.2f}×") + (f"\n{sub}" if sub else "")


# --------------------------------------------------------------------------- roofline
#: the engine's passes each roofline phase shows (costmodel.engine.evaluate.evaluate_passes)
ROOFLINE_PHASES = (("prefill", "prefill"), ("AR decode step", "ar_decode"), ("shared-prefix decode step", "decode"),
                   ("draft pass", "draft"), ("verification pass", "verify"))


def roofline_data(fields: dict) -> dict:
    """Operators of each phase: (phase, name, FLOPs, HBM bytes, seconds) per device, plus the device's
    peaks. The phases are the passes :func:`costmodel.engine.evaluate.evaluate_passes` priced for the
    record (the draft phase: every draft pass of one step); ``phase_time_s`` holds each pass's time."""
    from costmodel.engine.evaluate import evaluate_passes
    from costmodel.inputs.record import parse_record
    _need(fields, "model", "hardware", "batch_size", "prompt_len")
    rec = parse_record(fields, allow_meta=True)
    passes = evaluate_passes(rec)
    ex = passes["prefill"].ex
    phases = [(phase, passes[key].cost, passes[key].ex.stage_devices) for phase, key in ROOFLINE_PHASES
              if key in passes and not (key == "decode" and rec.strategy == "autoregressive")]
    ops = []
    for phase, cost, tp in phases:
        for name, fl, hb, t, bound in cost.ops:
            fl, hb, t = (float(np.ravel(x)[0]) for x in (fl, hb, t))
            if hb <= 0 or fl <= 0 or t <= 0:
                continue
            ops.append({"phase": phase, "name": name, "flops": fl / tp, "hbm_bytes": hb / tp, "time_s": t,
                        "intensity": fl / hb, "flops_per_s": fl / tp / t, "bound": str(np.ravel(bound)[0])})
    return {"ops": ops, "phase_time_s": {phase: float(np.ravel(cost.time_s)[0]) for phase, cost, _ in phases},
            "peak_flops": ex.hw.matrix_peak(ex.compute_dtype),
            "achievable_flops": ex.matrix_flops_per_s, "peak_bw": ex.hw.bandwidth_bytes_per_s,
            "achievable_bw": ex.hbm_bytes_per_s, "vector_flops": ex.vector_flops_per_s, "hw_name": ex.hw.name,
            "record": rec}


def roofline(fields: dict, output: str) -> dict:
    """Write the roofline PNG to ``output``; returns the data (see :func:`roofline_data`)."""
    plt = _plt()
    d = roofline_data(fields)
    rec = d["record"]
    fig, ax = plt.subplots(figsize=(9.5, 6.6), dpi=120)
    ai = np.logspace(-1, 4, 400)
    for peak_f, bw, style, lab in ((d["peak_flops"], d["peak_bw"], "-", "datasheet peak"),
                                   (d["achievable_flops"], d["achievable_bw"], "--", "achievable (measured efficiency)")):
        ax.plot(ai, np.minimum(peak_f, ai * bw) / 1e12, style, color="black", lw=1.4 if style == "-" else 1.0,
                label=f"roofline, {lab}")
    ridge = d["achievable_flops"] / d["achievable_bw"]
    ax.axvline(ridge, color="#999999", lw=0.8, ls=":")
    ax.text(ridge * 1.08, d["achievable_flops"] / 1e12 * 0.06, f"ridge {ridge:.0f} FLOP/B", fontsize=8,
            color="#666666", rotation=90, va="bottom")
    seen = set()
    for o in d["ops"]:
        marker, color = PHASE_STYLE.get(o["phase"], ("o", "gray"))
        lab = o["phase"] if o["phase"] not in seen else None
        seen.add(o["phase"])
        size = 30 + 250 * min(1.0, o["time_s"] / max(x["time_s"] for x in d["ops"] if x["phase"] == o["phase"]))
        ax.scatter(o["intensity"], o["flops_per_s"] / 1e12, marker=marker, s=size, color=color, alpha=0.75,
                   edgecolor="black", linewidth=0.5, label=lab, zorder=3)
    labels = _cluster_labels(d["ops"])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(0.1, max([1e4] + [o["intensity"] * 4 for o in d["ops"]]))
    lo = min([o["flops_per_s"] for o in d["ops"]] + [d["peak_flops"] * 1e-4]) / 1e12
    ax.set_ylim(max(lo * 0.5, 1e-4), d["peak_flops"] / 1e12 * 2)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM traffic)")
    ax.set_ylabel("achieved throughput (TFLOP/s)")
    strat = rec.strategy + (f", draft {rec.draft_model}" if rec.draft_model else "") + (
        f", γ={rec.gamma}" if rec.strategy == "speculative" else "") + (
        f", {rec.tree_nodes} nodes" if rec.strategy == "tree" and rec.tree_nodes else "")
    ax.set_title(f"Roofline of {d['hw_name']}: {rec.model}, batch {rec.batch_size}, prompt {rec.prompt_len}\n"
                 f"operators of each phase ({strat})\nmarker size = share of the phase's time; labelled: operators taking ≥ 8% of it", fontsize=10)
    ax.grid(True, which="major", ls=":", lw=0.5)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    d["label_boxes"] = place_labels(fig, ax, sorted(labels, key=lambda x: -x[0]))
    save_figure(fig, output)
    plt.close(fig)
    return d


def _cluster_labels(ops_all: list) -> list:
    """One label per cluster of operators at about the same intensity (within 1.3×), per phase, for the
    clusters taking at least 8 % of their phase's time: (time share, names, intensity, TFLOP/s, colour)."""
    labels = []
    for phase in dict.fromkeys(o["phase"] for o in ops_all):
        ops = sorted((o for o in ops_all if o["phase"] == phase), key=lambda o: o["intensity"])
        clusters = []
        for o in ops:
            if clusters and o["intensity"] / clusters[-1][-1]["intensity"] < 1.3:
                clusters[-1].append(o)
            else:
                clusters.append([o])
        _, color = PHASE_STYLE.get(phase, ("o", "gray"))
        total = sum(o["time_s"] for o in ops)
        for cl in clusters:
            t_cl = sum(o["time_s"] for o in cl)
            if t_cl < 0.08 * total:       # label only what takes time
                continue
            names = ", ".join(dict.fromkeys(SHORT.get(o["name"], o["name"]) for o in cl))
            top = max(cl, key=lambda o: o["time_s"])
            labels.append((t_cl / total, names, top["intensity"], top["flops_per_s"] / 1e12, color))
    return labels


#: where a label may go around its point (points: right/left, above/below, then further out)
LABEL_OFFSETS = [(7, 5), (7, -13), (-7, 5), (-7, -13), (7, 16), (-7, 16), (7, -24), (-7, -24), (12, 28),
                 (-12, 28), (12, -36), (-12, -36), (16, 40), (-16, -48)]


def place_labels(fig, ax, labels) -> list:
    """Annotate each (weight, text, x, y, colour) at the first offset in LABEL_OFFSETS where its box
    overlaps no label placed before it and no marker, inside the axes (the heaviest labels first; a line
    joins a label to its point when it sits away from it). Returns the labels' boxes in display pixels
    (x0, y0, x1, y1)."""
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = []
    for coll in ax.collections:                        # scatter markers as obstacles
        offs = coll.get_offsets()
        if len(offs) == 0:
            continue
        sizes = np.broadcast_to(np.asarray(coll.get_sizes(), dtype=float), (len(offs),))
        for (x, y), sz in zip(ax.transData.transform(offs), sizes):
            r = 0.5 * math.sqrt(sz) * fig.dpi / 72.0
            taken.append(Bbox.from_extents(x - r, y - r, x + r, y + r))
    if ax.get_legend() is not None:
        taken.append(ax.get_legend().get_window_extent(renderer))
    boxes = []
    for _, text, x, y, color in labels:
        chosen = None
        for k, (dx, dy) in enumerate(LABEL_OFFSETS):
            far = k >= 4
            t = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=7, color=color,
                            ha="left" if dx > 0 else "right",
                            arrowprops=dict(arrowstyle="-", color=color, lw=0.5) if far else None)
            t.get_window_extent(renderer)                     # places the text at its offset
            bb = Text.get_window_extent(t, renderer)          # the text alone, not its connecting line
            inside = frame.x0 <= bb.x0 and bb.x1 <= frame.x1 and frame.y0 <= bb.y0 and bb.y1 <= frame.y1
            if inside and not any(bb.overlaps(o) for o in taken):
                chosen = bb
                break
            t.remove()
        if chosen is None:                             # nowhere free: the first spot, as before
            dx, dy = LABEL_OFFSETS[0]
            t = ax.annotate(text, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=7, color=color)
            t.get_window_extent(renderer)
            chosen = Text.get_window_extent(t, renderer)
        taken.append(chosen)
        boxes.append((chosen.x0, chosen.y0, chosen.x1, chosen.y1))
    return boxes


# --------------------------------------------------------------------------- sweep
def sweep_data(fields: dict, axis: str, values: list, metric: str = "tokens_per_s",
               objective: str = "tokens_per_s", strategies=None) -> dict:
    """Per strategy family (each tuned per point for ``objective``): ``metric`` at each axis value."""
    from costmodel.engine.evaluate import NUMERIC_AXES
    from costmodel.analysis.recommend_variants import evaluate_families, variants
    _need(fields, "model", "hardware") if axis not in ("model", "hardware") else None
    out = {}
    if axis in NUMERIC_AXES and axis not in ("acceptance_rate", "mean_accepted_tokens"):
        try:
            arr = np.asarray([float(v) for v in values])
        except ValueError:
            raise InputError("the sweep axis needs numbers", field=axis, value=values) from None
        f = dict(fields)
        f.setdefault(axis, arr[0])
        ev = evaluate_families(f, f["hardware"], {axis: arr}, objective=objective)
        for k, e in ev.items():
            out[k] = _pick_metric(e, metric, arr.shape)
        x = arr
    else:
        x = list(values)
        cols = {}
        for v in values:
            f = dict(fields)
            f[axis] = v
            _need(f, "model", "hardware")
            fam, _ = variants(f)
            ev = evaluate_families(f, f["hardware"], objective=objective, fam=fam)
            for k, e in ev.items():
                cols.setdefault(k, []).append(float(_pick_metric(e, metric, ())))
        out = {k: np.asarray(v) for k, v in cols.items()}
        try:
            x = np.asarray([float(v) for v in values])
        except ValueError:
            pass
    if strategies:
        out = {k: v for k, v in out.items() if k in strategies}
    bad = [k for k in out if np.all(np.isnan(out[k]))]
    if len(bad) == len(out):
        raise InputError(f"no strategy has metric {metric!r} at any point (or nothing fits)", field="metric")
    return {"x": x, "series": out, "axis": axis, "metric": metric}


def _metric_label(metric: str) -> tuple[str, float]:
    if metric.endswith("_bytes"):
        return metric.replace("_bytes", "").replace("_", " ") + " (GB)", 1e-9
    if metric.endswith("_s") and not metric.endswith("per_s"):
        return metric[:-2].replace("_", " ") + " (ms)", 1e3
    if metric == "tokens_per_s":
        return "aggregate throughput (tokens/s)", 1.0
    if metric == "tokens_per_s_per_seq":
        return "tokens/s per sequence", 1.0
    if metric == "speedup_vs_ar":
        return "speedup over autoregressive (×)", 1.0
    if metric.startswith("flops"):
        return metric.replace("_", " ") + " (TFLOP)", 1e-12
    return metric.replace("_", " "), 1.0


def sweep(fields: dict, axis: str, values: list, output: str, metric: str = "tokens_per_s",
          objective: str = "tokens_per_s", strategies=None) -> dict:
    """Write the sweep PNG to ``output``; returns the data (see :func:`sweep_data`)."""
    plt = _plt()
    fields, alpha_txt = _fields_with_alpha(fields)
    d = sweep_data(fields, axis, values, metric, objective, strategies)
    ylab, scale = _metric_label(metric)
    fig, ax = plt.subplots(figsize=(8.5, 5.2), dpi=120)
    x = d["x"]
    numeric = isinstance(x, np.ndarray) and x.dtype.kind == "f"
    if numeric:
        for k, y in d["series"].items():
            ax.plot(x, y * scale, marker="o", ms=4, color=COLORS[k], label=LABELS[k])
        if np.min(x) > 0 and np.max(x) / np.min(x) >= 20:
            ax.set_xscale("log", base=2 if all(float(v).is_integer() for v in x) else 10)
            ax.set_xticks(x, [f"{v:g}" for v in x])
    else:
        n = len(d["series"])
        w = 0.8 / n
        for i, (k, y) in enumerate(d["series"].items()):
            ax.bar(np.arange(len(x)) + (i - (n - 1) / 2) * w, y * scale, width=w, color=COLORS[k], label=LABELS[k])
        ax.set_xticks(range(len(x)), [str(v) for v in x], rotation=30, ha="right")
    ax.set_xlabel(axis.replace("_", " "))
    ax.set_ylabel(ylab)
    where = fields.get("hardware") if axis != "hardware" else "each device"
    ax.set_title(f"{ylab} over {axis.replace('_', ' ')}: {fields.get('model', '')} on {where}\n"
                 f"each strategy tuned per point for {OBJECTIVE_TEXT[objective]}; {alpha_txt}; "
                 f"gaps = does not fit", fontsize=10)
    ax.grid(True, ls=":", lw=0.5)
    if numeric:
        ax.legend(fontsize=8, loc="best")
    else:
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    save_figure(fig, output)
    plt.close(fig)
    return d

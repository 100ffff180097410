"""Serving pictures (matplotlib, Agg), each written atomically (a temporary file, then renamed):

* :func:`latency_vs_rate`: TTFT, TPOT and inter-token latency (over tokens) p50 / p90 / p99 against
  request rate.
* :func:`frontier_plot`: tokens/s per device against tokens/s per user, every point and the frontier.
"""

from __future__ import annotations


def _save(fig, path: str):
    from costmodel.inputs.outputs import atomic_path, check_output_path
    p = check_output_path(path, (".png", ".svg", ".pdf"), field="--plot")
    with atomic_path(p) as tmp:
        fig.savefig(tmp, dpi=120, bbox_inches="tight", format=p.rsplit(".", 1)[-1].lower())


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def latency_vs_rate(results: list, path: str, title: str = ""):
    """``results``: serve() outputs at increasing ``request_rate``."""
    plt = _plt()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    rates = [r["request_rate"] for r in results]
    for ax, key, label in ((axes[0], "ttft_s", "TTFT (s)"), (axes[1], "tpot_s", "TPOT (ms)"),
                           (axes[2], "itl_s", "inter-token latency (ms)")):
        scale = 1e3 if key != "ttft_s" else 1.0
        for p, style in (("p50", "-"), ("p90", "--"), ("p99", ":")):
            ax.plot(rates, [(r[key][p] or float("nan")) * scale for r in results], style, marker="o", label=p)
        ax.set_xlabel("request rate (requests/s)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend()
    axes[0].set_yscale("log")
    fig.suptitle(title)
    _save(fig, path)
    plt.close(fig)


def frontier_plot(front: dict, path: str, title: str = ""):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for tp in sorted({p["tensor_parallel"] for p in front["points"]}):
        pts = [p for p in front["points"] if p["tensor_parallel"] == tp]
        ax.scatter([p["tokens_per_s_per_user"] for p in pts], [p["tokens_per_s_per_device"] for p in pts],
                   label=f"TP={tp}", s=18)
    f = front["frontier"]
    ax.plot([p["tokens_per_s_per_user"] for p in f], [p["tokens_per_s_per_device"] for p in f], "k-", lw=1,
            label="frontier")
    ax.set_xlabel("tokens/s per user")
    ax.set_ylabel("tokens/s per device")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    _save(fig, path)
    plt.close(fig)

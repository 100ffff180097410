"""Sweep -> pandas DataFrame -> plot: aggregate tokens/s of autoregressive and speculative decoding
over batch size for Llama-2-7B on an A100-80GB.  Run:  python examples/sweep_to_plot.py [OUTPUT_DIR]
"""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")                      # write files, no window
import matplotlib.pyplot as plt  # noqa: E402

import costmodel  # noqa: E402

out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
base = {"model": "llama-2-7b", "hardware": "a100-80gb", "prompt_len": 512,
        "draft_model": "llama-68m", "gamma": 4, "acceptance_rate": 0.7}
df = costmodel.sweep(base, batch_size=[1, 2, 4, 8, 16, 32, 64, 128],
                     strategy=["autoregressive", "speculative"])      # one row per (batch, strategy)

table = df.pivot(index="batch_size", columns="strategy", values="tokens_per_s")
table["speculative / AR"] = table["speculative"] / table["autoregressive"]
print(table.round(2).to_string())

fig, ax = plt.subplots(figsize=(6, 4))
for strategy, rows in df.groupby("strategy", observed=True):   # text columns are categories
    ax.plot(rows["batch_size"], rows["tokens_per_s"], marker="o", label=strategy)
ax.set_xscale("log", base=2)
ax.set_xlabel("batch size (sequences)")
ax.set_ylabel("tokens/s, all sequences together")
ax.set_title("Llama-2-7B on A100-80GB, prompt 512, α = 0.7")
ax.legend()
fig.tight_layout()
png = out_dir / "sweep_tokens_per_s.png"
fig.savefig(png)
df.to_csv(out_dir / "sweep.csv", index=False)
print(f"wrote {png} and {out_dir / 'sweep.csv'}")

"""Compare ``costmodel serve`` with the published load-curve points in validation/load_curves.csv.

    python validation/serve_load_curves.py [--max-requests N]

Every row is predicted with the model as it stands (no parameter is fitted to these rows, so every
error is held out). A row whose model, hardware or workload the model cannot take is listed as
skipped with the reason. Prints per-row errors and the median / p90 absolute relative error by metric;
``--report`` writes them into the "Load curves" section of validation/REPORT.md.

Engine settings each row ran with (not fitted; from the row's notes and the engines' sources):

* vLLM rows run under the engine version they name (``runtime=vllm@0.6``; runtimes/vllm.yaml
  ``versions``): its host work per scheduler invocation and its scheduler defaults (0.5/0.6: V0
  engine, chunked prefill off, ``max_num_batched_tokens = max(max_model_len, 2048)``, 256 sequences).
  A 2024 vLLM publication without a version runs as 0.6 (the V0 engine of that year).
  ``--num-scheduler-steps N`` and ``--max_model_len`` are taken from the notes when given.
* SGLang rows keep ``runtime=vllm`` at its default version for the kernels, as the CSV maps them (no
  SGLang kernel profile), and run SGLang's own scheduler defaults
  (:func:`costmodel.serving.engines.sglang_scheduler`: up to 2048…4096 running requests from the KV
  pool instead of vLLM's 256, prefill batches of at most 8192 tokens run alone). The KV pool is the
  simulator's own capacity for the deployment.
* ShareGPT rows that give no lengths: the vLLM v0.6.0 post's ShareGPT sample (500 prompts, mean
  202 input / 179 output tokens, stated in the post) — an assumption, said so in the output.
* ShareGPT rows state mean lengths, but the benchmark sends each sampled conversation's own lengths
  (``benchmark_serving`` / ``sglang.bench_serving``: the first human turn as the prompt, the first
  reply's token count as the output length). Rows without a ``gen_len_dist`` therefore draw output
  lengths as ``lognormal:MEAN:SHAREGPT_OUTPUT_CV``. The CV is the one the DataCrunch SGLang records
  of the same sampler imply (raw jsonl, ShareGPT lines at 4 and 8 req/s: mean / median E2E latency
  3201.5 / 1988.6 ms and 5302.6 / 3291.8 ms, both 1.61; at light load E2E ≈ output tokens × ITL, and a
  lognormal's mean / median is sqrt(1 + CV²), so CV = sqrt(1.61² − 1) = 1.26). Prompt lengths stay at
  their mean (no published spread; the prefill is linear in them).
* ITL: AIPerf / genai-perf rows (NIM) average each request's (E2E − TTFT) / (output − 1), the
  simulator's TPOT; ``benchmark_serving`` rows pool every inter-token gap, the simulator's
  token-weighted ITL (:func:`itl_is_per_request`).
* Rows listed in validation/excluded_load_curves.csv are not predicted: the measurement is not what
  the row's fields describe (the reason is given per row and in the report).
* As many requests as the benchmark sent (``num_requests``); where the source gives no count,
  vLLM's ``benchmark_serving`` default of 1000 prompts, or 4 × the clients of a closed loop (at least 200).
"""

import argparse
import math
import os
import re
import sys

import pandas as pd

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import costmodel  # noqa: E402
from costmodel.errors import InputError  # noqa: E402

RECORD_COLS = ("model", "hardware", "n_devices", "tensor_parallel", "runtime", "weight_dtype", "kv_dtype", "strategy",
               "draft_model", "gamma", "acceptance_rate", "mean_accepted_tokens")
WORKLOAD_COLS = ("prompt_len", "gen_len", "prompt_len_dist", "gen_len_dist", "request_rate", "max_concurrency",
                 "num_requests", "max_num_seqs")


SHAREGPT_DEFAULT = (202, 179)       # vLLM v0.6.0 post, 'Dataset': ShareGPT, 500 prompts, mean in/out
#: ShareGPT output-length CV: sqrt((mean/median E2E)² − 1) of the DataCrunch ShareGPT records (docstring)
SHAREGPT_OUTPUT_CV = 1.26
V0_YEARS = ("2024",)
BENCHMARK_SERVING_PROMPTS = 1000    # vLLM benchmarks/benchmark_serving.py --num-prompts default


def engine_settings(row) -> tuple[dict, list]:
    """(record/workload fields, assumptions) for the engine a row ran on (module docstring)."""
    notes = str(row.get("notes") or "")
    wl, said = {}, []
    version = str(row.get("runtime_version") or "")
    version = "" if version == "nan" else version
    sglang = is_sglang(row)
    if row.get("runtime") == "vllm" and not sglang:
        if not version and any(y in str(row.get("publication")) for y in V0_YEARS):
            version = "0.6"
            said.append("vLLM version not stated (2024): 0.6 assumed")
        if version:
            wl["runtime"] = f"vllm@{version}"
        m = re.search(r"--num-scheduler-steps[ =](\d+)", notes)
        if m:
            wl["num_scheduler_steps"] = int(m.group(1))
        m = re.search(r"--max[_-]model[_-]len[ =](\d+)", notes)
        if m and version.startswith(("0.5", "0.6")):
            wl["max_num_batched_tokens"] = max(int(m.group(1)), 2048)
    if str(row.get("dataset")).lower() == "sharegpt" and pd.isna(row.get("prompt_len")) and \
            pd.isna(row.get("prompt_len_dist")):
        wl["prompt_len"], wl["gen_len"] = SHAREGPT_DEFAULT
        said.append("ShareGPT lengths not given: 202/179 assumed")
    if str(row.get("dataset")).lower() == "sharegpt" and pd.isna(row.get("gen_len_dist")):
        mean_out = wl.get("gen_len", row.get("gen_len"))
        wl["gen_len_dist"] = f"lognormal:{float(mean_out):g}:{SHAREGPT_OUTPUT_CV:g}"
        said.append(f"ShareGPT output lengths drawn lognormal, mean {float(mean_out):g}, CV {SHAREGPT_OUTPUT_CV:g}")
    return wl, said


def is_sglang(row) -> bool:
    """An SGLang row (the CSV maps SGLang to ``runtime=vllm`` and says so in ``notes``)."""
    notes = str(row.get("notes") or "")
    return "SGLang" in notes and "runtime mapped to vllm" in notes


def itl_is_per_request(row) -> bool:
    """Whether a row's ITL is AIPerf / genai-perf's: per request (E2E − TTFT) / (output tokens − 1),
    then averaged over requests (NIM benchmarking guide, 'Metrics') — the simulator's ``tpot_s``.
    Otherwise (``vllm bench serve`` / ``benchmark_serving``, ``sglang.bench_serving``) ITL pools every
    gap between streamed tokens of every request, so long requests weigh by their length: the
    simulator's token-weighted ``itl_s``."""
    src = str(row.get("source") or "")
    return "AIPerf" in src or "genai-perf" in src


def predict(row, max_requests):
    rec = {c: row[c] for c in RECORD_COLS if c in row and not pd.isna(row[c])}
    for c in ("n_devices", "tensor_parallel", "gamma"):
        if c in rec:
            rec[c] = int(rec[c])
    wl = {c: row[c] for c in WORKLOAD_COLS if c in row and not pd.isna(row[c])}
    extra, _ = engine_settings(row)
    if "runtime" in extra:
        rec["runtime"] = extra.pop("runtime")
    wl.update({k: v for k, v in extra.items() if k not in wl})
    for c in ("prompt_len", "gen_len", "max_concurrency", "num_requests", "max_num_seqs"):
        if c in wl:
            wl[c] = int(wl[c])
    arrival = row.get("arrival")
    if arrival == "all_at_once" or (arrival == "closed_loop" and "request_rate" not in wl):
        wl["request_rate"] = math.inf
    n = wl.get("num_requests") or (max(200, 4 * wl["max_concurrency"]) if wl.get("max_concurrency")
                                    else BENCHMARK_SERVING_PROMPTS)
    wl["num_requests"] = int(min(n, max_requests or n))
    if is_sglang(row) and "max_num_seqs" not in wl:
        from costmodel.inputs.model import load_model
        from costmodel.serving.engines import SGLANG_CHUNKED_PREFILL_SIZE, sglang_scheduler
        probe = {**wl, "num_requests": 1, "max_num_batched_tokens": SGLANG_CHUNKED_PREFILL_SIZE}
        pool = costmodel.serve(rec, **probe)["kv_capacity_tokens"]
        wl.update(sglang_scheduler(pool, load_model(rec["model"]).max_context))
    res = costmodel.serve(rec, **wl)
    metric = row["metric"]
    for stat in ("mean", "p50", "p90", "p99"):
        if metric.endswith("_" + stat):
            base = metric[: -len(stat) - 1]
            if base == "itl_s" and itl_is_per_request(row):
                base = "tpot_s"
            return res[base][stat]
    return res[metric]


START, END = "<!-- load-curves:start -->", "<!-- load-curves:end -->"


EXCLUDED = os.path.join(os.path.dirname(__file__), "excluded_load_curves.csv")


def excluded_rows(path: str = EXCLUDED) -> dict:
    """{id: reason} of the rows excluded from the comparison (validation/excluded_load_curves.csv)."""
    if not os.path.exists(path):
        return {}
    e = pd.read_csv(path)
    return dict(zip(e["id"], e["reason"]))


def report_section(out, skipped, max_requests, excluded=None) -> str:
    """Markdown for the "Load curves" section of validation/REPORT.md."""
    lines = [START, "## Load curves (serving under load, held out)", "",
             "Generated by `python validation/serve_load_curves.py --report` from validation/load_curves.csv "
             "(published TTFT / TPOT / E2E / throughput points under a request stream; "
             + (f"{max_requests} simulated requests per point at most" if max_requests else
                "as many simulated requests as each benchmark sent") + "). Protocol: nothing is fitted to these rows — every figure comes from the "
             "model as calibrated on validation/measurements.csv plus the engine settings each row states "
             "(see the script's docstring), so every error below is held out. Rows whose model is not in the zoo "
             "are skipped and counted.", ""]
    if len(out):
        n_ex = len(excluded or {})
        lines += [f"Expressible: {len(out)} of {len(out) + len(skipped)} rows"
                  + (f" ({n_ex} more excluded, listed below)" if n_ex else "") + "; median |error| "
                  f"{out['abs'].median():.1%}, p90 {out['abs'].quantile(0.9):.1%}.", "",
                  "| metric | n | median abs error | p90 |", "|---|---|---|---|"]
        for m, g in out.groupby("metric")["abs"]:
            lines.append(f"| {m} | {len(g)} | {g.median():.1%} | {g.quantile(0.9):.1%} |")
        lines += ["", "| publication | n | median abs error | median signed error |", "|---|---|---|---|"]
        for pub, g in out.groupby("publication"):
            lines.append(f"| {pub} | {len(g)} | {g['abs'].median():.1%} | {g['rel_error'].median():+.1%} |")
        lines += ["", "| publication | metric | n | median abs error | p90 | median signed error |",
                  "|---|---|---|---|---|---|"]
        for (pub, m), g in out.groupby(["publication", "metric"]):
            lines.append(f"| {pub} | {m} | {len(g)} | {g['abs'].median():.1%} | {g['abs'].quantile(0.9):.1%} | "
                         f"{g['rel_error'].median():+.1%} |")
        lines += ["", "| id | publication | metric | measured | predicted | error |", "|---|---|---|---|---|---|"]
        for _, r in out.iterrows():
            lines.append(f"| {r['id']} | {r['publication']} | {r['metric']} | {r['measured']:.4g} | "
                         f"{r['predicted']:.4g} | {r['rel_error']:+.1%} |")
    reasons = {}
    for _, why in skipped:
        key = why.split(";")[0][:80]
        reasons[key] = reasons.get(key, 0) + 1
    if reasons:
        lines += ["", "Skipped rows by reason:", ""] + [f"- {n} × {k}" for k, n in sorted(reasons.items())]
    if excluded:
        lines += ["", "Excluded rows (validation/excluded_load_curves.csv; the measurement is not what the row "
                  "describes):", ""] + [f"- {i}: {why}" for i, why in excluded.items()]
    lines += ["", END]
    return "\n".join(lines)


def write_report(section: str, path: str):
    text = open(path).read() if os.path.exists(path) else ""
    if START in text and END in text:
        text = text[:text.index(START)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-requests", type=int, default=None, help="cap on simulated requests per row "
                    "(default: as many as the benchmark sent)")
    ap.add_argument("--report", action="store_true", help="write the Load curves section of validation/REPORT.md")
    ap.add_argument("--csv", default=os.path.join(os.path.dirname(__file__), "load_curves.csv"))
    args = ap.parse_args()
    d = pd.read_csv(args.csv)
    rows, skipped = [], []
    excluded = excluded_rows()
    for _, row in d.iterrows():
        if row["id"] in excluded:
            continue
        try:
            p = predict(row, args.max_requests)
        except InputError as exc:
            skipped.append((row["id"], str(exc)[:100]))
            continue
        rows.append({"id": row["id"], "publication": row["publication"], "metric": row["metric"],
                     "measured": row["value"], "predicted": p, "rel_error": p / row["value"] - 1.0})
    out = pd.DataFrame(rows)
    pd.set_option("display.width", 160)
    if len(out):
        out["abs"] = out.rel_error.abs()
        print(out.to_string(index=False, float_format=lambda x: f"{x:.4g}"))
        print("\nby metric:")
        print(out.groupby("metric")["abs"].agg(["count", "median", lambda s: s.quantile(0.9)]).to_string())
        print(f"\nall: n={len(out)} median |rel err| {out['abs'].median():.3f}, p90 {out['abs'].quantile(0.9):.3f}")
    if args.report:
        write_report(report_section(out, skipped, args.max_requests, excluded),
                     os.path.join(os.path.dirname(__file__), "REPORT.md"))
    print(f"skipped {len(skipped)} rows; excluded {len(excluded)}: {', '.join(excluded)}")
    for i, why in skipped[:20]:
        print(f"  {i}: {why}")


if __name__ == "__main__":
    main()

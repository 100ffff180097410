"""Build ``validation/measurements.csv`` and ``validation/excluded.csv`` from the project's reference
table of published measurements (``published_measurements.csv``, kept outside this repository).

    python validation/build_measurements.py PATH/TO/published_measurements.csv

Every reference row is either mapped to a record (costmodel/inputs/fields.py) plus ``id, metric, value, source``
columns, or listed in ``excluded.csv`` with the reason. The mapping is written out row by row
below so that every assumption (prompt length, tree shape, runtime) is visible and reviewable.
Rows we derived ourselves (an AR baseline quoted in another row's ``baseline_value``, a model
size implied by gpt-fast's "achieved bandwidth", per-token KV sizes) get ids ``<ref id>.<suffix>``
or ``KV*`` and say where their number comes from.

Units: every ``value`` is SI in the unit of its output key (seconds, bytes, tokens/s, ratio).
GiB figures are converted with 2**30 (the llama.cpp table's sizes are GiB: 7B f16 = 12.55 GiB).
"""

from __future__ import annotations

import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GIB = 2.0 ** 30

COLUMNS = ["id", "source_group", "publication", "metric", "value", "model", "hardware", "n_devices", "weight_dtype", "runtime",
           "batch_size", "prompt_len", "gen_len", "strategy", "draft_model", "draft_kv_budget", "gamma",
           "acceptance_rate", "mean_accepted_tokens", "tree_nodes", "tree_depth", "tree_parents", "power_mode",
           "source", "source_locator", "reliability", "calibrate", "notes"]


#: source_group -> publication (the unit of leave-one-publication-out): tables of one paper, README or
#: benchmark collection are one publication
PUBLICATION = {
    "specbench-3090": "spec-bench", "specbench-a100": "spec-bench",
    "magicdec-table": "magicdec", "magicdec-fig1": "magicdec",
    "jetson-trtllm": "trtllm-jetson-readme", "jetson-trtllm-memory": "trtllm-jetson-readme",
    "llamacpp-overview": "gpu-benchmarks-llm-inference", "llamacpp-llama3": "gpu-benchmarks-llm-inference",
    "llamacpp-sizes": "gpu-benchmarks-llm-inference",
}


def publication(group: str) -> str:
    """The publication of a source group (itself when the publication has one table here)."""
    return PUBLICATION.get(group, group)


def parents_from_choices(choices) -> list:
    """Medusa/EAGLE 'choices' (paths of child ranks from the root) -> parent list (0 = root)."""
    paths = sorted((tuple(c) for c in choices), key=lambda p: (len(p), p))
    index = {(): 0}
    parents = []
    for i, p in enumerate(paths, start=1):
        parents.append(index[p[:-1]])
        index[p] = i
    return parents


# Medusa-1 / Hydra default sparse tree, 63 nodes, depth 4 (Medusa repo medusa_choices.py
# `mc_sim_7b_63`; Spec-Bench model/hydra/hydra_choices.py uses the same list).
MC_SIM_7B_63 = [[0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0], [0, 5],
                [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2], [3, 0], [0, 9], [8],
                [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4], [0, 0, 5], [0, 0, 0, 0],
                [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0], [1, 3], [0, 0, 7], [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0],
                [1, 4], [7, 0], [0, 1, 2], [2, 0, 0], [3, 1], [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1],
                [0, 2, 1], [9, 0], [0, 6, 0], [0, 0, 0, 1], [1, 6], [0, 7, 0]]
# EAGLE-1 default static tree, 25 nodes, depth 5 (SafeAILab/EAGLE eagle/model/choices.py `mc_sim_7b_63`).
EAGLE1_TREE = [[0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0], [0, 0, 0],
               [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0], [0, 0, 0, 0],
               [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]]
# Token Recycling static tree v2.2.2, 80 nodes, depth 6 (Spec-Bench model/recycling/tree_template_.py).
RECYCLING_TREE = [
    [0], [1], [2], [3], [4], [5], [6], [7],
    [0, 0], [0, 1], [0, 2], [0, 3], [0, 4], [0, 5], [0, 6], [0, 7], [1, 0], [1, 1], [1, 2], [1, 3], [2, 0], [2, 1],
    [2, 2], [3, 0], [3, 1], [4, 0], [5, 0], [6, 0], [7, 0],
    [0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 0, 3], [0, 0, 4], [0, 0, 5], [0, 0, 6], [0, 0, 7], [0, 1, 0], [0, 1, 1],
    [0, 1, 2], [0, 2, 0], [0, 2, 1], [0, 3, 0], [0, 4, 0], [0, 5, 0], [0, 6, 0], [0, 7, 0], [1, 0, 0], [1, 0, 1],
    [1, 1, 0], [2, 0, 0], [3, 0, 0], [4, 0, 0], [5, 0, 0],
    [0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 3], [0, 0, 0, 4], [0, 0, 1, 0], [0, 0, 1, 1], [0, 0, 2, 0],
    [0, 0, 3, 0], [0, 0, 4, 0], [0, 1, 0, 0], [0, 2, 0, 0], [1, 0, 0, 0], [2, 0, 0, 0], [3, 0, 0, 0],
    [0, 0, 0, 0, 0], [0, 0, 0, 0, 1], [0, 0, 0, 0, 2], [0, 0, 0, 1, 0], [0, 0, 0, 2, 0], [0, 0, 1, 0, 0],
    [0, 1, 0, 0, 0], [1, 0, 0, 0, 0],
    [0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 1], [0, 0, 0, 1, 0, 0]]


def plist(choices) -> str:
    return ",".join(str(p) for p in parents_from_choices(choices))


# ---------------------------------------------------------------------------------------------------
# Spec-Bench leaderboard: batch 1, fp16, greedy, HF-transformers research code (runtime eager).
# Mean prompt/generation lengths are not published: prompt_len 256 and gen_len 256 are assumptions
# (at batch 1 on 7B-33B the KV read is < 3 % of the weight read, so they move predictions by < 2 %).
SB = dict(batch_size=1, prompt_len=256, gen_len=256, runtime="eager", weight_dtype="fp16", n_devices=1)
SB_METHOD = {
    "samd": dict(strategy="tree", draft_model="eagle", tree_nodes=60, tree_depth=6,
                 notes="SAM-Decoding + EAGLE-2: modelled as the EAGLE-2 tree (60 nodes, 6 draft passes); "
                       "steps that use the suffix-automaton draft skip the EAGLE passes, which the model does not see"),
    "eagle2": dict(strategy="tree", draft_model="eagle", tree_nodes=60, tree_depth=6,
                   notes="EAGLE-2 total_token=60, depth=5, top_k=10 (Spec-Bench defaults): 60 verified nodes, "
                         "root top-k plus 5 expansions = 6 draft passes"),
    "eagle": dict(strategy="tree", draft_model="eagle", tree_parents=plist(EAGLE1_TREE),
                  notes="EAGLE-1 default static tree (25 nodes, depth 5)"),
    "hydra": dict(strategy="tree", draft_model="eagle", tree_parents=plist(MC_SIM_7B_63),
                  notes="Hydra's heads are sequentially dependent (each depth runs a small network on the hidden "
                        "state and the previous draft token, then the LM head): the same cost structure as an "
                        "EAGLE head, so draft_model=eagle with the mc_sim_7b_63 tree (63 nodes, depth 4)"),
    "medusa": dict(strategy="tree", draft_model="medusa", tree_parents=plist(MC_SIM_7B_63),
                   notes="Medusa-1 heads, mc_sim_7b_63 sparse tree (63 nodes, depth 4)"),
    "recycling": dict(strategy="tree", draft_model="none", tree_parents=plist(RECYCLING_TREE),
                      notes="Token Recycling static tree v2.2.2 (80 nodes, depth 6); adjacency-matrix draft on GPU "
                            "counted as free"),
    "rest": dict(strategy="tree", draft_model="none", tree_nodes=64,
                 notes="REST retrieval draft: up to num_draft=64 tokens in a trie (shape from the node budget); "
                       "datastore lookup on the CPU counted as free"),
    "lookahead": dict(strategy="tree", draft_model="none", tree_nodes=56, tree_depth=4,
                      notes="Lookahead N=5 W=7 G=7: W(N-1)+G(N-1) = 56 extra tokens per step, modelled as a "
                            "56-node no-draft tree of depth N-1 (cost of q = 57 tokens; the mask shape differs)"),
    "pld": dict(strategy="speculative", draft_model="none", gamma=10,
                notes="prompt lookup, draft_num_candidate_tokens=10 (Spec-Bench inference_pld.py)"),
    "speculative": dict(strategy="speculative", draft_model="vicuna-68m", gamma=5,
                        notes="HF assisted generation with vicuna-68m; draft length is dynamic (starts at "
                              "num_assistant_tokens=5, +2/-1 heuristic): gamma=5 assumed"),
}
SB_MODEL = {"Vicuna-7B-v1.3": "vicuna-7b", "Vicuna-13B-v1.3": "vicuna-13b", "Vicuna-33B-v1.3": "vicuna-33b"}


def spec_bench(r):
    hw = "rtx-3090" if "3090" in r["hardware"] else "a100-80gb"
    loc = r["source_locator"]
    group = ("specbench-3090" if hw == "rtx-3090" else "specbench-a100")
    rec = dict(SB, model=SB_MODEL[r["target_model"]], hardware=hw,
               mean_accepted_tokens=r["acceptance_rate_or_mean_accepted_tokens"])
    rec.update(SB_METHOD[r["method"]])
    note = rec.pop("notes")
    if r["method"] == "speculative" and "33B" in r["target_model"]:
        note += "; the 33B drafter is not named in the leaderboard: vicuna-68m assumed"
    if "09244ff" in loc:
        note += "; older leaderboard version (PyTorch 2.0.1 / CUDA 11.8)"
    return [dict(rec, id=r["id"], source_group=group, metric="speedup_vs_ar", value=r["value"],
                 notes=note + "; baseline: HF eager AR of the same model")]


# Medusa paper figure: AR baselines read off a plot (HF-based, A100 80GB, MT-bench, batch 1).
MEDUSA_AR_MODEL = {"Vicuna-7B": "vicuna-7b", "Zephyr-7B-beta": "mistral-7b", "Vicuna-13B": "vicuna-13b",
                   "Vicuna-33B": "vicuna-33b"}


def medusa_ar(r):
    note = "HF-based AR baseline; MT-bench lengths assumed (prompt 256, gen 256)"
    if "Zephyr" in r["target_model"]:
        note += "; Zephyr-7B-beta is a Mistral-7B fine-tune (same architecture: mistral-7b)"
    return [dict(id=r["id"], source_group="medusa-figure", metric="tokens_per_s_per_seq", value=r["value"],
                 model=MEDUSA_AR_MODEL[r["target_model"]], hardware="a100-80gb", n_devices=1, weight_dtype="fp16",
                 runtime="eager", batch_size=1, prompt_len=256, gen_len=256, strategy="autoregressive",
                 notes=note)]


# Sequoia on-chip table: the speculative rows have no acceptance figure; their AR baselines
# ("24.2 ms/token AR" etc., an HF-style implementation) are measurements in their own right.
SEQUOIA_AR = {"VP063": ("llama-2-7b", 24.2e-3), "VP065": ("llama-2-13b", 31.2e-3), "VP067": ("vicuna-33b", 53.2e-3)}


def sequoia_ar(r):
    model, ms = SEQUOIA_AR[r["id"]]
    return [dict(id=r["id"] + ".ar", source_group="sequoia-onchip", metric="time_per_output_token_s", value=ms,
                 model=model, hardware="a100-80gb", n_devices=1, weight_dtype="fp16", runtime="eager",
                 batch_size=1, prompt_len=128, gen_len=128, strategy="autoregressive",
                 reliability="table value (AR baseline quoted in the row's baseline_value)",
                 notes="AR baseline of the Sequoia on-chip table (unoptimised HF-style implementation); A100 listed "
                       "with 1935 GB/s (80GB PCIe) mapped to a100-80gb (SXM, 2039 GB/s); C4 lengths assumed 128/128")]


# MagicDec: Llama-3.1-8B self-speculation with a 512-token StreamingLLM KV budget, TP8. alpha from
# the same project's acceptance table at 32K context (VP099: 0.81).
def magicdec_table(r):
    hw = "h100-sxm" if "H100" in r["hardware"] else "a100-80gb"
    gamma = int(r["gamma_or_tree"].split("gamma=")[1].split()[0])
    return [dict(id=r["id"], source_group="magicdec-table", metric="speedup_vs_ar", value=r["value"],
                 model="llama-3.1-8b", hardware=hw, n_devices=8, weight_dtype="bf16", runtime="compiled",
                 batch_size=r["batch_size"], prompt_len=r["prompt_len"], gen_len=64, strategy="speculative",
                 draft_model="self", draft_kv_budget=512, gamma=gamma, acceptance_rate=0.81,
                 notes="alpha = 0.81 from MagicDec's acceptance table at 32K (VP099); gen_len 64 (README example); "
                       "speedup is batch throughput vs AR at the same batch")]


def magicdec_fig1_ar(r):
    b = int(r["batch_size"].split("~")[1].split()[0])
    return [dict(id=r["id"], source_group="magicdec-fig1", metric="tokens_per_s", value=r["value"],
                 model="llama-2-7b-32k", hardware="a100-80gb", n_devices=8, weight_dtype="bf16", runtime="compiled",
                 batch_size=b, prompt_len=8000, gen_len=64, strategy="autoregressive",
                 notes=f"LLaMA-2-7B-32K = Llama-2-7B architecture; batch {b} implied by throughput x latency; "
                       "8xA100 inferred; gen_len 64 assumed")]


def sglang_ar(r):
    if r["id"] == "VP127":
        return [dict(id="VP127.ar", source_group="sglang-docs", metric="tokens_per_s_per_seq", value=158.34,
                     model="llama-3.1-8b", hardware="h100-sxm", n_devices=1, weight_dtype="bf16",
                     runtime="compiled", batch_size=1, prompt_len=128, gen_len=256, strategy="autoregressive",
                     reliability="docs table value (AR baseline quoted in VP127's baseline_value)",
                     notes="SGLang AR (CUDA graphs); H100 assumed SXM; MT-bench lengths assumed 128/256")]
    return [dict(id=r["id"], source_group="sglang-docs", metric="tokens_per_s_per_seq", value=r["value"],
                 model="llama-2-7b", hardware="h100-sxm", n_devices=1, weight_dtype="fp16", runtime="compiled",
                 batch_size=1, prompt_len=128, gen_len=256, strategy="autoregressive",
                 notes="value given as '~156'; H100 assumed SXM; lengths assumed 128/256")]


# gpt-fast README: A100-80GB power-capped at 330 W, batch 1, 5-token prompt, generate.py default
# max_new_tokens = 200, torch.compile + CUDA graphs.
def gpt_fast(r):
    dt = r["dtype"]
    wd = dt.split()[0]                      # 'bf16 base', 'int8 weight-only', 'int4 G=32 TP', ...
    model = "llama-2-70b" if "70B" in r["target_model"] else "llama-2-7b"
    n = int(r["num_devices"])
    note = "A100 power-capped at 330 W (README: ~1700 GB/s effective); gen_len 200 = generate.py default"
    if wd == "int4":
        note += "; gpt-fast int4 uses groups of 32 with bf16 scale+zero (runtimes/compiled.yaml int4_group_size)"
    out = [dict(id=r["id"], source_group="gpt-fast", metric="tokens_per_s_per_seq", value=r["value"], model=model,
                hardware="a100-80gb", n_devices=n, weight_dtype=wd, runtime="compiled", batch_size=1, prompt_len=5,
                gen_len=200, strategy="autoregressive", notes=note)]
    if n == 1:
        bw = float(r["baseline_value"].split("achieved mem BW ")[1].split()[0]) * 1e9
        size = bw / float(r["value"])
        out.append(dict(id=r["id"] + ".size", source_group="gpt-fast", metric="weights_bytes",
                        value=f"{size:.4e}", model=model, hardware="a100-80gb", n_devices=1, weight_dtype=wd,
                        runtime="compiled", batch_size=1, prompt_len=5, gen_len=200, strategy="autoregressive",
                        reliability="derived: README achieved bandwidth / tokens per s = the model size gpt-fast "
                                    "counts (parameter + buffer bytes)",
                        notes="weights incl. quantisation scales" + ("; group size 32" if wd == "int4" else "")))
    return out


def eagle_gptfast_ar(r):
    wd = "int4" if r["dtype"] == "int4" else "fp16"
    return [dict(id=r["id"], source_group="eagle-readme", metric="tokens_per_s_per_seq", value=r["value"],
                 model="llama-2-13b", hardware="a100-80gb", n_devices=1, weight_dtype=wd, runtime="compiled",
                 batch_size=1, prompt_len=128, gen_len=256, strategy="autoregressive",
                 notes="gpt-fast AR baseline of the EAGLE README; A100 variant not stated (a100-80gb assumed); "
                       "MT-bench lengths assumed 128/256")]


def jetson_trt(r):
    if r["metric"] == "memory_gb":
        return [dict(id=r["id"], source_group="jetson-trtllm-memory", metric="peak_device_memory_bytes",
                     value=f"{float(r['value']) * GIB:.4e}", model="llama-3-8b", hardware="orin-agx-64gb",
                     n_devices=1, weight_dtype="int4", runtime="trt-llm", batch_size=1, prompt_len=128, gen_len=50,
                     strategy="autoregressive", power_mode="MAXN",
                     notes="GPU memory of the process, GB taken as GiB; prompt length not stated (128 assumed); "
                           + r["notes"])]
    return [dict(id=r["id"], source_group="jetson-trtllm", metric="tokens_per_s_per_seq", value=r["value"],
                 model="llama-3-8b", hardware="orin-agx-64gb", n_devices=1, weight_dtype="int4", runtime="trt-llm",
                 batch_size=1, prompt_len=r["prompt_len"], gen_len=r["gen_len"], strategy="autoregressive",
                 power_mode="MAXN", notes="decode tokens/s, gptSessionBenchmark with CUDA graphs; " + r["dtype"])]


def a10g(r):
    fw = r["framework"]
    rt = "vllm" if ("vLLM" in fw or "TGI" in fw) else "trt-llm"
    b = int(r["batch_size"].split()[0])
    note = "inter-token latency over HTTP streaming (includes server overhead); prompt ~550, gen ~150 (means)"
    if "TGI" in fw:
        note += "; TGI 2.0.4 mapped to the vllm profile (paged attention + CUDA graphs + a Python/Rust router)"
    if b > 1:
        note += ("; continuous batching interleaves other requests' prefills into decode steps: the measured "
                 "latency holds work outside the configuration, so the row is reported, not fitted (calibrate=no)")
    return [dict(id=r["id"], source_group="a10g-llmperf", metric="time_per_output_token_s",
                 value=f"{float(r['value']) * 1e-3:.5g}", model="llama-3-8b", hardware="a10g", n_devices=1,
                 weight_dtype="fp16", runtime=rt, batch_size=b, prompt_len=550, gen_len=150,
                 strategy="autoregressive", calibrate="no" if b > 1 else "", notes=f"{fw}; " + note)]


LLAMACPP_HW = {"NVIDIA A100 80GB": "a100-80gb", "NVIDIA H100 PCIe 80GB": "h100-pcie", "NVIDIA RTX 4090 24GB": "rtx-4090",
               "NVIDIA RTX 3090 24GB": "rtx-3090"}
LLAMACPP_MODEL = {"LLaMA-2-7B": "llama-2-7b", "LLaMA-2-13B": "llama-2-13b", "LLaMA-2-70B": "llama-2-70b",
                  "Llama-3-8B": "llama-3-8b", "Llama-3-70B": "llama-3-70b"}


def llamacpp(r):
    model = LLAMACPP_MODEL[r["target_model"]]
    q = r["dtype"].lower()
    wd = "fp16" if q.startswith("f16") else "int4"
    qnote = {"q4_0": "Q4_0 = 4.5 bits/weight (blocks of 32 with an fp16 scale)",
             "q4_k_m": "Q4_K_M ~4.8 bits/weight (4-bit k-quants, some tensors 6-bit)"}
    qk = q.split()[0]
    if r["metric"] == "memory_gb":
        return [dict(id=r["id"], source_group="llamacpp-sizes", metric="weights_bytes",
                     value=f"{float(r['value']) * GIB:.4e}", model=model, hardware="a100-80gb", n_devices=1,
                     weight_dtype=wd, runtime="llama.cpp", batch_size=1, prompt_len=1, gen_len=128,
                     strategy="autoregressive",
                     notes="GGUF file size in GiB (weights only); hardware irrelevant"
                           + (f"; {qnote[qk]}" if qk in qnote else ""))]
    gen = 128 if r["gen_len"] == "default" else int(r["gen_len"])
    group = "llamacpp-overview" if r["source_locator"] == "Overview table" else "llamacpp-llama3"
    # llama-bench tgN decodes N tokens from an empty prompt, the BOS first: the context ends at N tokens.
    # Records keep prompt_len 1 + gen_len N (one token more, negligible) unless that passes the model's
    # max_context; then the BOS is the prompt and N − 1 tokens follow it (tg8192 on Llama-3-8B).
    from costmodel.inputs.model import load_model
    if 1 + gen > (load_model(model).max_context or 1 + gen):
        n_gen, how = gen - 1, (f"empty prompt: the BOS it decodes first is prompt_len 1 and {gen - 1} more tokens "
                               f"fill the {gen}-token context = max_context")
    else:
        n_gen, how = gen, "empty prompt: prompt_len 1"
    return [dict(id=r["id"], source_group=group, metric="tokens_per_s_per_seq", value=r["value"], model=model,
                 hardware=LLAMACPP_HW[r["hardware"]], n_devices=1, weight_dtype=wd, runtime="llama.cpp",
                 batch_size=1, prompt_len=1, gen_len=n_gen, strategy="autoregressive",
                 notes=f"llama-bench tg{gen} ({how})" + (f"; {qnote[qk]}" if qk in qnote else ""))]


def t4_oom(r):
    return [dict(id=r["id"], source_group="t4-colab", metric="fits", value=0, model="llama-2-7b", hardware="t4",
                 n_devices=1, weight_dtype="fp16", runtime="eager", batch_size=1, prompt_len=515, gen_len=300,
                 strategy="autoregressive",
                 notes="out-of-memory observed (HF offloaded to CPU/disk); categorical row: fits = 0")]


HANDLERS = {}
for i in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 15, 16, 17, 18, 20, 21, 23, 24, 25, 26, 27, 28, 30, 31, 32, 33,
          34, 36, 37, 38, 39):
    HANDLERS[f"VP{i:03d}"] = spec_bench
for i in range(59, 63):
    HANDLERS[f"VP{i:03d}"] = medusa_ar
for k in SEQUOIA_AR:
    HANDLERS[k] = sequoia_ar
for k in ("VP077", "VP078", "VP079", "VP089"):
    HANDLERS[k] = magicdec_table
for k in ("VP102", "VP103", "VP105"):
    HANDLERS[k] = magicdec_fig1_ar
for k in ("VP127", "VP129"):
    HANDLERS[k] = sglang_ar
for i in range(159, 172):
    HANDLERS[f"VP{i:03d}"] = gpt_fast
for k in ("VP173", "VP175"):
    HANDLERS[k] = eagle_gptfast_ar
for i in range(193, 201):
    HANDLERS[f"VP{i:03d}"] = jetson_trt
for i in range(215, 221):
    HANDLERS[f"VP{i:03d}"] = a10g
for i in range(221, 243):
    HANDLERS[f"VP{i:03d}"] = llamacpp
HANDLERS["VP243"] = t4_oom

# Rows that are not mapped, with the reason (README.md summarises them).
EXCLUDE_RULES = [
    (range(40, 52), "TPU-v4 hardware and an encoder-decoder model (T5-XXL): neither is in the zoo"),
    ((52,), "TPU-v4 (16 chips) and a range ('2.0-2.5'), Chinchilla not in the zoo"),
    (range(53, 59), "Medusa figure speedups: no acceptance figure (tau) for the rows; Medusa-2 also changes the "
                    "backbone and uses typical (lossy) acceptance. Their AR baselines (VP059-VP062) are kept"),
    ((63, 64, 65, 66, 67, 68), "Sequoia on-chip speculative rows: no acceptance figure and tree size/depth not "
                               "transcribed; their AR baselines are kept as VP063.ar, VP065.ar, VP067.ar"),
    (range(69, 77), "CPU-offloading regime (weights streamed over PCIe each step): the model has no offloading "
                    "mechanism"),
    ((80, 81, 83, 84, 85, 86, 87, 90, 91, 92, 93, 94, 95),
     "MagicDec LLaMA-2-7B-32K and TinyLlama-draft rows: no acceptance figure for these drafts"),
    (range(96, 102), "acceptance rates are model inputs, not outputs (VP099 is used as the input of VP077-VP079, "
                     "VP089)"),
    ((104,), "MagicDec Fig. 1 AR point: throughput identical to VP103 (probable copy error in the chart data; "
             "the implied batch is then unknown)"),
    (range(106, 110), "MagicDec speculative throughput with the TinyLlama draft: no acceptance figure"),
    (range(110, 116), "throughput ratio at equal latency budgets compares different batch sizes: not a model "
                      "output"),
    (range(116, 121), "TriForce: KV cache offloaded to CPU (offloading regime the model does not express) and a "
                      "hierarchical two-level draft"),
    ((121,), "TriForce README claim ('~2.2x'), retrieval-KV hierarchical draft, no acceptance figure"),
    (range(122, 126), "vLLM blog captions: online serving at a QPS (queueing), draft length and acceptance not "
                      "stated; headline values"),
    ((127, 128, 130, 131, 132), "SGLang EAGLE rows: no acceptance figure (the AR baseline of VP127 is kept as "
                           "VP127.ar; VP129 kept)"),
    (range(133, 137), "DeepSeek-V3 (MLA attention, 671B MoE) is not in the zoo and the model has no MLA; 2-node "
                      "prefill/decode-disaggregated EP deployment"),
    (range(137, 159), "NVIDIA B200 (not in the hardware zoo), DeepSeek-R1 / Llama-4 not in the model zoo, nvfp4; "
                      "VP152-VP157 are acceptance-only; VP158 is a headline claim"),
    ((172,), "gpt-fast speculative sampling: acceptance not reported"),
    ((174, 176), "EAGLE + gpt-fast: no acceptance figure (the AR baselines VP173, VP175 are kept)"),
    (range(177, 180), "marketing headline, hardware ambiguous (LOW reliability)"),
    (range(180, 183), "approximate blog text ('~1.5x', '>2x') without acceptance figures"),
    ((183,), "ReDrafter: approximate README value, recurrent beam-search drafter has no draft kind in the model"),
    ((184, 185, 186), "attention-kernel-only speedups (not an end-to-end output of the model)"),
    ((187, 188), "ranges from a secondary summary (ChunkAttention), multi-tenant batch not specified"),
    (range(189, 193), "Hydragen abstract: lower bounds ('>3', 'up to 32', '<15%') without the workload grid"),
    (range(201, 213), "Jetson Orin Nano 8GB is not in the hardware zoo (and Llama 3.2 / Qwen2.5 / Gemma 2 / "
                      "Phi 3.5 are not in the model zoo)"),
]


def exclusion_reason(rid: str):
    n = int(rid[2:5])
    for ids, reason in EXCLUDE_RULES:
        if n in ids:
            return reason
    return None


def extra_rows():
    """Per-token KV sizes (2 · layers · kv_heads · head_dim · bytes), quoted in the reference
    notes (speculation_formulas.md A.3), derived from each model's config.json."""
    common = dict(hardware="a100-80gb", n_devices=1, weight_dtype="fp16", runtime="compiled", batch_size=1,
                  prompt_len=1, gen_len=128, strategy="autoregressive", source_group="kv-per-token",
                  source="speculation_formulas.md A.3 (derived from the models' config.json)",
                  source_locator="A.3 examples", reliability="derived (formula on published configs)")
    return [dict(common, id="KV001", metric="kv_bytes_per_token", value=512 * 1024, model="llama-2-7b",
                 notes="Llama-2-7B fp16, MHA 32 x 128, 32 layers = 512 KiB/token"),
            dict(common, id="KV002", metric="kv_bytes_per_token", value=128 * 1024, model="llama-3-8b",
                 notes="Llama-3-8B fp16, GQA 8 kv heads = 128 KiB/token"),
            dict(common, id="KV003", metric="kv_bytes_per_token", value=320 * 1024, model="llama-2-70b",
                 notes="Llama-2-70B fp16, GQA 8 kv heads, 80 layers = 320 KiB/token")]


def build(ref_path: str):
    with open(ref_path, newline="", encoding="utf-8") as f:
        ref = list(csv.DictReader(f))
    rows, excluded = [], []
    for r in ref:
        h = HANDLERS.get(r["id"])
        produced = h(r) if h is not None else []
        if not any(o["id"] == r["id"] for o in produced):
            # not expressible as such (only a derived row, e.g. its AR baseline, may be kept)
            excluded.append({"id": r["id"], "method": r["method"], "metric": r["metric"],
                             "reason": exclusion_reason(r["id"]) or "UNMAPPED"})
        for out in produced:
            out.setdefault("source", r["source"])
            out.setdefault("source_locator", r["source_locator"])
            out.setdefault("reliability", r["reliability"])
            rows.append(out)
    rows.extend(extra_rows())
    return rows, excluded


#: the reference table's usual place, beside the repository
DEFAULT_REFERENCE = os.path.join(HERE, "..", "..", "shared", "reference", "published_measurements.csv")


def main(argv, out_dir: str = HERE):
    """Write ``measurements.csv`` and ``excluded.csv`` into ``out_dir`` (this folder by default) from the
    reference table ``argv[1]`` (:data:`DEFAULT_REFERENCE` when not given)."""
    ref = argv[1] if len(argv) > 1 else DEFAULT_REFERENCE
    rows, excluded = build(ref)
    unmapped = [e["id"] for e in excluded if e["reason"] == "UNMAPPED"]
    if unmapped:
        raise SystemExit(f"unmapped reference rows: {unmapped}")
    with open(os.path.join(out_dir, "measurements.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="raise")
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in COLUMNS} | {"publication": publication(r["source_group"])})
    with open(os.path.join(out_dir, "excluded.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["id", "method", "metric", "reason"])
        w.writeheader()
        w.writerows(excluded)
    print(f"{len(rows)} measurement rows, {len(excluded)} reference rows excluded")


if __name__ == "__main__":
    main(sys.argv)

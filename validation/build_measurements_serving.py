"""Build ``validation/measurements_serving.csv``: published measurements of serving engines
(TensorRT-LLM, vLLM, SGLang, llama.cpp, MLC) on current GPUs, transcribed by hand.

    python validation/build_measurements_serving.py

Every number below was read from the document named in its table's ``SRC`` entry (repository file at
a commit, GitHub issue/PR thread, or web page); nothing is estimated. Where a setup detail is not
stated in the source, the assumption is written in the row's ``notes``. Rows whose value is a
product of a published number (per-GPU throughput × TP = whole-system throughput) say so in
``reliability`` and ``notes``.

Columns: the ``measurements.csv`` columns plus ``publication`` (one short name per document) and
``throughput_definition`` (``decode_only`` | ``e2e`` | ``output_tokens_per_s_served`` | blank).
Units: SI (seconds, tokens/s).
"""

from __future__ import annotations

import csv
import os

HERE = os.path.dirname(os.path.abspath(__file__))

COLUMNS = ["id", "source_group", "metric", "value", "model", "hardware", "n_devices", "weight_dtype", "kv_dtype", "runtime",
           "batch_size", "prompt_len", "gen_len", "strategy", "draft_model", "draft_kv_budget", "gamma",
           "acceptance_rate", "mean_accepted_tokens", "tree_nodes", "tree_depth", "tree_parents", "power_mode",
           "source", "source_locator", "reliability", "calibrate", "notes", "publication", "throughput_definition"]

ROWS: list = []


def add(**kw):
    row = {c: "" for c in COLUMNS}
    for k, v in kw.items():
        if k not in row:
            raise KeyError(k)
        row[k] = "" if v is None else v
    ROWS.append(row)


def fmt(x: float) -> str:
    return f"{x:.6g}"


# ---------------------------------------------------------------------------------------------------
# TensorRT-LLM static-batching tables (gptSessionBenchmark): a batch of B identical requests, ISL/OSL
# fixed, throughput = OSL * B / total latency (incl. context phase) [/ TP for the per-GPU tables; the
# Falcon180B-H200 blog prints the formula out_tps=output_seqlen*batch_size/total_latency/tp].
# -> metric tokens_per_s_e2e (whole system), throughput_definition e2e.
# Model names: the docs' "LLaMA 7B" / "LLaMA 70B" are Llama-2-7B / Llama-2-70B (their methodology
# section builds 'Llama2-7b' and 'Llama2-70b'); "Mistral 7B" -> mistral-7b (v0.1 config assumed),
# "Mixtral 8x7B" -> mixtral-8x7b.
# Hardware: "H100" = H100-HBM3-80GB SXM (methodology), "A100" = A100 SXM 80GB (H100vsA100 blog:
# "SXM 80GB GPUs"), "L40S" = L40S PCIe cards (multi-GPU L40S rows are tensor parallel over PCIe).
# Precision: H100/H200/L40S FP8 (weights and activations FP8, FP8 KV cache per the build configs),
# A100 FP16.
# Engine version: the v0.9.0 tables run as trt-llm@0.9 (runtimes/trt-llm.yaml: no fp8 MoE GEMM before
# 0.10, Ampere MoE GEMMs on Hopper), the v0.5.0 / v0.6.1 ones as trt-llm@0.5 / @0.6.
TRT_MODEL = {"LLaMA 7B": "llama-2-7b", "LLaMA 70B": "llama-2-70b", "Mistral 7B": "mistral-7b",
             "Mixtral 8x7B": "mixtral-8x7b", "llama_13b": "llama-2-13b", "llama_70b": "llama-2-70b"}
TRT_HW = {"H200": ("h200", "fp8"), "H100": ("h100-sxm", "fp8"), "L40S": ("l40s", "fp8"), "A100": ("a100-80gb", "fp16")}
#: KV-cache dtype per weight precision of these tables: the FP8 engines are built with an FP8 KV cache
#: (v0.5.0 build flags '--enable_fp8 --fp8_kv_cache'; later quantize.py '--kv_cache_dtype fp8'), FP16 engines keep fp16
KV = {"fp8": "fp8", "fp16": "fp16"}
TRT_HW_NOTE = {
    "h200": "H200 SXM 141GB",
    "h100-sxm": "H100-HBM3-80GB (SXM)",
    "l40s": "L40S (PCIe; TP>1 runs over PCIe, no NVLink)",
    "a100-80gb": "A100 SXM 80GB assumed (the docs say 'A100'; the H100vsA100 blog of the same series says SXM 80GB)",
}

# --- v0.9.0 performance.md -------------------------------------------------------------------------
SRC_TRT09 = dict(
    source="NVIDIA TensorRT-LLM docs/source/performance.md, version stating 'All data was generated using "
           "version 0.9.0' (gptSessionBenchmark, static batching)",
    publication="trtllm-perf-v0.9.0")
LOC_TRT09 = ("github NVIDIA/TensorRT-LLM docs/source/performance.md (v0.9.0 revision; search-index file id "
             "5995251461) '## Peak Throughput' table '### {gpu} GPUs ({prec})', row {model} / batch {b} / TP {tp} "
             "/ {isl}/{osl}, column 'Throughput (out tok/s/GPU)'")
# (gpu, model, batch, tp, isl, osl, out tok/s/GPU)
TRT09_TPUT = [
    ("H200", "Mistral 7B", 896, 1, 128, 128, 20460), ("H200", "Mistral 7B", 120, 1, 128, 2048, 8950),
    ("H200", "Mistral 7B", 64, 1, 2048, 128, 2423), ("H200", "Mistral 7B", 56, 1, 2048, 2048, 3867),
    ("H200", "Mixtral 8x7B", 1024, 2, 128, 128, 5444), ("H200", "Mixtral 8x7B", 256, 2, 128, 2048, 4973),
    ("H200", "Mixtral 8x7B", 64, 2, 2048, 128, 605), ("H200", "Mixtral 8x7B", 64, 2, 2048, 2048, 1821),
    ("H200", "LLaMA 7B", 896, 1, 128, 128, 20618), ("H200", "LLaMA 7B", 120, 1, 128, 2048, 8348),
    ("H200", "LLaMA 7B", 64, 1, 2048, 128, 2391), ("H200", "LLaMA 7B", 56, 1, 2048, 2048, 3522),
    ("H200", "LLaMA 70B", 1024, 1, 128, 128, 3989), ("H200", "LLaMA 70B", 512, 2, 128, 2048, 3963),
    ("H200", "LLaMA 70B", 64, 1, 2048, 128, 418), ("H200", "LLaMA 70B", 64, 1, 2048, 2048, 1458),
    ("H100", "Mistral 7B", 896, 1, 128, 128, 20404), ("H100", "Mistral 7B", 120, 1, 128, 2048, 8623),
    ("H100", "Mistral 7B", 84, 1, 2048, 128, 2405), ("H100", "Mistral 7B", 56, 1, 2048, 2048, 3731),
    ("H100", "Mixtral 8x7B", 512, 2, 128, 128, 5255), ("H100", "Mixtral 8x7B", 128, 2, 128, 2048, 3408),
    ("H100", "Mixtral 8x7B", 64, 2, 2048, 128, 588), ("H100", "Mixtral 8x7B", 32, 2, 2048, 2048, 1317),
    ("H100", "LLaMA 7B", 896, 1, 128, 128, 19854), ("H100", "LLaMA 7B", 120, 1, 128, 2048, 6944),
    ("H100", "LLaMA 7B", 84, 1, 2048, 128, 2163), ("H100", "LLaMA 7B", 56, 1, 2048, 2048, 2826),
    ("H100", "LLaMA 70B", 1024, 2, 128, 128, 3214), ("H100", "LLaMA 70B", 512, 4, 128, 2048, 2725),
    ("H100", "LLaMA 70B", 96, 2, 2048, 128, 346), ("H100", "LLaMA 70B", 64, 2, 2048, 2048, 1011),
    ("L40S", "Mistral 7B", 896, 1, 128, 128, 9562), ("L40S", "Mistral 7B", 120, 1, 128, 2048, 4387),
    ("L40S", "Mistral 7B", 84, 1, 2048, 128, 971), ("L40S", "Mistral 7B", 56, 1, 2048, 2048, 1721),
    ("L40S", "Mixtral 8x7B", 256, 4, 128, 128, 1266), ("L40S", "Mixtral 8x7B", 256, 4, 128, 2048, 1490),
    ("L40S", "Mixtral 8x7B", 64, 4, 2048, 128, 155), ("L40S", "Mixtral 8x7B", 32, 4, 2048, 2048, 412),
    ("L40S", "LLaMA 7B", 256, 1, 128, 128, 5885), ("L40S", "LLaMA 7B", 64, 1, 128, 2048, 1654),
    ("L40S", "LLaMA 7B", 32, 1, 2048, 128, 574), ("L40S", "LLaMA 7B", 16, 1, 2048, 2048, 537),
    ("L40S", "LLaMA 70B", 256, 2, 128, 128, 562), ("L40S", "LLaMA 70B", 256, 4, 128, 2048, 478),
    ("L40S", "LLaMA 70B", 16, 2, 2048, 128, 49), ("L40S", "LLaMA 70B", 64, 4, 2048, 2048, 185),
    ("A100", "Mistral 7B", 896, 1, 128, 128, 6251), ("A100", "Mistral 7B", 120, 1, 128, 2048, 3776),
    ("A100", "Mistral 7B", 64, 1, 2048, 128, 698), ("A100", "Mistral 7B", 56, 1, 2048, 2048, 1576),
    ("A100", "Mixtral 8x7B", 512, 2, 128, 128, 2842), ("A100", "Mixtral 8x7B", 128, 2, 128, 2048, 1724),
    ("A100", "Mixtral 8x7B", 64, 2, 2048, 128, 319), ("A100", "Mixtral 8x7B", 32, 2, 2048, 2048, 801),
    ("A100", "LLaMA 7B", 256, 1, 128, 128, 5390), ("A100", "LLaMA 7B", 32, 1, 128, 2048, 1484),
    ("A100", "LLaMA 7B", 32, 1, 2048, 128, 533), ("A100", "LLaMA 7B", 16, 1, 2048, 2048, 603),
    ("A100", "LLaMA 70B", 1024, 4, 128, 128, 686), ("A100", "LLaMA 70B", 512, 8, 128, 2048, 684),
    ("A100", "LLaMA 70B", 96, 4, 2048, 128, 80), ("A100", "LLaMA 70B", 64, 4, 2048, 2048, 289),
]
# (gpu, model, tp, isl, 1st token latency ms) -- batch 1
TRT09_TTFT = [
    ("H200", "Mistral 7B", 1, 128, 5.9), ("H200", "Mistral 7B", 1, 2048, 31.7),
    ("H200", "Mixtral 8x7B", 2, 128, 12.1), ("H200", "Mixtral 8x7B", 2, 2048, 87.7),
    ("H200", "LLaMA 7B", 1, 128, 5.7), ("H200", "LLaMA 7B", 1, 2048, 30.2),
    ("H200", "LLaMA 70B", 4, 128, 17.8), ("H200", "LLaMA 70B", 4, 2048, 103.0),
    ("H100", "Mistral 7B", 1, 128, 6.5), ("H100", "Mistral 7B", 1, 2048, 32.4),
    ("H100", "Mixtral 8x7B", 2, 128, 13.4), ("H100", "Mixtral 8x7B", 2, 2048, 89.5),
    ("H100", "LLaMA 7B", 1, 128, 6.3), ("H100", "LLaMA 7B", 1, 2048, 30.8),
    ("H100", "LLaMA 70B", 4, 128, 19.6), ("H100", "LLaMA 70B", 8, 2048, 85.1),
    ("L40S", "Mistral 7B", 1, 128, 15.4), ("L40S", "Mistral 7B", 1, 2048, 87.3),
    ("L40S", "Mixtral 8x7B", 4, 128, 19.5), ("L40S", "Mixtral 8x7B", 4, 2048, 165.6),
    ("L40S", "LLaMA 7B", 1, 128, 14.1), ("L40S", "LLaMA 7B", 1, 2048, 80.1),
    ("L40S", "LLaMA 70B", 8, 128, 70.4), ("L40S", "LLaMA 70B", 4, 2048, 673.3),
    ("A100", "Mistral 7B", 1, 128, 16.3), ("A100", "Mistral 7B", 1, 2048, 139.6),
    ("A100", "Mixtral 8x7B", 2, 128, 23.8), ("A100", "Mixtral 8x7B", 2, 2048, 160.9),
    ("A100", "LLaMA 7B", 1, 128, 16.2), ("A100", "LLaMA 7B", 1, 2048, 132.4),
    ("A100", "LLaMA 70B", 4, 128, 45.6), ("A100", "LLaMA 70B", 8, 2048, 249.2),
]

# --- v0.6.1 performance.md -------------------------------------------------------------------------
SRC_TRT061 = dict(
    source="NVIDIA TensorRT-LLM docs/source/performance.md, revision 'This data has been updated for v0.6.1' "
           "(gptSessionBenchmark, static batching)",
    publication="trtllm-perf-v0.6.1")
LOC_TRT061 = ("github NVIDIA/TensorRT-LLM@138f96d45f90b9667426f7c47297d8c06bafac73 docs/source/performance.md "
              "'## Peak Throughput' table '### {gpu} GPUs ({prec})', row {model} / batch {b} / TP {tp} / "
              "{isl}/{osl}, column '{col}'")
TRT061_H100 = [  # per GPU
    ("LLaMA 7B", 768, 1, 128, 128, 19694), ("LLaMA 7B", 112, 1, 128, 2048, 6818),
    ("LLaMA 7B", 80, 1, 2048, 128, 2244), ("LLaMA 7B", 48, 1, 2048, 2048, 2740),
    ("LLaMA 70B", 1024, 2, 128, 128, 2657), ("LLaMA 70B", 480, 4, 128, 2048, 1486),
    ("LLaMA 70B", 96, 2, 2048, 128, 306), ("LLaMA 70B", 64, 2, 2048, 2048, 547),
]
TRT061_A100_TP1 = [  # TP1 only: the A100 column header says 'out tok/s' (not /GPU), ambiguous for TP>1
    ("LLaMA 7B", 384, 1, 128, 128, 5586), ("LLaMA 7B", 60, 1, 128, 2048, 1928),
    ("LLaMA 7B", 52, 1, 2048, 128, 591),
]

# --- v0.5.0 performance.md (whole-system throughput, batch <= 64) --------------------------------------
SRC_TRT05 = dict(
    source="NVIDIA TensorRT-LLM docs/source/performance.md, release 0.5.0 revision ('## High Throughput' "
           "tables; gptSessionBenchmark, static batching)",
    publication="trtllm-perf-v0.5.0")
LOC_TRT05 = ("github NVIDIA/TensorRT-LLM docs/source/performance.md (release/0.5.0 revision; search-index file id "
             "4974246235; also raw.githubusercontent.com/NVIDIA/TensorRT-LLM/release/0.5.0/docs/source/performance.md) "
             "'## High Throughput' table '### {gpu} GPUs ({prec})', row {model} / batch {b} / TP {tp} / {isl}/{osl}, "
             "column 'Throughput (out tok/s)'")
TRT05 = [  # (gpu, model, batch, tp, isl, osl, out tok/s total)
    ("H100", "LLaMA 7B", 64, 1, 128, 128, 9193), ("H100", "LLaMA 7B", 64, 1, 128, 2048, 5367),
    ("H100", "LLaMA 7B", 64, 1, 2048, 128, 2058), ("H100", "LLaMA 7B", 32, 1, 2048, 2048, 2230),
    ("H100", "LLaMA 70B", 64, 4, 128, 128, 3317), ("H100", "LLaMA 70B", 64, 4, 128, 2048, 2616),
    ("H100", "LLaMA 70B", 64, 4, 2048, 128, 843), ("H100", "LLaMA 70B", 64, 4, 2048, 2048, 1583),
    ("L40S", "LLaMA 7B", 64, 1, 128, 128, 3240), ("L40S", "LLaMA 7B", 64, 1, 128, 2048, 1622),
    ("L40S", "LLaMA 7B", 32, 1, 2048, 128, 581), ("L40S", "LLaMA 7B", 16, 1, 2048, 2048, 531),
    ("A100", "LLaMA 7B", 64, 1, 128, 128, 3486), ("A100", "LLaMA 7B", 32, 1, 128, 2048, 1459),
    ("A100", "LLaMA 7B", 32, 1, 2048, 128, 529), ("A100", "LLaMA 7B", 16, 1, 2048, 2048, 592),
    ("A100", "LLaMA 70B", 64, 4, 128, 128, 1237), ("A100", "LLaMA 70B", 64, 4, 128, 2048, 1181),
    ("A100", "LLaMA 70B", 64, 4, 2048, 128, 272), ("A100", "LLaMA 70B", 64, 4, 2048, 2048, 738),
]

# --- H200 launch blog (v0.5.0, per GPU, FP8) ------------------------------------------------------------
# runtime trt-llm@0.5: the blog's table footnote reads 'TensorRT-LLM v0.5.0, TensorRT v9.1.0.4' (and its header
# note 'The below data is using TensorRT-LLM v0.5'); the v0.5.0 / v0.6.1 tables run as trt-llm@0.5 / @0.6
# (runtimes/trt-llm.yaml: no GQA generation kernel before v0.7)
SRC_H200 = dict(
    source="NVIDIA TensorRT-LLM blog 'H200 achieves nearly 12,000 tokens/sec on Llama2-13B with TensorRT-LLM' "
           "(docs/source/blogs/H200launch.md; TensorRT-LLM v0.5.0, TensorRT 9.1.0.4)",
    publication="trtllm-blog-h200-launch")
LOC_H200 = ("github NVIDIA/TensorRT-LLM@1555478c1b417a0b34de05209862ea5a2ab9add1 docs/source/blogs/H200launch.md "
            "table 'H200 FP8 Max throughput', row {model} / batch {b} / TP {tp} / {isl}/{osl}, column "
            "'Throughput (out tok/s/GPU)'")
H200LAUNCH = [
    ("llama_13b", 1024, 1, 128, 128, 11819), ("llama_13b", 128, 1, 128, 2048, 4750),
    ("llama_13b", 64, 1, 2048, 128, 1349),
    ("llama_70b", 512, 1, 128, 128, 3014), ("llama_70b", 512, 2, 128, 2048, 1654),
    ("llama_70b", 64, 1, 2048, 128, 341), ("llama_70b", 32, 1, 2048, 128, 303),
]

# --- Falcon180B-H200 blog (v0.7a, Llama2-70B FP8 on 1xH200) --------------------------------------------
SRC_F180 = dict(
    source="NVIDIA TensorRT-LLM blog 'Falcon-180B on a single H200 GPU with INT4 AWQ, and 6.7x faster Llama-70B "
           "over A100' (docs/source/blogs/Falcon180B-H200.md; TensorRT-LLM v0.7a)",
    publication="trtllm-blog-falcon180b-h200")
LOC_F180 = ("github NVIDIA/TensorRT-LLM@3c44cb974badec8966108b16054a99c0923e410d docs/source/blogs/Falcon180B-H200.md "
            "section 'Llama-70B on H200 up to 6.7x A100', table row GPUs=1 / {isl}/{osl}, column 'Throughput (out "
            "tok/s/GPU)'; batch from the caption 'BS: (in order) 960, 960, 192, 560, 96, 640'")
F180 = [(960, 128, 128, 3803), (192, 128, 2048, 2941), (96, 128, 4096, 1946)]


def trt_rows():
    for gpu, model, b, tp, isl, osl, v in TRT09_TPUT:
        hw, dt = TRT_HW[gpu]
        prec = "FP8" if dt == "fp8" else "FP16"
        total = v * tp
        add(source_group=f"trtllm09-tput-{gpu.lower()}", metric="tokens_per_s_e2e", value=fmt(total),
            model=TRT_MODEL[model], hardware=hw, n_devices=tp, weight_dtype=dt, kv_dtype=KV[dt], runtime="trt-llm@0.9", batch_size=b,
            prompt_len=isl, gen_len=osl, strategy="autoregressive",
            source_locator=LOC_TRT09.format(gpu=gpu, prec=prec, model=model, b=b, tp=tp, isl=isl, osl=osl),
            reliability="table value" if tp == 1 else "table value x TP (per-GPU figure times TP)",
            notes=(f"published {v} out tok/s/GPU" + (f" x TP {tp} = whole-system {total}" if tp > 1 else "")
                   + f"; static batch of {b} (gptSessionBenchmark), throughput counts the context phase; "
                   + TRT_HW_NOTE[hw] + ("; FP8 weights/activations and FP8 KV cache" if dt == "fp8" else "")),
            throughput_definition="e2e", **SRC_TRT09)
    for gpu, model, tp, isl, ms in TRT09_TTFT:
        hw, dt = TRT_HW[gpu]
        prec = "FP8" if dt == "fp8" else "FP16"
        add(source_group=f"trtllm09-ttft-{gpu.lower()}", metric="ttft_s", value=fmt(ms / 1000.0),
            model=TRT_MODEL[model], hardware=hw, n_devices=tp, weight_dtype=dt, kv_dtype=KV[dt], runtime="trt-llm@0.9", batch_size=1,
            prompt_len=isl, gen_len=1, strategy="autoregressive",
            source_locator=(f"github NVIDIA/TensorRT-LLM docs/source/performance.md (v0.9.0 revision; search-index "
                            f"file id 5995251461) '## Low Latency' table '### {gpu} GPUs ({prec})', row {model} / "
                            f"batch 1 / TP {tp} / input {isl}, column '1st Token Latency (ms)'"),
            reliability="table value",
            notes=(f"{ms} ms; measured as gptSessionBenchmark with output length 1 at batch 1 (the doc's "
                   "'Reproducing First Token Latency'); " + TRT_HW_NOTE[hw]), **SRC_TRT09)
    for model, b, tp, isl, osl, v in TRT061_H100:
        total = v * tp
        add(source_group="trtllm061-tput-h100", metric="tokens_per_s_e2e", value=fmt(total),
            model=TRT_MODEL[model], hardware="h100-sxm", n_devices=tp, weight_dtype="fp8", kv_dtype="fp8", runtime="trt-llm@0.6",
            batch_size=b, prompt_len=isl, gen_len=osl, strategy="autoregressive",
            source_locator=LOC_TRT061.format(gpu="H100", prec="FP8", model=model, b=b, tp=tp, isl=isl, osl=osl,
                                             col="Throughput (out tok/s/GPU)"),
            reliability="table value" if tp == 1 else "table value x TP (per-GPU figure times TP)",
            notes=(f"published {v} out tok/s/GPU" + (f" x TP {tp} = whole-system {total}" if tp > 1 else "")
                   + f"; static batch of {b}; H100-HBM3-80GB (SXM); FP8 with FP8 KV cache"),
            throughput_definition="e2e", **SRC_TRT061)
    for model, b, tp, isl, osl, v in TRT061_A100_TP1:
        add(source_group="trtllm061-tput-a100", metric="tokens_per_s_e2e", value=fmt(v),
            model=TRT_MODEL[model], hardware="a100-80gb", n_devices=tp, weight_dtype="fp16", runtime="trt-llm@0.6",
            batch_size=b, prompt_len=isl, gen_len=osl, strategy="autoregressive",
            source_locator=LOC_TRT061.format(gpu="A100", prec="FP16", model=model, b=b, tp=tp, isl=isl, osl=osl,
                                             col="Throughput (out tok/s)"),
            reliability="table value",
            notes=(f"static batch of {b}; " + TRT_HW_NOTE["a100-80gb"] + "; the TP>1 A100 rows of this table are "
                   "left out (header 'out tok/s', while the H100 table of the same revision is per GPU: ambiguous)"),
            throughput_definition="e2e", **SRC_TRT061)
    for gpu, model, b, tp, isl, osl, v in TRT05:
        hw, dt = TRT_HW[gpu]
        prec = "FP8" if dt == "fp8" else "FP16"
        add(source_group=f"trtllm05-tput-{gpu.lower()}", metric="tokens_per_s_e2e", value=fmt(v),
            model=TRT_MODEL[model], hardware=hw, n_devices=tp, weight_dtype=dt, kv_dtype=KV[dt], runtime="trt-llm@0.5", batch_size=b,
            prompt_len=isl, gen_len=osl, strategy="autoregressive",
            source_locator=LOC_TRT05.format(gpu=gpu, prec=prec, model=model, b=b, tp=tp, isl=isl, osl=osl),
            reliability="table value",
            notes=(f"static batch of {b}; whole-system throughput (v0.5 header 'out tok/s'; per-GPU reading would "
                   "exceed the weight-bandwidth bound for the TP4 70B rows); " + TRT_HW_NOTE[hw]
                   + ("; FP8 with FP8 KV cache (build flags --enable_fp8 --fp8_kv_cache)" if dt == "fp8" else "")),
            throughput_definition="e2e", **SRC_TRT05)
    for model, b, tp, isl, osl, v in H200LAUNCH:
        total = v * tp
        add(source_group="trtllm-blog-h200launch", metric="tokens_per_s_e2e", value=fmt(total),
            model=TRT_MODEL[model], hardware="h200", n_devices=tp, weight_dtype="fp8", kv_dtype="fp8", runtime="trt-llm@0.5",
            batch_size=b, prompt_len=isl, gen_len=osl, strategy="autoregressive",
            source_locator=LOC_H200.format(model=model, b=b, tp=tp, isl=isl, osl=osl),
            reliability="table value" if tp == 1 else "table value x TP (per-GPU figure times TP)",
            notes=(f"published {v} out tok/s/GPU" + (f" x TP {tp} = whole-system {total}" if tp > 1 else "")
                   + f"; static batch of {b} ('largest batch supported on given TP configuration by power of 2'); "
                   "'llama_13b'/'llama_70b' read as Llama-2-13B/70B (the blog's title says Llama2-13B); "
                   "preliminary H200 numbers"),
            throughput_definition="e2e", **SRC_H200)
    for b, isl, osl, v in F180:
        add(source_group="trtllm-blog-falcon180b-h200", metric="tokens_per_s_e2e", value=fmt(v),
            model="llama-2-70b", hardware="h200", n_devices=1, weight_dtype="fp8", kv_dtype="fp8", runtime="trt-llm", batch_size=b,
            prompt_len=isl, gen_len=osl, strategy="autoregressive",
            source_locator=LOC_F180.format(isl=isl, osl=osl), reliability="table value",
            notes=(f"1xH200 TP1, FP8, static batch {b}; blog defines out_tps=output_seqlen*batch_size/total_latency/tp;"
                   " v0.7a with the new GQA generation kernels; preliminary; FP8 KV cache not stated but implied: "
                   "at batch 960 and 256 tokens an fp16 KV cache (320 KiB/token) is 80 GB, which with the 69 GB of "
                   "FP8 weights exceeds the H200's 141 GB"),
            throughput_definition="e2e", **SRC_F180)


# ---------------------------------------------------------------------------------------------------
# ROCm vLLM dev-docker README: MI300X, vLLM v0.10.0 (ROCm 6.4.1), benchmark_latency.py (v0.8.5 scripts):
# end-to-end latency of one batch of B prompts, input 128 or 2048, output 2048, TP8, FP8 weights and
# activations (Quark w_fp8_a_fp8, the 'FP8-KV' checkpoints). KV cache 16-bit: the README's latency
# command passes '--dtype float16' and no '--kv-cache-dtype' (its throughput command passes
# '--kv-cache-dtype fp8' and says 'For FP16 models, remove --kv-cache-dtype fp8'), so vLLM's
# kv_cache_dtype 'auto' stores K/V in the model dtype, float16.
SRC_ROCM = dict(
    source="ROCm/vllm docs/dev-docker/README.md 'vllm FP8 Latency and Throughput benchmarks with vLLM on the AMD "
           "Instinct MI300X accelerator' (rocm/vllm-dev:main, vLLM v0.10.0, ROCm 6.4.1)",
    publication="rocm-vllm-dev-docker-v0.10.0")
LOC_ROCM = ("github ROCm/vllm@040de12d45c16d6de6ad386cc57dd68b8c5b805e docs/dev-docker/README.md '### Latency "
            "Measurements' table, row {model} / TP 8 / batch {b} / input {isl} / output 2048, column 'MI300X Latency (sec)'")
ROCM_LAT = {
    ("Llama 3.1 70B", 128): [17.236, 18.057, 18.450, 19.677, 22.072, 24.932, 33.287, 46.484],
    ("Llama 3.1 70B", 2048): [17.500, 18.055, 18.858, 20.161, 22.347, 25.966, 35.324, 52.394],
    ("Llama 3.1 405B", 128): [48.453, 49.268, 51.136, 54.226, 57.274, 68.901, 88.631, 117.027],
    ("Llama 3.1 405B", 2048): [48.362, 49.121, 52.347, 54.471, 57.841, 70.538, 91.452, 125.471],
}
ROCM_MODEL = {"Llama 3.1 70B": "llama-3.1-70b", "Llama 3.1 405B": "llama-3.1-405b"}


def rocm_rows():
    for (model, isl), lats in ROCM_LAT.items():
        for b, lat in zip([1, 2, 4, 8, 16, 32, 64, 128], lats):
            add(source_group="rocm-vllm-mi300x-latency", metric="e2e_latency_s", value=fmt(lat),
                model=ROCM_MODEL[model], hardware="mi300x", n_devices=8, weight_dtype="fp8", kv_dtype="fp16", runtime="vllm",
                batch_size=b, prompt_len=isl, gen_len=2048, strategy="autoregressive",
                source_locator=LOC_ROCM.format(model=model, b=b, isl=isl), reliability="table value",
                notes=("vLLM benchmark_latency.py (one batch, prefill + 2048 decode steps, mean of 5 iterations); "
                       "8x MI300X 192GB 750W (Supermicro AS-8125GS-TNMR2), TP8 over Infinity Fabric; "
                       f"amd/{model.replace(' ', '-')}-Instruct-FP8-KV (FP8 weights/activations); KV cache fp16: "
                       "the latency command ('--dtype float16', no '--kv-cache-dtype') leaves vLLM's kv_cache_dtype "
                       "at 'auto' = the model dtype, while the throughput command adds '--kv-cache-dtype fp8' "
                       "('For FP16 models, remove --kv-cache-dtype fp8'); prefill: 'Benchmarks were run with "
                       "benchmark scripts from v0.8.5', whose benchmark_latency.py sends the same dummy prompts in "
                       "the warm-up and every timed iteration, and V1 enables prefix caching by default (vLLM PR "
                       "18639 disabled it in the benchmarks later): the timed prefills are mostly prefix-cache hits, "
                       "which the model does not represent (it prices the full prefill); the 405B batch-128 rows "
                       "differ by 8.4 s between inputs 2048 and 128, less than the 9.5 s that 128 x 1920 more "
                       "prompt tokens take at the full fp8 peak; "
                       "the README's throughput table is left out: its 'Throughput (tokens/s)' does not say whether "
                       "input tokens are counted"),
                **SRC_ROCM)


# ---------------------------------------------------------------------------------------------------
# vLLM V1 EAGLE-1 / EAGLE-3 chain speculation, Llama-3.1-8B-Instruct, batch 1, MT-Bench, TPOT from
# benchmark_serving (excludes the first token). GitHub issue vllm-project/vllm#20780 (2025-07-10).
# calibrate=no: the issue names neither the GPU (H100 inferred) nor the lengths, so these rows are
# predicted and reported but do not calibrate the vllm profile (an inferred device would make a fitted
# runtime parameter stand in for a hardware guess)
SRC_VLLM_EAGLE = dict(
    calibrate="no",
    source="vllm-project/vllm issue #20780 (ekagra-ranjan, 2025-07-10): EAGLE-1 vs EAGLE-3 acceptance length and "
           "TPOT on Llama-3.1-8B-Instruct, MT-Bench, BS 1",
    publication="vllm-issue-20780-eagle3")
VLLM_AL = {2: (2.1, 2.36), 3: (2.29, 2.79), 4: (2.39, 3.08), 5: (2.43, 3.32), 6: (2.45, 3.46), 7: (2.47, 3.54)}
VLLM_TPOT = {2: (4.37, 4.32), 3: (4.29, 4.09), 4: (4.48, 4.05), 5: (4.71, 4.13), 6: (4.94, 4.2), 7: (5.2, 4.29)}
VLLM_NOTE = ("GPU not named in the issue: H100 (SXM) assumed from the same author's runs in vllm PR #16937 "
             "('Output tokens/s on H100 BS1', same model and drafts) and the tracking issue #17812; "
             "MT-Bench prompt/output lengths not stated: prompt_len 128 and gen_len 256 assumed; bf16 assumed "
             "(vLLM default for the checkpoint); TPOT excludes the first token")


def vllm_eagle_rows():
    loc = "github vllm-project/vllm issue #20780, description, table 'TPOT ms' (BS 1), row K={k}, column '{col}'"
    add(source_group="vllm-eagle3-h100", metric="time_per_output_token_s", value=fmt(7.07 / 1000.0),
        model="llama-3.1-8b", hardware="h100-sxm", n_devices=1, weight_dtype="bf16", runtime="vllm", batch_size=1,
        prompt_len=128, gen_len=256, strategy="autoregressive",
        source_locator=loc.format(k="2..7", col="vanilla"), reliability="table value (GitHub issue)",
        notes="vanilla 7.07 ms (same value in every K row); " + VLLM_NOTE, **SRC_VLLM_EAGLE)
    for k in range(2, 8):
        for i, (dm, col) in enumerate([("eagle", "EAGLE 1"), ("eagle3", "EAGLE 3")]):
            add(source_group="vllm-eagle3-h100", metric="time_per_output_token_s",
                value=fmt(VLLM_TPOT[k][i] / 1000.0), model="llama-3.1-8b", hardware="h100-sxm", n_devices=1,
                weight_dtype="bf16", runtime="vllm", batch_size=1, prompt_len=128, gen_len=256,
                strategy="speculative", draft_model=dm, gamma=k, mean_accepted_tokens=VLLM_AL[k][i],
                source_locator=loc.format(k=k, col=col) + f"; acceptance length from table 'AL', row K={k}, column "
                               f"'{'Eagle 1' if i == 0 else 'Eagle 3'}'",
                reliability="table value (GitHub issue)",
                notes=(f"{col} draft (yuhuili/{'EAGLE' if i == 0 else 'EAGLE3'}-LLaMA3.1-Instruct-8B), chain of "
                       f"K={k} draft tokens (vLLM num_speculative_tokens), AL {VLLM_AL[k][i]} per the source "
                       "(tokens per target step incl. the bonus token); " + VLLM_NOTE),
                **SRC_VLLM_EAGLE)


# ---------------------------------------------------------------------------------------------------
# SGLang EAGLE-2 / EAGLE-3 at batch 1 on one H100, Llama-3.1-8B-Instruct, MT-Bench 80 questions.
SRC_SGL = dict(
    source="sgl-project/sglang PR #4247 '[Feature] Support EAGLE 3' (comment by chromecast56, 2025-03-10, with CUDA "
           "graphs); hardware per hongyanz in hemingkx/Spec-Bench issue #22 ('~380 Tokens/s on a single H100 for "
           "LLama 3.1 8B', pointing at this PR)",
    publication="sglang-pr-4247-eagle3")
SGL = [("eagle3", 8, 378.57, 5.39, "EAGLE-3 (num_steps=8)"), ("eagle3", 5, 361.70, 4.68, "EAGLE-3 (num_steps=5)"),
       ("eagle", 8, 230.08, 3.76, "EAGLE-2 (num_steps=8)")]


def sglang_rows():
    for dm, steps, tput, al, label in SGL:
        add(source_group="sglang-eagle3-h100", metric="tokens_per_s_e2e", value=fmt(tput), model="llama-3.1-8b",
            hardware="h100-sxm", n_devices=1, weight_dtype="bf16", runtime="compiled", batch_size=1,
            prompt_len=128, gen_len=256, strategy="tree", draft_model=dm, tree_depth=steps,
            mean_accepted_tokens=al,
            source_locator=(f"github sgl-project/sglang PR #4247, comment 'Ah sorry, I didn't run it with cuda graphs. "
                            f"See updated results', line '{label}: #questions: 80, Throughput: {tput} token/s, "
                            f"Acceptance length: {al}'"),
            reliability="PR comment value",
            notes=("SGLang EAGLE tree decoding, --speculative-num-steps as given; topk and num_draft_tokens not "
                   "stated (tree_nodes left blank); batch 1 assumed (questions run one at a time, the benchmark "
                   "reports output tokens / wall time incl. prefill); H100 SXM assumed; MT-Bench lengths not "
                   "stated: prompt_len 128, gen_len 256 assumed; bf16 assumed; SGLang mapped to runtime "
                   "'compiled' as in measurements.csv"),
            throughput_definition="e2e", **SRC_SGL)


# ---------------------------------------------------------------------------------------------------
# llama.cpp batch-1 decode (./main eval rate), before and after CUDA graphs.
def llamacpp_rows():
    src = dict(source="ggml-org/llama.cpp PR #6766 'Introduction of CUDA Graphs to LLama.cpp' (JohannesGaessler "
                      "comment, 2024-04-19)", publication="llamacpp-pr-6766-cuda-graphs")
    for hw, gpu, master, pr in [("rtx-4090", "1x RTX 4090", 138.31, 146.81), ("rtx-3090", "1x RTX 3090", 116.31, 128.27)]:
        for label, v in [("t/s master", master), ("t/s PR", pr)]:
            add(source_group="llamacpp-cudagraphs-jg", metric="tokens_per_s_per_seq", value=fmt(v),
                model="llama-2-7b", hardware=hw, n_devices=1, weight_dtype="int4", runtime="llama.cpp",
                batch_size=1, prompt_len=1, gen_len=128, strategy="autoregressive",
                source_locator=(f"github ggml-org/llama.cpp PR #6766, comment by JohannesGaessler 2024-04-19 "
                                f"'Results for LLaMA 2 7b q4_0', row '{gpu} | ./main tg', column '{label}'"),
                reliability="table value (PR comment)",
                notes=("GGUF Q4_0; " + ("without CUDA graphs (master)" if label == "t/s master" else
                                        "with the PR's CUDA graphs")
                       + "; ./main token-generation rate (eval time, prompt excluded); prompt and generation length "
                         "not stated: prompt_len 1, gen_len 128 assumed"),
                throughput_definition="decode_only", **src)
    src = dict(source="ggml-org/llama.cpp issue #6763 'New optimization from NVIDIA to use CUDA Graphs in llama.cpp' "
                      "(agray3, 2024-04-19)", publication="llamacpp-issue-6763-cuda-graphs")
    for label, v in [("before", 143.35), ("after", 163.83)]:
        add(source_group="llamacpp-cudagraphs-agray3", metric="tokens_per_s_per_seq", value=fmt(v),
            model="llama-2-7b", hardware="h100-pcie", n_devices=1, weight_dtype="int4", runtime="llama.cpp",
            batch_size=1, prompt_len=1, gen_len=128, strategy="autoregressive",
            source_locator=("github ggml-org/llama.cpp issue #6763, description: 'inference for llama-2-7b.Q4_K_M on "
                            "H100-PCIe (with --n-gpu-layers 100 -n 128) the performance goes from 143.35 to 163.83 "
                            "tokens per second'"),
            reliability="text value (issue description)",
            notes=("GGUF Q4_K_M (per-tensor Q4_K/Q6_K mix; the model's int4 layout is an approximation); "
                   + ("llama.cpp master without CUDA graphs" if label == "before" else "with CUDA graphs (agray3 branch)")
                   + "; -n 128; prompt length not stated: prompt_len 1 assumed; decode rate as printed by ./main"),
            throughput_definition="decode_only", **src)


# ---------------------------------------------------------------------------------------------------
# MLC-LLM multi-GPU blog (2023-10-19): Llama2-70B 4-bit on two RTX 4090 (PCIe), batch 1.
def mlc_rows():
    add(source_group="mlc-multigpu-2x4090", metric="tokens_per_s_per_seq", value=fmt(34.5), model="llama-2-70b",
        hardware="rtx-4090", n_devices=2, weight_dtype="int4", runtime="mlc", batch_size=1, prompt_len=64,
        gen_len=256, strategy="autoregressive",
        source="MLC blog 'Scalable Language Model Inference on Multiple NVIDIA and AMD GPUs' (2023-10-19)",
        source_locator=("https://blog.mlc.ai/2023/10/19/Scalable-Language-Model-Inference-on-Multiple-NVDIA-AMD-GPUs, "
                        "TL;DR: 'we run 4-bit quantized Llama2-70B at 34.5 tok/sec on two NVIDIA RTX 4090'"),
        reliability="text value (blog TL;DR)",
        notes=("MLC q4f16 4-bit weights, tensor parallel over 2 GPUs (PCIe, no NVLink on RTX 4090); single-stream "
               "decode rate; prompt/generation lengths not stated in the TL;DR: prompt_len 64, gen_len 256 assumed"),
        publication="mlc-blog-2023-10-multigpu", throughput_definition="decode_only")


#: rows the model cannot express yet, with the reason: written to ``excluded_serving.csv`` instead of
#: ``measurements_serving.csv`` (predicate on the row -> reason; the first that matches)
EXCLUDE = [
    (lambda r: r["model"].startswith("llama-2") and int(r["prompt_len"]) + int(r["gen_len"]) > 4096,
     "prompt_len + gen_len (128 + 4096) exceeds Llama-2's 4096-token context, which costmodel refuses "
     "(max_context); the engine ran past the trained length"),
    (lambda r: r["strategy"] == "tree" and not r["tree_nodes"] and not r["tree_parents"],
     "SGLang EAGLE tree: topk and num_draft_tokens are not stated, so the tree's node count is unknown (only the "
     "depth and the acceptance length are)"),
]


def excluded_reason(row: dict) -> str | None:
    for pred, why in EXCLUDE:
        if pred(row):
            return why
    return None


def main(out_dir: str = HERE):
    """Write ``measurements_serving.csv`` and ``excluded_serving.csv`` into ``out_dir`` (this folder by
    default); the rows are rebuilt from the tables above on every call."""
    ROWS.clear()
    trt_rows()
    rocm_rows()
    vllm_eagle_rows()
    sglang_rows()
    llamacpp_rows()
    mlc_rows()
    for i, r in enumerate(ROWS, start=1):
        r["id"] = f"VS{i:03d}"
    keep = [r for r in ROWS if excluded_reason(r) is None]
    left = [r for r in ROWS if excluded_reason(r) is not None]
    out = os.path.join(out_dir, "measurements_serving.csv")
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(keep)
    ex = os.path.join(out_dir, "excluded_serving.csv")
    with open(ex, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["id", "publication", "metric", "reason"], lineterminator="\n")
        w.writeheader()
        w.writerows({"id": r["id"], "publication": r["publication"], "metric": r["metric"],
                     "reason": excluded_reason(r)} for r in left)
    print(f"wrote {len(keep)} rows to {out} and {len(left)} to {ex}")


if __name__ == "__main__":
    main()

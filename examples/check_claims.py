"""Checking claims found on the web: write them as a claims file, get a verdict and a reason each.
Run:  python examples/check_claims.py [OUTPUT_DIR]

The full example with every claim of an article is scenarios/article_claims.yaml
(`costmodel check scenarios/article_claims.yaml`).
"""

import sys
from pathlib import Path

import yaml

import costmodel

out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".")
claims = {
    "claims": [
        {"id": "7b-on-t4", "text": "Llama-2-7B does 40 tokens/s on a T4 at batch 1",
         "model": "llama-2-7b", "hardware": "t4", "batch_size": 1, "prompt_len": 512,
         "metric": "tokens_per_s_per_seq", "value": 40},
        {"id": "70b-on-one-a100", "text": "Llama-2-70B in fp16 runs at 50 tokens/s on one A100-40GB",
         "model": "llama-2-70b", "hardware": "a100-40gb", "batch_size": 1, "prompt_len": 512,
         "metric": "tokens_per_s_per_seq", "value": 50},
        {"id": "spec-3x", "text": "speculative decoding with a 68M draft gives 3x on an A100",
         "model": "llama-2-7b", "hardware": "a100-80gb", "batch_size": 1, "prompt_len": 512,
         "strategy": "speculative", "draft_model": "llama-68m", "gamma": 4, "acceptance_rate": 0.6,
         "metric": "speedup_vs_ar", "value": 3.0},
    ]
}
path = out_dir / "my_claims.yaml"
path.write_text(yaml.safe_dump(claims, sort_keys=False))

result = costmodel.check(str(path))            # the same as: costmodel check my_claims.yaml
for c in result["claims"]:
    print(f"{c['id']:16s} {c['verdict']:12s} {c['reason']}")
print("summary:", result["summary"])

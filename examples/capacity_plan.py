"""Capacity plan with prices: how many GPUs of which kind serve Llama-2-70B at 30 ms per token, and
what does it cost?  Run:  python examples/capacity_plan.py [OUTPUT_DIR]

Prices are the illustrative figures of scenarios/prices_example.yaml (put your own there).
"""

import sys
from pathlib import Path

import costmodel

REPO = Path(__file__).resolve().parents[1]
PRICES = REPO / "scenarios" / "prices_example.yaml"

workload = {
    "model": "llama-2-70b",
    "weight_dtype": "bf16",
    "batch_size": 16,              # sequences decoding together
    "prompt_len": 3968,
    "gen_len": 128,
    "hardware": "a100-80gb,h100-sxm,h200",   # several options: the cheapest feasible one wins
}
answer = costmodel.plan(workload, targets={"time_per_output_token_s": 0.030}, prices=str(PRICES))

print(f"best: {answer['n_devices']} x {answer['hardware']} (TP {answer['tensor_parallel']} x "
      f"PP {answer['pipeline_parallel']}), {answer['time_per_output_token_s'] * 1e3:.1f} ms per token, "
      f"{answer['cost_per_hour']:.2f} {answer['currency']}/h")
print(f"why: {answer['reason']}")
if answer.get("note"):
    print(f"note: {answer['note']}")
for option in answer["options"]:
    print(f"  {option['hardware']:10s} {option['n_devices']:2d} devices  "
          f"{option['time_per_output_token_s'] * 1e3:6.1f} ms/token  {option['cost_per_hour']:6.2f}/h  "
          f"binding: {option['binding_constraint']}")

# the same plan with headroom for the model's error (the validation error band)
safe = costmodel.plan(workload, targets={"time_per_output_token_s": 0.030}, prices=str(PRICES), margin="band")
print(f"with the error band as margin: {safe['n_devices']} x {safe['hardware']}, planned for "
      f"{safe['targets_with_margin']['target_time_per_output_token_s'] * 1e3:.1f} ms per token")

if len(sys.argv) > 1:                      # optional: keep the answer as JSON
    import json
    out = Path(sys.argv[1]) / "capacity_plan.json"
    out.write_text(json.dumps({k: v for k, v in answer.items() if k != "candidates"}, indent=1, default=str))
    print(f"wrote {out}")

"""Scenarios: one workload, several strategies and/or hardware, compared in one table.

Format (YAML)::

    name: walkthrough
    description: one paragraph
    base: {model: llama-2-70b, batch_size: 8, prompt_len: 2048, gen_len: 128}   # any record fields
    hardware:                        # ids, or mappings of record fields (e.g. n_devices)
      - a100-80gb
      - {hardware: a100-40gb, n_devices: 4, label: "4 x A100-40GB"}
    strategies:                      # record fields per strategy; 'label' names the row
      - {strategy: autoregressive}
      - {strategy: speculative, draft_model: sheared-llama-1.3b, gamma: 5, acceptance_rate: 0.6}

Every (hardware, strategy) pair is evaluated; mapping entries override ``base``.
"""

from __future__ import annotations

import os

from costmodel.errors import InputError, shown
from costmodel.engine.evaluate import evaluate
from costmodel.inputs.file_kind import refuse_other_kind
from costmodel.inputs.specs import Fields, load_yaml

SCENARIO_KEYS = ("name", "description", "base", "hardware", "strategies", "notes", "article_figures")


def load_scenario(path) -> dict:
    data = load_yaml(path)
    src = str(path)
    refuse_other_kind(data, src, "scenario")
    f = Fields(data, src)
    f.check_keys(SCENARIO_KEYS)
    f.text("name", required=False)
    f.text("description", required=False)
    f.sub("base")
    if not f.items("strategies"):
        raise InputError("needs at least one entry", source=src, field="strategies")
    return data


def _entry(x, src, field, key):
    if isinstance(x, str):
        return {key: x}
    if isinstance(x, dict):
        label = x.get("label")
        if label is not None and (isinstance(label, bool) or not isinstance(label, (str, int, float))):
            raise InputError(f"must be text, got {shown(label)}", source=src, field=f"{field}.label")
        return dict(x)
    raise InputError(f"each entry must be an id or a mapping, got {shown(x)}", source=src, field=field)


PATH_FIELDS = ("model", "hardware", "draft_model", "runtime")


def _paths_relative_to(rec: dict, scenario_path: str) -> None:
    """File paths inside a scenario are relative to the scenario's folder (when they exist there)."""
    base = os.path.dirname(os.path.abspath(scenario_path))
    for k in PATH_FIELDS:
        v = rec.get(k)
        if isinstance(v, str) and ("/" in v or v.endswith((".yaml", ".yml", ".json"))) and not os.path.isabs(v):
            cand = os.path.join(base, v)
            if os.path.exists(cand):
                rec[k] = cand


def run_scenario(path) -> dict:
    """Evaluate every (hardware, strategy) pair; returns {'scenario', 'description', 'results'}."""
    data = load_scenario(path)
    src = str(path)
    base = dict(data["base"])
    hws = [_entry(h, src, "hardware", "hardware") for h in (Fields(data, src).items("hardware", required=False)
                                                            or [{}])]
    results = []
    for i, h in enumerate(hws):
        for j, s in enumerate(data["strategies"]):
            s = _entry(s, src, f"strategies[{j}]", "strategy")
            rec = dict(base)
            rec.update({k: v for k, v in h.items() if k != "label"})
            rec.update({k: v for k, v in s.items() if k != "label"})
            hw_label = h.get("label")
            label = s.get("label") or rec.get("strategy", "autoregressive")
            _paths_relative_to(rec, src)
            try:
                out = evaluate(rec)
            except InputError as exc:
                raise InputError(f"in hardware[{i}] × strategies[{j}]: {exc}", source=src) from None
            row = {"label": label}
            if hw_label:
                row["hardware_label"] = hw_label
            row.update(out)
            results.append(row)
    return {"scenario": data.get("name", src), "description": data.get("description", ""), "results": results}

"""The sourced claim files of current public claims (scenarios/claims/): each parses, every claim gets a
verdict, and every claim names its source. The verdicts are not pinned (they move with calibration),
except the memory ones, which follow from sizes worked out by hand."""

import glob
import os

import pytest

from costmodel import check
from costmodel.inputs.specs import load_yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILES = sorted(glob.glob(os.path.join(ROOT, "scenarios", "claims", "*.yaml")))
VERDICTS = {"consistent", "optimistic", "pessimistic", "impossible", "inconsistent", "not_checkable"}


def test_at_least_five_claim_files():
    assert len(FILES) >= 5


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_claim_file_parses_and_gets_verdicts(path):
    data = load_yaml(path)
    assert all(c.get("source") for c in data["claims"]), "every claim names its source"
    out = check(path)
    assert len(out["claims"]) == len(data["claims"])
    for c in out["claims"]:
        assert c["verdict"] in VERDICTS and c["reason"]
    assert any(c["verdict"] != "not_checkable" for c in out["claims"])


def test_size_claims_follow_from_the_weights():
    # llama-3.1-405b in int4 over 2 devices: ≥ 405e9 · 0.5 B / 2 ≈ 101 GB of weights per device, under the
    # H200's 141 GB; gpt-oss-120b: 117e9 params · 4.25 bits / 8 ≈ 62 GB of MXFP4 weights, under 80 GB.
    for name in ("llama_3_1_405b_int4_two_h200.yaml", "gpt_oss_120b_one_h100.yaml"):
        out = check(os.path.join(ROOT, "scenarios", "claims", name))
        assert out["claims"][0]["verdict"] == "consistent"

"""Messages that point a new user at what to do next: "did you mean" that ranks the obvious match first,
files of another kind recognised by every command that reads a file."""

from __future__ import annotations

import pytest

from costmodel.cli.main import main
from costmodel.errors import suggest


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# ------------------------------------------------------------------------ did you mean

def test_prefix_matches_come_before_edit_distance():
    # 'h100' is the start of two ids; v100 and h200 are one edit away but are other devices
    hint = suggest("h100", ["a100-80gb", "h100-pcie", "h100-sxm", "h200", "v100"])
    assert hint == " (did you mean h100-sxm, h100-pcie?)"


def test_contained_name_is_offered():
    assert "llama-2-7b" in suggest("llama-2-7b-chat", ["llama-2-7b", "llama-2-13b", "llama-3-8b"])


def test_edit_distance_still_used_when_nothing_obvious():
    assert suggest("specultive", ["autoregressive", "speculative", "tree"]) == " (did you mean speculative?)"


def test_hardware_h100_suggests_both_h100s_first(capsys):
    rc, out, err = run_cli(capsys, "eval", "model=llama-2-7b", "hardware=h100", "batch_size=1", "prompt_len=8")
    assert rc == 2
    assert "did you mean h100-sxm, h100-pcie?" in err


@pytest.mark.parametrize("name", ["target_tpot", "target_tpot_s", "target_itl_s"])
def test_plan_target_short_name_suggests_time_per_output_token(capsys, name):
    rc, out, err = run_cli(capsys, "plan", "model=llama-2-7b", "hardware=h100-sxm", "prompt_len=8", f"{name}=0.05")
    assert rc == 2
    assert "did you mean target_time_per_output_token_s" in err


# ------------------------------------------------------------------------ files of another kind

@pytest.mark.parametrize("argv, kind, command", [
    (["run", "scenarios/article_claims.yaml"], "a claims file", "costmodel check scenarios/article_claims.yaml"),
    (["run", "scenarios/prices_example.yaml"], "a prices file", "--prices scenarios/prices_example.yaml"),
    (["check", "scenarios/walkthrough.yaml"], "a scenario file", "costmodel run scenarios/walkthrough.yaml"),
    (["check", "scenarios/prices_example.yaml"], "a prices file", "costmodel plan"),
    (["plan", "model=llama-2-7b", "prompt_len=8", "--prices", "scenarios/walkthrough.yaml"], "a scenario file",
     "costmodel run scenarios/walkthrough.yaml"),
    (["plan", "model=llama-2-7b", "prompt_len=8", "--prices", "scenarios/article_claims.yaml"], "a claims file",
     "costmodel check scenarios/article_claims.yaml"),
])
def test_file_of_another_kind_names_the_command_that_reads_it(capsys, monkeypatch, argv, kind, command):
    import os
    monkeypatch.chdir(os.path.join(os.path.dirname(__file__), ".."))
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1
    assert f"this is {kind}" in err and command in err, err
    assert "unknown field" not in err


# ------------------------------------------------------------------------ plan: answers that say why

LLAMA70_H100 = dict(model="llama-2-70b", hardware="h100-sxm", weight_dtype="bf16", batch_size=16, prompt_len=3968,
                    gen_len=128, runtime="compiled")


def test_plan_without_target_does_not_claim_to_meet_one():
    from costmodel import plan
    out = plan(dict(LLAMA70_H100))
    assert out["n_devices"] == 4 and out["binding_constraint"] == "memory_capacity"
    assert "target" not in out["reason"], out["reason"]
    assert "the fewest that fit;" in out["reason"]


def test_plan_names_the_draft_model_when_it_is_the_bottleneck():
    # a 7B draft for a 70B target: draft passes run on one device (no TP). γ = 5 passes each read the
    # draft's 13.5 GB: ≥ 5 × 13.5e9 B / 3.35e12 B/s = 20 ms at peak bandwidth, while TP 8's verify pass reads
    # 138 GB / 8 = 17 GB per device: ≈ 5 ms at peak. The draft is most of the step at any device count.
    from costmodel import plan
    out = plan(dict(model="llama-2-70b", hardware="h100-sxm", batch_size=1, prompt_len=512, strategy="speculative",
                    draft_model="llama-2-7b", gamma=5, acceptance_rate=0.6, target_time_per_output_token_s=0.008))
    assert not out["feasible"]
    assert out["binding_constraint"] == "draft_model"
    assert out["draft_time_per_step_s"] > 0.5 * out["step_latency_s"]
    assert "the draft model llama-2-7b takes" in out["reason"] and "more devices" in out["reason"]
    assert out["next_step"]


def test_plan_notes_a_plan_within_the_error_band_of_its_target():
    from costmodel import plan
    # 4 × H100 (TP 4) predicts 19.27 ms per token (docs/parallelism.md); a 22 ms target is 12 % away,
    # inside the ±29 % p90 band of time_per_output_token_s
    out = plan(dict(LLAMA70_H100, target_time_per_output_token_s=0.022))
    assert out["n_devices"] == 4
    assert "inside the ±29% error band" in out["note"] and "--margin" in out["note"]
    far = plan(dict(LLAMA70_H100, target_time_per_output_token_s=0.030))   # 36 % away: outside the band
    assert "note" not in far


def test_plan_margin_tightens_latency_targets():
    from costmodel import plan
    # margin 0.2: plan for 0.022 × (1 − 0.2) = 0.0176 s; 4 devices (19.27 ms) miss it, 8 (11.64 ms) meet it
    out = plan(dict(LLAMA70_H100, target_time_per_output_token_s=0.022), margin=0.2)
    assert out["targets_with_margin"]["target_time_per_output_token_s"] == pytest.approx(0.0176)
    assert out["targets"]["target_time_per_output_token_s"] == 0.022
    assert out["n_devices"] == 8 and "with the safety margin" in out["reason"]
    assert "note" not in out


def test_plan_margin_band_reads_the_error_band_and_throughput_targets_rise():
    import yaml
    from costmodel import plan
    from costmodel.analysis.claims import default_band_path
    band = yaml.safe_load(open(default_band_path()))["by_metric"]["tokens_per_s"]
    rec = dict(model="llama-2-7b", hardware="a100-80gb", prompt_len=512, batch_size=32, runtime="compiled",
               target_tokens_per_s=1000)
    out = plan(rec, margin="band")
    # tokens_per_s has fewer than 5 validation rows, so the overall p90 applies; the target rises: T·(1 + m)
    m = out["margin"]["target_tokens_per_s"]
    assert band["n"] < 5 and m == pytest.approx(yaml.safe_load(open(default_band_path()))["overall"]["p90_abs_rel_error"])
    assert out["targets_with_margin"]["target_tokens_per_s"] == pytest.approx(1000 * (1 + m))
    assert out["tokens_per_s"] >= 1000 * (1 + m)


def test_plan_cli_margin(capsys):
    rc, out, err = run_cli(capsys, "plan", "model=llama-2-70b", "hardware=h100-sxm", "weight_dtype=bf16", "batch_size=16",
                           "prompt_len=3968", "target_time_per_output_token_s=0.022", "--margin")
    assert rc == 0, err
    assert "planned for" in out and "margin 29%" in out
    rc, out, err = run_cli(capsys, "plan", "model=llama-2-7b", "hardware=t4", "prompt_len=8", "--margin", "1.5")
    assert rc == 2 and "field 'margin'" in err

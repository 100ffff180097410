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

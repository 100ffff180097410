"""Field metadata (costmodel/inputs/fields.py) and cross-field rules (costmodel/inputs/rules.py):
one description of each field drives parsing, messages, the sweep, `eval --help` and `--version`."""

import dataclasses
import itertools
import subprocess
import sys

import numpy as np
import pytest

import costmodel
from costmodel.errors import InputError
from costmodel.inputs import rules
from costmodel.inputs.fields import BY_NAME, FIELDS, REQUIRED
from costmodel.inputs.record import Record, parse_record

BASE = {"model": "llama-2-7b", "hardware": "a100-80gb", "batch_size": 1, "prompt_len": 512}
SPEC = dict(BASE, strategy="speculative", draft_model="llama-68m")


def test_record_is_the_metadata():
    recs = dataclasses.fields(Record)
    assert [f.name for f in recs] == [f.name for f in FIELDS]
    for r, f in zip(recs, FIELDS):
        if f.default is REQUIRED:
            assert r.default is dataclasses.MISSING
        else:
            assert r.default == f.default, f.name
    for f in FIELDS:
        assert f.help and f.kind in ("text", "choice", "int", "float", "floats", "ints", "schedule"), f.name
        assert f.kind != "choice" or f.choices, f.name


@pytest.mark.parametrize("spec", [f for f in FIELDS if f.kind == "int"], ids=lambda f: f.name)
def test_int_limits_come_from_metadata(spec):
    below = int(spec.minimum) - 1
    with pytest.raises(InputError) as e:
        parse_record(dict(BASE, **{spec.name: below}))
    msg = str(e.value)
    assert f"field '{spec.name}'" in msg and f"out of range: {below}" in msg
    assert msg.endswith(f"allowed: {spec.allowed}")
    if spec.maximum is not None:
        with pytest.raises(InputError, match=f"allowed: an integer >= {int(spec.minimum)} and <= {int(spec.maximum)}"):
            parse_record(dict(BASE, **{spec.name: int(spec.maximum) + 1}))


@pytest.mark.parametrize("spec", [f for f in FIELDS if f.kind == "choice"], ids=lambda f: f.name)
def test_choices_come_from_metadata(spec):
    with pytest.raises(InputError) as e:
        parse_record(dict(BASE, **{spec.name: "no-such-value"}))
    assert str(e.value).endswith("allowed: " + ", ".join(spec.choices))
    # every listed choice parses, in upper case too (choices are case-insensitive)
    for c in spec.choices:
        fields = dict(BASE, **{spec.name: c.upper()})
        try:
            rec = parse_record(fields)
        except InputError as exc:          # a choice that needs other fields (strategy=tree needs a draft)
            assert f"field '{spec.name}'" not in str(exc) or "needs" in str(exc)
            continue
        assert getattr(rec, spec.name) == c


def test_float_ranges_from_metadata():
    # α: [0, 1), the bound itself refused; τ: >= 1
    assert BY_NAME["acceptance_rate"].out_of_range(1.0) and not BY_NAME["acceptance_rate"].out_of_range(0.0)
    assert BY_NAME["mean_accepted_tokens"].out_of_range(0.99) and not BY_NAME["mean_accepted_tokens"].out_of_range(1.0)
    with pytest.raises(InputError, match=r"out of range: 1\.0; allowed: 0 <= α < 1"):
        parse_record(dict(SPEC, acceptance_rate="1"))


def test_chain_agreement_rule_hand_computed():
    # τ(α = 0.5, γ = 4) = 1 + 0.5 + 0.25 + 0.125 + 0.0625 = 1.9375
    assert not rules.chain_taus_disagree(0.5, 1.9375, 4)
    # τ = 2.03: |1.9375 − 2.03| = 0.0925 <= 0.05 · 2.03 = 0.1015 -> agree
    assert not rules.chain_taus_disagree(0.5, 2.03, 4)
    # τ = 2.04: |1.9375 − 2.04| = 0.1025 > 0.05 · 2.04 = 0.102 -> disagree
    assert rules.chain_taus_disagree(0.5, 2.04, 4)
    # the same rule, vectorised
    got = rules.chain_taus_disagree(np.array([0.5, 0.5, 0.5]), np.array([1.9375, 2.03, 2.04]), 4)
    assert got.tolist() == [False, False, True]
    parse_record(dict(SPEC, acceptance_rate=0.5, mean_accepted_tokens=2.03))
    with pytest.raises(InputError, match="implies τ = 1.938 at gamma 4"):
        parse_record(dict(SPEC, acceptance_rate=0.5, mean_accepted_tokens=2.04))


def test_grid_rules_equal_record_rules():
    """Every row the sweep's vectorised rules flag is a row parse_record refuses, and no other."""
    alphas, taus, gammas, prompts = [0.3, 0.5, 0.8], [1.2, 1.9, 2.5, 4.9], [1, 2, 4], [64, 512]
    rec = parse_record(dict(SPEC, acceptance_rate=0.5, shared_prefix_len=100))
    arrays = {"acceptance_rate": np.array(alphas).reshape(-1, 1, 1, 1),
              "mean_accepted_tokens": np.array(taus).reshape(1, -1, 1, 1),
              "gamma": np.array(gammas).reshape(1, 1, -1, 1),
              "prompt_len": np.array(prompts).reshape(1, 1, 1, -1)}
    bad = np.broadcast_to(rules.grid_violations(rec, arrays), (3, 4, 3, 2))
    for (i, a), (j, t), (k, g), (m, p) in itertools.product(*(list(enumerate(v)) for v in (alphas, taus, gammas,
                                                                                              prompts))):
        row = dict(SPEC, acceptance_rate=a, mean_accepted_tokens=t, gamma=g, prompt_len=p, shared_prefix_len=100)
        try:
            parse_record(row)
            refused = False
        except InputError:
            refused = True
        assert refused == bool(bad[i, j, k, m]), row
    assert bad.any() and not bad.all()


def test_sweep_reports_the_record_message():
    with pytest.raises(InputError, match="implies τ"):
        costmodel.sweep(dict(SPEC, acceptance_rate=0.5), mean_accepted_tokens=[1.9375, 2.04])


def test_eval_help_lists_every_field_with_default_and_unit():
    out = subprocess.run([sys.executable, "-m", "costmodel", "eval", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    for f in FIELDS:
        head = [ln for ln in lines if ln.split()[:1] == [f.name]]
        assert head, f.name
        assert f"[{f.default_shown}]" in head[0] and head[0].rstrip().endswith(f"] {f.unit}" if f.unit else "]")
    assert "[128] tokens" in out.stdout          # gen_len's default and unit


def test_version():
    from importlib.metadata import version
    out = subprocess.run([sys.executable, "-m", "costmodel", "--version"], capture_output=True, text=True)
    assert out.returncode == 0
    assert out.stdout.strip() == f"costmodel {costmodel.__version__}"
    assert version("costmodel") == costmodel.__version__

"""Adversarial inputs: every one ends with exit 0 and finite results, or exit 2 and one line, fast.

Attack classes (docs/errors.md, "Stated limits"): hostile YAML (alias bombs, self-reference, deep
nesting, base-60), oversize inputs checked before the work (ranges, grids, workers, samples, file
sizes), silent reinterpretation (repeated fields, non-ASCII digits, unknown spec keys), extreme
finite spec values, non-finite claims/envelopes/bands, wrong container types in API calls,
malformed CSV, spreadsheet formulas in CSV output, and short rank lists for token trees.
"""

from __future__ import annotations

import math
import os
import time

import pytest
import yaml

import costmodel
from costmodel import InputError
from costmodel.cli.main import main
from costmodel.inputs.specs import MAX_YAML_NODES, parse_yaml, read_csv, zoo_dir

BASE = ["model=llama-2-7b", "hardware=a100-80gb", "batch_size=4", "prompt_len=512"]
REC = {"model": "llama-2-7b", "hardware": "a100-80gb", "batch_size": 4, "prompt_len": 512}


def cli(capsys, *argv):
    t0 = time.perf_counter()
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert time.perf_counter() - t0 < 10, argv
    return rc, out, err


def refused(capsys, *argv, needles=()):
    rc, out, err = cli(capsys, *argv)
    assert rc == 2, err
    assert out == ""
    assert err.startswith("costmodel: error: ") and err.count("\n") == 1, err
    assert len(err) < 2100, "messages never print unbounded values"
    for n in needles:
        assert n in err, (n, err)
    return err


# ------------------------------------------------------------------------------- hostile YAML

BOMB = ('a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
        + "".join(f"{c}: &{c} [{','.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")))


def test_billion_laughs_is_refused_before_any_value_is_built():
    # 9 strings, then 8 levels of 9 aliases each: 9^9 = 387,420,489 values once expanded
    assert len(BOMB) < 400
    t0 = time.perf_counter()
    with pytest.raises(InputError, match="aliases are expanded"):
        parse_yaml(BOMB)
    assert time.perf_counter() - t0 < 1.0


def test_alias_bomb_in_a_spec_file_field(tmp_path, capsys):
    p = tmp_path / "hw.yaml"
    p.write_text(BOMB + "id: x\n")
    refused(capsys, "eval", "model=llama-2-7b", f"hardware={p}", "batch_size=1", "prompt_len=1",
            needles=["aliases are expanded"])


def test_modest_aliases_still_load():
    # 3 aliases of a 3-item list: 1 + 3 + 3 * (1 + 3) = 16 nodes, far under the cap
    assert parse_yaml("a: &x [1, 2, 3]\nb: [*x, *x, *x]\n")["b"] == [[1, 2, 3]] * 3
    assert MAX_YAML_NODES >= 100_000


@pytest.mark.parametrize("text", ["a: &a [*a]", "a: &a {b: *a}", "a: &a [1, [2, *a]]"])
def test_self_referencing_alias(text):
    with pytest.raises(InputError, match="refers to a node that contains it"):
        parse_yaml(text)


@pytest.mark.parametrize("text", ["a: " + "[" * 100 + "]" * 100, "a: " + "[" * 200000 + "]" * 200000])
def test_deep_nesting(text):
    with pytest.raises(InputError, match="nest"):
        parse_yaml(text)


@pytest.mark.parametrize("scalar, value", [("1:30", "1:30"), ("010", "010"), ("0x10", 16), ("1_000", 1000),
                                           ("1.5e+3", 1500.0), ("-2", -2), (".5", 0.5)])
def test_yaml_11_base_60_and_octal_stay_text(scalar, value):
    # YAML 1.1 reads 1:30 as 1*60 + 30 = 90 and 010 as 8: here they stay text for the field to refuse
    assert parse_yaml(f"x: {scalar}")["x"] == value


def test_base_60_batch_size_in_a_scenario_is_refused(tmp_path, capsys):
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nbase: {model: llama-2-7b, hardware: a100-80gb, batch_size: 1:30, prompt_len: 512}\n"
                 "strategies: [autoregressive]\n")
    refused(capsys, "run", p, needles=["'batch_size'", "1:30"])


def test_big_yaml_is_refused_by_size(tmp_path, capsys):
    p = tmp_path / "big.yaml"
    p.write_text("\n".join(f"k{i}: {i}" for i in range(200_000)))     # ~2.3 MB, over the 512 KiB limit
    refused(capsys, "run", p, needles=["too large", "at most"])


# ------------------------------------------------------------------------------- limits up front

@pytest.mark.parametrize("words, needles", [
    (["gen_len=1:1e12"], ["'gen_len'", "at most 1,000,000 values"]),
    (["gen_len=1:inf"], ["'gen_len'", "finite"]),
    (["gen_len=1:100:nan"], ["'gen_len'", "step"]),
    (["gen_len=1:100000", "n_branches=1:4096", "gamma=1:64"], ["rows", "at most 2,147,483,648"]),
    ([], ["at least one axis"]),
    (["gen_len=1,2", "--workers", "100000"], ["'workers'", "CPU"]),
    (["gen_len=1,2", "--output", "grid.txt"], ["'output'", ".csv"]),
    (["gen_len=1,2", "--output", "/nonexistent-folder/grid.csv"], ["'output'", "folder does not exist"]),
    (["gen_len=1,2", "--output", "x" * 300 + ".csv"], ["'output'", "255"]),
])
def test_sweep_limits_are_checked_before_any_row(capsys, words, needles):
    refused(capsys, "sweep", *BASE, *words, needles=needles)


def test_grid_rows_against_memory(monkeypatch):
    from costmodel.analysis import sweep_grid as S
    monkeypatch.setattr(S, "available_memory_bytes", lambda: 1 << 30)     # 1 GiB free
    # 2000 × 1000 = 2e6 rows × 1 KiB = 2 GiB > 1 GiB
    with pytest.raises(InputError, match="available"):
        costmodel.sweep(REC, batch_size=list(range(1, 2001)), gen_len=list(range(1, 1001)))


@pytest.mark.parametrize("kw, field", [({"output": 123}, "output"), ({"workers": 0}, "workers"),
                                       ({"workers": 1.5}, "workers"), ({"chunk_rows": True}, "chunk_rows")])
def test_sweep_api_misuse(kw, field):
    with pytest.raises(InputError) as e:
        costmodel.sweep(REC, gen_len=[1, 2], **kw)
    assert f"'{field}'" in str(e.value)


def test_duplicate_id_check_is_linear(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from costmodel.calibration import validate as V
    # rows parsed by a stub (only the id matters here): 100,000 rows, one duplicate. list.count made
    # this 100,000^2 / 2 = 5e9 comparisons (minutes); a Counter is one pass
    monkeypatch.setattr(V, "parse_measurement", lambda r, **_: SimpleNamespace(id=r["id"]))
    p = tmp_path / "m.csv"
    p.write_text("id,metric,value\n" + "".join(f"r{i},m,1\n" for i in range(100_000)) + "r7,m,1\n")
    t0 = time.perf_counter()
    with pytest.raises(InputError, match="duplicate measurement ids: r7"):
        V.load_measurements([p])
    assert time.perf_counter() - t0 < 5


@pytest.mark.parametrize("extra, needles", [(["--bandwidth", "1e12:3e12", "--samples", "100000000"],
                                             ["'samples'", "1024"]),
                                            (["--bandwidth", "1e12:3e12", "--seed", "-1"], ["'seed'"]),
                                            (["--bandwidth", "1e12:inf"], ["bandwidth", "bad range"]),
                                            (["--bandwidth", "nan:1e12"], ["bandwidth", "bad range"]),
                                            (["--flops", "1e-300:1e14"], ["matrix_flops", "bad range"])])
def test_recommend_envelope_and_samples(capsys, extra, needles):
    refused(capsys, "recommend", "model=llama-2-7b", "batch_size=4", "prompt_len=512", *extra, needles=needles)


# ------------------------------------------------------------------------------- reinterpretation

def test_repeated_command_line_field(capsys):
    refused(capsys, "eval", *BASE, "batch_size=64", needles=["'batch_size'", "given twice"])


@pytest.mark.parametrize("digits", ["٤", "４", "४"])          # Arabic-Indic, full-width, Devanagari 4
def test_non_ascii_digits(capsys, digits):
    refused(capsys, "eval", "model=llama-2-7b", "hardware=a100-80gb", f"batch_size={digits}", "prompt_len=512",
            needles=["'batch_size'", "ASCII"])


def _spec(kind: str, stem: str) -> dict:
    return yaml.safe_load((zoo_dir(kind) / f"{stem}.yaml").read_text())


def test_unknown_hardware_and_runtime_keys_are_refused(tmp_path, capsys):
    hw = _spec("hardware_specs", "a100-80gb")
    hw["memory"]["bandwith_bytes_per_s"] = 1e12          # misspelt: would be silently ignored
    p = tmp_path / "hw.yaml"
    p.write_text(yaml.safe_dump(hw))
    refused(capsys, "eval", "model=llama-2-7b", f"hardware={p}", "batch_size=1", "prompt_len=1",
            needles=["memory.bandwith_bytes_per_s", "did you mean bandwidth_bytes_per_s"])
    rt = _spec("runtimes", "vllm")
    rt["step_overhead"] = {"value": 1e-3, "source": "x"}
    q = tmp_path / "rt.yaml"
    q.write_text(yaml.safe_dump(rt))
    refused(capsys, "eval", *BASE, f"runtime={q}", needles=["'step_overhead'", "did you mean step_overhead_s"])


def test_every_bundled_spec_still_loads():
    from costmodel.inputs.hardware import load_hardware
    from costmodel.inputs.model import load_model
    from costmodel.inputs.runtime import load_runtime
    for kind, load in (("hardware_specs", load_hardware), ("runtimes", load_runtime), ("model_specs", load_model)):
        for p in zoo_dir(kind).glob("*.yaml"):
            load(str(p))


# ------------------------------------------------------------------------------- extreme values

@pytest.mark.parametrize("section, key, value", [("launch", "kernel_launch_s", 1e308),
                                                 ("compute", "vector_flops_per_s", 1e-300),
                                                 ("memory", "bandwidth_bytes_per_s", 1e-300),
                                                 ("memory", "capacity_bytes", 1e300)])
def test_extreme_spec_values_are_out_of_range(tmp_path, capsys, section, key, value):
    hw = _spec("hardware_specs", "a100-80gb")
    hw[section][key] = value
    p = tmp_path / "hw.yaml"
    p.write_text(yaml.safe_dump(hw))
    refused(capsys, "eval", "model=llama-2-7b", f"hardware={p}", "batch_size=1", "prompt_len=1",
            needles=[f"{section}.{key}"])


def test_the_range_edges_give_finite_results(tmp_path):
    # the slowest device the ranges allow, with the largest record values: every number finite
    hw = _spec("hardware_specs", "a100-80gb")
    hw["compute"]["matrix_flops_per_s"] = {"fp32": 1e6, "fp16": 1e6}
    hw["compute"]["vector_flops_per_s"] = 1e6
    hw["memory"].update(bandwidth_bytes_per_s=1e6, capacity_bytes=1e15, usable_bytes=1e15)
    hw["cache"].update(l2_bytes=0, l2_bandwidth_bytes_per_s=1e6)
    hw["launch"].update(kernel_launch_s=1.0, graph_kernel_launch_s=1.0)
    p = tmp_path / "slow.yaml"
    p.write_text(yaml.safe_dump(hw))
    # the longest context a model YAML may declare (max_context <= 2^24), filled half by the prompt
    model = _spec("model_specs", "llama-2-70b")
    model.update(id="llama-2-70b-longest", max_context=1 << 24)
    m = tmp_path / "longest.yaml"
    m.write_text(yaml.safe_dump(model))
    out = costmodel.evaluate({"model": str(m), "hardware": str(p), "batch_size": 1 << 20,
                              "prompt_len": 1 << 23, "gen_len": 1 << 23})
    for k, v in out.items():
        if isinstance(v, float):
            assert math.isfinite(v), (k, v)
    # each field at its own maximum (2^24 + 2^24 tokens) passes that max_context: an input error
    with pytest.raises(InputError, match=r"field 'prompt_len'.*33554432 exceeds .*max_context 16777216"):
        costmodel.evaluate({"model": str(m), "hardware": str(p), "batch_size": 1,
                            "prompt_len": 1 << 24, "gen_len": 1 << 24})


# ------------------------------------------------------------------------------- token trees

def _tree(**kw):
    return costmodel.evaluate({**REC, "batch_size": 1, "strategy": "tree", "draft_model": "eagle", **kw})


def test_single_entry_rank_acceptance_keeps_the_tree():
    # one rank of p = 0.9: a chain of depth 4 gives τ = 1 + .9 + .81 + .729 + .6561 = 4.0951; a fifth
    # node within depth 4 must be a rank-2 child (acceptance 0), so τ stays 4.0951 (it was 1.0)
    five = _tree(tree_nodes=5, tree_depth=4, rank_acceptance=0.9)
    four = _tree(tree_nodes=4, tree_depth=4, rank_acceptance=0.9)
    assert four["tokens_per_step"] == pytest.approx(4.0951, abs=1e-12)
    assert five["tokens_per_step"] == pytest.approx(4.0951, abs=1e-12)
    assert five["tree_nodes"] == 5


def test_33_nodes_without_a_depth_bound():
    # without a bound the depth is at most 32: a chain of 32 gives τ = (1 − 0.9^33)/(1 − 0.9) = 9.6910;
    # the 33rd node is a zero-probability rank-2 leaf (was: an empty tree, τ = 1)
    tau = (1 - 0.9 ** 33) / (1 - 0.9)
    assert _tree(tree_nodes=32, rank_acceptance=0.9)["tokens_per_step"] == pytest.approx(tau, rel=1e-12)
    assert _tree(tree_nodes=33, rank_acceptance=0.9)["tokens_per_step"] == pytest.approx(tau, rel=1e-12)


def test_a_star_wider_than_the_rank_list():
    from costmodel.engine.acceptance import default_rank_acceptance
    from costmodel.engine.tree import optimal_tree
    p = default_rank_acceptance(0.6)         # 8 ranks: 1 − 0.4^8 = 0.99934464 in all
    t = optimal_tree(20, p, 1)
    assert t.n_nodes == 20 and t.depth == 1
    assert t.expected_tokens(p) == pytest.approx(1 + (1 - 0.4 ** 8), rel=1e-12)


def test_tau_never_drops_when_the_budget_grows():
    taus = [_tree(tree_nodes=n, tree_depth=3, rank_acceptance="0.7,0.2")["tokens_per_step"] for n in range(1, 20)]
    assert all(b >= a - 1e-12 for a, b in zip(taus, taus[1:])), taus


# ------------------------------------------------------------------------------- claims, bands, API

def _claims_file(tmp_path, body: str):
    p = tmp_path / "claims.yaml"
    p.write_text("claims:\n  - {id: a, model: llama-2-7b, hardware: a100-80gb, batch_size: 4, prompt_len: 512, "
                 + body + "}\n")
    return p


@pytest.mark.parametrize("body, needles", [
    ("metric: tokens_per_s, value: .nan", ["finite"]),
    ("metric: tokens_per_s, value: " + "9" * 400, ["finite", "..."]),
    ("metric: tokens_per_s, value: '< inf'", ["finite"]),
    ("metric: tokens_per_s, value: [1, .inf]", ["finite"]),
    ("base: [1], metric: tokens_per_s, value: 1", ["base"]),
    ("metric: hardware.__class__, value: 1", ["unknown hardware metric"]),
    ("metric: hardware.matrix_flops_per_s.fp99, value: 1", ["dtype"]),
])
def test_bad_claims(tmp_path, capsys, body, needles):
    refused(capsys, "check", _claims_file(tmp_path, body), needles=needles)


@pytest.mark.parametrize("p90", ["1.0e+308", ".nan", "-0.1", "'x'"])
def test_bad_error_band(tmp_path, capsys, p90):
    band = tmp_path / "band.yaml"
    band.write_text(f"source: x\noverall: {{n: 10, p90_abs_rel_error: {p90}}}\nby_metric: {{}}\n")
    refused(capsys, "check", _claims_file(tmp_path, "metric: tokens_per_s, value: 1000"), "--band", band,
            needles=["overall.p90_abs_rel_error"])


@pytest.mark.parametrize("head, needles", [("name: 2024-01-01", ["'name'", "text"]),
                                           ("name: x\ndescription: 5", ["'description'", "text"])])
def test_scenario_text_fields(tmp_path, capsys, head, needles):
    p = tmp_path / "s.yaml"
    p.write_text(head + "\nbase: {model: llama-2-7b, hardware: a100-80gb, batch_size: 1, prompt_len: 8}\n"
                 "strategies: [autoregressive]\n")
    refused(capsys, "run", p, "--format", "json", needles=needles)


@pytest.mark.parametrize("call, field", [
    (lambda: costmodel.check({"claims": 5}), "claims"),
    (lambda: costmodel.check(5), "claims"),
    (lambda: costmodel.plan({**REC}, targets=[1]), "targets"),
    (lambda: costmodel.plan({**REC}, prices={"a100-80gb": "cheap"}), "prices.a100-80gb"),
    (lambda: costmodel.recommend({**REC, "hardware": None}, envelope=[1]), "envelope"),
    (lambda: costmodel.recommend(5), "record"),
    (lambda: costmodel.sweep(REC, gen_len=[1, 2], output=123), "output"),
    (lambda: costmodel.validate(5), "measurements"),
])
def test_wrong_container_types_in_api_calls(call, field):
    with pytest.raises(InputError) as e:
        call()
    assert f"'{field}'" in str(e.value)


@pytest.mark.parametrize("data, needles", [
    (b"\xff\xfe{\x00}\x00", ["not UTF-8"]),                       # UTF-16
    ('{"hidden_size": 4096, "name": "caf\xe9"}'.encode("latin-1"), ["not UTF-8"]),
    (b"[" * 200_000 + b"]" * 200_000, ["nested too deeply"]),
    (b'{"hidden_size": 1e999}', ["hidden_size", "finite"]),
])
def test_bad_config_json(tmp_path, capsys, data, needles):
    p = tmp_path / "config.json"
    p.write_bytes(data)
    refused(capsys, "eval", f"model={p}", "hardware=a100-80gb", "batch_size=1", "prompt_len=1", needles=needles)


@pytest.mark.parametrize("argv", [
    ["run", "x" * 300 + ".yaml"], ["validate", "x" * 300 + ".csv"], ["check", "x" * 300 + ".yaml"],
    ["plan", *BASE, "--prices", "x" * 300 + ".yaml"], ["eval", "model=" + "x" * 300 + ".json", *BASE[1:]],
])
def test_path_components_over_255_bytes(capsys, argv):
    refused(capsys, *argv, needles=["255"])


def test_band_path_component_over_255_bytes(tmp_path, capsys):
    refused(capsys, "check", _claims_file(tmp_path, "metric: tokens_per_s, value: 1"), "--band", "x" * 300 + ".yaml",
            needles=["255"])


# ------------------------------------------------------------------------------- CSV in and out

CSV_HEAD = "id,metric,value,source,model,hardware,batch_size,prompt_len\n"
CSV_ROW = "a,tokens_per_s_per_seq,10,s,llama-2-7b,a100-80gb,1,128\n"


@pytest.mark.parametrize("text, needles", [
    (CSV_HEAD + 'b,tokens_per_s_per_seq,"10,s,llama-2-7b,a100-80gb,1,128\n', ["malformed CSV"]),
    (CSV_HEAD.replace("source", "value") + CSV_ROW, ["'value' appears twice"]),
    (CSV_HEAD.replace("source", " ") + CSV_ROW, ["empty column name"]),
    (CSV_HEAD + CSV_ROW.rstrip() + ",extra\n", ["line 2, column 9"]),
])
def test_validate_reads_csv_strictly(tmp_path, capsys, text, needles):
    p = tmp_path / "m.csv"
    p.write_text(text)
    refused(capsys, "validate", p, needles=needles)


def test_a_bom_is_dropped(tmp_path):
    p = tmp_path / "m.csv"
    p.write_bytes(b"\xef\xbb\xbf" + (CSV_HEAD + CSV_ROW).encode())
    assert read_csv(p)[0][1]["id"] == "a"


def test_csv_output_is_safe_for_spreadsheets(tmp_path):
    import pandas as pd

    from costmodel.analysis.sweep import write_frame
    df = pd.DataFrame({"label": ["=HYPERLINK(\"http://x\")", "+1", "-cmd", "@SUM(A1)", "plain"],
                       "delta": [-1.5, 2.0, -3.0, 0.0, 1.0], "n": [-1, 2, 3, 4, 5]})
    p = tmp_path / "out.csv"
    write_frame(df, p)
    back = pd.read_csv(p)
    assert list(back["label"]) == ["'=HYPERLINK(\"http://x\")", "'+1", "'-cmd", "'@SUM(A1)", "plain"]
    assert list(back["delta"]) == [-1.5, 2.0, -3.0, 0.0, 1.0]          # negative numbers stay numbers
    assert list(back["n"]) == [-1, 2, 3, 4, 5]


@pytest.mark.parametrize("labels", [["=1+1", "plain", "=1+1", None],
                                    ["=1+1", "'=1+1", "plain", None]])   # the prefixed text a category too
def test_csv_output_of_text_categories_is_safe_for_spreadsheets(tmp_path, labels):
    # a sweep's text columns are categorical: the formula text is prefixed wherever it occurs
    import pandas as pd

    from costmodel.analysis.sweep import write_frame
    df = pd.DataFrame({"label": pd.Categorical(labels), "n": range(len(labels))})
    p = tmp_path / "out.csv"
    write_frame(df, p)
    back = pd.read_csv(p, keep_default_na=False)["label"].tolist()
    assert back == ["'" + v if v and v.startswith("=") else (v or "") for v in labels]


def test_cli_csv_cells_are_escaped(capsys):
    from costmodel.cli.format import csv_text
    assert csv_text([{"a": "=1+1", "b": -2}]) == "a,b\n'=1+1,-2\n"


# ------------------------------------------------------------------------------- atomic writes

def test_a_failed_write_leaves_the_previous_file(tmp_path):
    from costmodel.inputs.outputs import atomic_open
    p = tmp_path / "out.csv"
    p.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_open(p) as fh:
            fh.write("new, half written")
            raise RuntimeError("interrupted")
    assert p.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.csv"], "the temporary file is removed"


def test_staged_directory_replaces_the_old_one_only_when_complete(tmp_path):
    from costmodel.inputs.outputs import staged_dir
    d = tmp_path / "grid.parquet"
    d.mkdir()
    (d / "part.00000.parquet").write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with staged_dir(d) as stage:
            open(os.path.join(stage, "part.00000.parquet"), "w").write("new")
            raise KeyboardInterrupt
    assert os.listdir(d) == ["part.00000.parquet"] and (d / "part.00000.parquet").read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["grid.parquet"]
    with staged_dir(d) as stage:
        open(os.path.join(stage, "part.00000.parquet"), "w").write("new")
    assert (d / "part.00000.parquet").read_text() == "new"
    assert sorted(os.listdir(tmp_path)) == ["grid.parquet"]


def test_plot_and_probe_outputs_are_checked_first(capsys, tmp_path):
    refused(capsys, "plot", "roofline", *BASE, "--output", tmp_path / "x.gif", needles=["'--output'", ".png"])
    refused(capsys, "probe", "--quick", "--output", tmp_path / "nope" / "hw.yaml", needles=["folder does not exist"])

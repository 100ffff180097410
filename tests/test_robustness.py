"""Every bad input gets one clear message and exit status 2: bad `costmodel eval` words,
malformed and hostile YAML, missing files. Kinds and messages: docs/errors.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from costmodel import InputError, evaluate, parse_record
from costmodel.cli.main import main
from costmodel.inputs.specs import read_csv

BASE = ["model=llama-2-7b", "hardware=a100-80gb", "batch_size=4", "prompt_len=512"]
SPEC = BASE + ["strategy=speculative", "draft_model=llama-68m"]
TREE = BASE + ["strategy=tree", "draft_model=medusa", "acceptance_rate=0.6"]


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def assert_clean_error(rc, out, err, *needles):
    assert rc == 2, err
    assert out == "", "nothing is printed on stdout for bad input"
    assert "Traceback" not in err and "internal error" not in err
    assert err.startswith("costmodel: error: ")
    assert err.count("\n") == 1, f"one message: {err!r}"
    for n in needles:
        assert n in err, (n, err)


# ------------------------------------------------------------------------ costmodel eval KEY=VALUE

BAD_EVAL = {
    # kind: (words, what the message must name)
    "unknown field": (BASE + ["batch_sze=8"], ["'batch_sze'", "did you mean batch_size"]),
    "field of a claim, not a record": (BASE + ["metric=tokens_per_s"], ["'metric'", "allowed"]),
    "unknown hardware id": (["model=llama-2-7b", "hardware=a100", "batch_size=1", "prompt_len=1"],
                            ["'hardware'", "'a100'", "a100-80gb", "allowed"]),
    "unknown model id": (["model=llama2-7b", "hardware=t4", "batch_size=1", "prompt_len=1"],
                         ["'model'", "'llama2-7b'", "llama-2-7b"]),
    "unknown draft model id": (BASE + ["strategy=speculative", "draft_model=llama-68", "acceptance_rate=0.6"],
                               ["'draft_model'", "llama-68m"]),
    "unknown runtime id": (BASE + ["runtime=vlm"], ["'runtime'", "'vlm'", "vllm"]),
    "unknown strategy": (BASE + ["strategy=specultive"], ["'strategy'", "did you mean speculative"]),
    "unknown dtype": (BASE + ["weight_dtype=fp12"], ["'weight_dtype'", "'fp12'", "fp16", "int4"]),
    "wrong type": (BASE + ["batch_size=eight"], ["'batch_size'", "'eight'", "integer"]),
    "fraction for an integer": (BASE + ["gamma=2.5"], ["'gamma'", "2.5", "integer"]),
    "batch_size 0": (BASE + ["batch_size=0"], ["'batch_size'", "0", ">= 1"]),
    "prompt_len 0": (BASE + ["prompt_len=0"], ["'prompt_len'", ">= 1"]),
    "gen_len 0": (BASE + ["gen_len=0"], ["'gen_len'", ">= 1"]),
    "negative batch": (BASE + ["batch_size=-3"], ["'batch_size'", "-3"]),
    "absurd batch": (BASE + ["batch_size=1e30"], ["'batch_size'", "1e30", "<= "]),
    "gamma 0": (SPEC + ["gamma=0", "acceptance_rate=0.5"], ["'gamma'", ">= 1"]),
    "acceptance_rate 1": (SPEC + ["acceptance_rate=1"], ["'acceptance_rate'", "1.0", "α < 1"]),
    "negative acceptance": (SPEC + ["acceptance_rate=-0.1"], ["'acceptance_rate'", "-0.1"]),
    "nan acceptance": (SPEC + ["acceptance_rate=nan"], ["'acceptance_rate'", "nan", "finite"]),
    "inf batch": (BASE + ["batch_size=inf"], ["'batch_size'", "inf", "finite"]),
    "-inf tau": (SPEC + ["mean_accepted_tokens=-inf"], ["'mean_accepted_tokens'", "finite"]),
    "tau above gamma+1": (SPEC + ["gamma=4", "mean_accepted_tokens=7"], ["'mean_accepted_tokens'", "7", "gamma + 1 = 5"]),
    "tau below 1": (SPEC + ["mean_accepted_tokens=0.5"], ["'mean_accepted_tokens'", "0.5", ">= 1"]),
    "alpha and tau disagree": (SPEC + ["acceptance_rate=0.2", "mean_accepted_tokens=3"],
                               ["'mean_accepted_tokens'", "0.2", "3.0", "agree"]),
    "no acceptance figure": (SPEC, ["'acceptance_rate'", "mean_accepted_tokens"]),
    "speculative without draft": (BASE + ["strategy=speculative", "acceptance_rate=0.5"], ["'draft_model'"]),
    "tree without shape": (TREE, ["'tree_nodes'", "tree_width and tree_depth"]),
    "tree width without depth": (TREE + ["tree_width=2"], ["'tree_depth'", "full tree"]),
    "tree width and node budget": (TREE + ["tree_width=2", "tree_depth=2", "tree_nodes=8"], ["'tree_width'"]),
    "enormous full tree": (TREE + ["tree_width=64", "tree_depth=64"], ["'tree_width'", "1024"]),
    "bad tree parents": (TREE + ["tree_parents=0,0,5"], ["'tree_parents'", "node 3"]),
    "tree parents and depth": (TREE + ["tree_parents=0,0,1", "tree_depth=3"], ["'tree_depth'", "tree_parents"]),
    "tau deeper than the tree": (BASE + ["strategy=tree", "draft_model=medusa", "tree_width=2", "tree_depth=2",
                                         "mean_accepted_tokens=3.5"], ["'mean_accepted_tokens'", "depth + 1 = 3"]),
    "tau for a hardware-optimised tree": (BASE + ["strategy=tree", "draft_model=eagle", "tree_nodes=8",
                                                  "tree_shape=optimal_for_hardware", "mean_accepted_tokens=2"],
                                          ["'mean_accepted_tokens'", "rank_acceptance"]),
    "alpha and tau disagree on a tree": (TREE + ["tree_width=2", "tree_depth=2", "mean_accepted_tokens=2.9"],
                                         ["'mean_accepted_tokens'", "implies"]),
    "rank acceptance above 1": (TREE + ["tree_nodes=8", "rank_acceptance=0.7,0.5"], ["'rank_acceptance'", "Σ"]),
    "huge hardware tree search": (TREE + ["tree_nodes=1000", "tree_shape=optimal_for_hardware"],
                                  ["'tree_nodes'", "1000", "256"]),
    "tensor_parallel not dividing heads": (["model=llama-2-7b", "hardware=a100-80gb", "batch_size=1", "prompt_len=1",
                                            "n_devices=3"], ["'tensor_parallel'", "3", "32 attention heads"]),
    "tp × pp ≠ devices": (BASE + ["tensor_parallel=4"], ["'tensor_parallel'", "n_devices"]),
    "shared prefix longer than prompt": (BASE + ["strategy=shared_prefix", "n_branches=4",
                                                 "shared_prefix_len=9999"], ["'shared_prefix_len'", "9999"]),
    "missing required field": (["model=llama-2-7b", "hardware=t4", "batch_size=1"], ["'prompt_len'", "required"]),
    "word without =": (BASE + ["batch_size"], ["KEY=VALUE", "'batch_size'"]),
    "missing model file": (["model=configs/nope.yaml", "hardware=t4", "batch_size=1", "prompt_len=1"],
                           ["configs/nope.yaml", "'model'", "not found"]),
    "zoo id written as a file": (["model=llama-2-7b", "hardware=t4.yaml", "batch_size=1", "prompt_len=1"],
                                 ["t4.yaml", "hardware=t4"]),
    "unknown power mode": (BASE + ["power_mode=turbo"], ["'power_mode'", "turbo"]),
}


@pytest.mark.parametrize("kind", sorted(BAD_EVAL))
def test_bad_eval_input_exits_2_with_one_clear_message(kind, capsys):
    words, needles = BAD_EVAL[kind]
    # a later word replaces an earlier one of the same field here (the command line refuses repeats)
    words = list({w.split("=", 1)[0]: w for w in words}.values())
    rc, out, err = run_cli(capsys, "eval", *words)
    assert_clean_error(rc, out, err, *needles)


def test_the_same_errors_in_json_and_csv_modes(capsys):
    for fmt in ("json", "csv"):
        rc, out, err = run_cli(capsys, "eval", "--format", fmt, *BASE, "gamma=0")
        assert_clean_error(rc, out, err, "'gamma'")


def test_a_configuration_that_does_not_fit_is_a_result(capsys):
    rc, out, err = run_cli(capsys, "eval", "--format", "json", "model=llama-2-70b", "hardware=t4", "batch_size=8",
                           "prompt_len=3968")   # + 128 generated = max_context 4096
    assert rc == 0, err
    res = json.loads(out)
    assert res["fits"] is False
    assert res["peak_device_memory_bytes"] > res["usable_memory_bytes"] > 0
    assert res["step_latency_s"] > 0 and res["tokens_per_s"] > 0


def test_zoo_ids_are_case_insensitive_for_every_id_field(capsys):
    rc, out, err = run_cli(capsys, "eval", "--format", "json", "model=LLAMA-2-7B", "hardware=A100-80GB",
                           "runtime=VLLM", "batch_size=1", "prompt_len=64", "strategy=speculative",
                           "draft_model=Llama-68M", "acceptance_rate=0.6")
    assert rc == 0, err


@pytest.mark.parametrize("field,bad,good", [("hardware", "h100sxm", "h100-sxm"), ("model", "mistral7b", "mistral-7b"),
                                            ("draft_model", "tinyllama", "tinyllama-1.1b"),
                                            ("runtime", "trtllm", "trt-llm")])
def test_unknown_zoo_ids_list_close_matches(field, bad, good):
    rec = dict(model="llama-2-7b", hardware="a100-80gb", batch_size=1, prompt_len=8, strategy="speculative",
               draft_model="llama-68m", acceptance_rate=0.5)
    rec[field] = bad
    with pytest.raises(InputError) as e:
        evaluate(rec)
    assert e.value.field == field and good in str(e.value) and bad in str(e.value)


def test_prompt_len_must_be_at_least_one():
    """Decoding conditions on at least one token (BOS): prompt_len = 0 is refused, 1 is the smallest."""
    with pytest.raises(InputError, match="prompt_len"):
        parse_record(dict(model="llama-2-7b", hardware="t4", batch_size=1, prompt_len=0))
    assert evaluate(dict(model="llama-2-7b", hardware="t4", batch_size=1, prompt_len=1))["ttft_s"] > 0


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "Infinity", float("nan"), float("inf"), 10 ** 400])
def test_non_finite_numbers_are_refused(value):
    for field in ("acceptance_rate", "mean_accepted_tokens", "batch_size", "gen_len", "gamma"):
        rec = dict(model="llama-2-7b", hardware="t4", batch_size=1, prompt_len=8, strategy="speculative",
                   draft_model="none", acceptance_rate=0.5)
        rec[field] = value
        with pytest.raises(InputError) as e:
            parse_record(rec)
        assert e.value.field == field and "finite" in str(e.value)


def test_input_error_carries_field_value_and_allowed():
    with pytest.raises(InputError) as e:
        parse_record(dict(model="m", hardware="h", batch_size=1, prompt_len=1, n_branches=0))
    err = e.value
    assert isinstance(err, ValueError)
    assert err.field == "n_branches" and err.source == "record" and ">= 1" in err.allowed


def test_a_field_given_twice_is_refused():
    with pytest.raises(InputError, match="given twice") as e:
        parse_record({"model": "llama-2-7b", "hardware": "t4", "batch_size": 1, " batch_size": 2, "prompt_len": 8})
    assert e.value.field == "batch_size"


def test_typed_values_from_yaml_are_checked():
    base = dict(model="llama-2-7b", hardware="t4", batch_size=1, prompt_len=8)
    for field, value in (("batch_size", True), ("batch_size", [1, 2]), ("model", {"a": 1}), ("batch_size", "1.5"),
                         ("rank_acceptance", "0.5,abc"), ("tree_parents", {"a": 1})):
        with pytest.raises(InputError) as e:
            parse_record(dict(base, **{field: value}))
        assert e.value.field == field


# ------------------------------------------------------------------------ YAML files

HOSTILE = "id: x\nname: !!python/object/apply:os.system [\"touch {marker}\"]\n"

BAD_YAML = {
    # kind: (file text, what the message must name besides the file)
    "python object tag": (HOSTILE, ["line 2", "tag", "python/object/apply:os.system", "refused"]),
    "python name tag": ("id: !!python/name:os.system\n", ["line 1", "refused"]),
    "unclosed bracket": ("id: [a, b\nname: x\n", ["malformed YAML", "line"]),
    "bad indentation": ("id: x\n  name: y\n name: z\n", ["malformed YAML", "line 2"]),
    "tab indentation": ("id: x\ncompute:\n\tsm_count: 1\n", ["malformed YAML", "line 3"]),
    "duplicate key": ("id: x\nname: a\nname: b\n", ["line 3", "'name' appears twice", "line 2"]),
    "impossible date": ("id: 2024-13-45\n", ["line 1", "2024-13-45"]),
    "empty int tag": ("id: !!int\n", ["line 1"]),
    "empty file": ("", ["empty"]),
    "only a comment": ("# nothing here\n", ["empty"]),
    "a list, not a mapping": ("- a\n- b\n", ["mapping", "a list"]),
    "deeply nested": ("[" * 700 + "]" * 700, ["nested too deeply"]),
}


@pytest.fixture
def write(tmp_path):
    def _write(name, text, binary=False):
        p = tmp_path / name
        (p.write_bytes if binary else p.write_text)(text)
        return p
    return _write


@pytest.mark.parametrize("kind", sorted(BAD_YAML))
@pytest.mark.parametrize("as_field", ["hardware", "model", "runtime", "scenario"])
def test_malformed_and_hostile_yaml_exit_2_naming_the_file(kind, as_field, write, tmp_path, capsys):
    text, needles = BAD_YAML[kind]
    marker = tmp_path / "pwned"
    p = write(f"bad-{as_field}.yaml", text.replace("{marker}", str(marker)))
    if as_field == "scenario":
        rc, out, err = run_cli(capsys, "run", str(p))
    else:
        words = dict(model="llama-2-7b", hardware="t4", batch_size="1", prompt_len="8")
        words[as_field] = str(p)
        rc, out, err = run_cli(capsys, "eval", *(f"{k}={v}" for k, v in words.items()))
    assert_clean_error(rc, out, err, p.name, *needles)
    assert not marker.exists(), "a YAML tag must never run anything"


def test_binary_file_is_refused(write, capsys):
    p = write("blob.yaml", b"\x89PNG\r\n\x1a\n\x00\xff\xfe", binary=True)
    rc, out, err = run_cli(capsys, "run", str(p))
    assert_clean_error(rc, out, err, "blob.yaml", "UTF-8")


def test_missing_and_directory_scenarios(tmp_path, capsys):
    rc, out, err = run_cli(capsys, "run", str(tmp_path / "nope.yaml"))
    assert_clean_error(rc, out, err, "nope.yaml", "not found")
    rc, out, err = run_cli(capsys, "run", str(tmp_path))
    assert_clean_error(rc, out, err, str(tmp_path), "not a file")


def _hardware_text(**edits) -> str:
    import yaml
    from costmodel.inputs.specs import load_yaml, zoo_dir
    d = load_yaml(zoo_dir("hardware_specs") / "a100-80gb.yaml")
    for path, v in edits.items():
        node = d
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[k]
        if v is KeyError:
            del node[keys[-1]]
        else:
            node[keys[-1]] = v
    return yaml.safe_dump(d)


@pytest.mark.parametrize("edits,needles", [
    (dict(memory__bandwidth_bytes_per_s=float("nan")), ["memory.bandwidth_bytes_per_s", "finite"]),
    (dict(memory__capacity_bytes=float("inf")), ["memory.capacity_bytes", "finite"]),
    (dict(memory__bandwidth_bytes_per_s="2.0e12"), ["memory.bandwidth_bytes_per_s", "text '2.0e12'"]),
    (dict(memory__bandwidth_bytes_per_s=-1), ["memory.bandwidth_bytes_per_s", ">= 1"]),
    (dict(compute__matrix_flops_per_s__fp16=KeyError), ["compute.matrix_flops_per_s.fp16", "missing"]),
    (dict(interconnect__scale_up=[1, 2]), ["interconnect.scale_up", "mapping", "a list"]),
    (dict(memory__unified_with_cpu="no"), ["memory.unified_with_cpu", "true or false"]),
    (dict(memory__usable_bytes=1e13), ["memory.usable_bytes", "exceeds"]),
    (dict(interconnect__scale_up__bandwidth_bytes_per_s=0), ["interconnect.scale_up.bandwidth_bytes_per_s", ">= 1"]),
    (dict(compute__sm_count=10 ** 30), ["compute.sm_count", "<= "]),
])
def test_bad_hardware_files_name_file_and_field(edits, needles, write, capsys):
    p = write("my-gpu.yaml", _hardware_text(**edits))
    rc, out, err = run_cli(capsys, "eval", "model=llama-2-7b", f"hardware={p}", "batch_size=1", "prompt_len=8")
    assert_clean_error(rc, out, err, "my-gpu.yaml", *needles)


@pytest.mark.parametrize("field", ["compute_efficiency", "bandwidth_efficiency"])
def test_a_runtime_efficiency_of_zero_is_refused_not_nan(field, write, capsys):
    """0 would divide by zero and turn every time into NaN."""
    import yaml
    from costmodel.inputs.specs import load_yaml, zoo_dir
    d = load_yaml(zoo_dir("runtimes") / "vllm.yaml")
    d[field]["value"] = 0
    p = write("my-rt.yaml", yaml.safe_dump(d))
    rc, out, err = run_cli(capsys, "eval", "model=llama-2-7b", "hardware=t4", f"runtime={p}", "batch_size=1",
                           "prompt_len=8")
    assert_clean_error(rc, out, err, "my-rt.yaml", f"{field}.value", ">= 0.01")


def test_bad_model_files_name_file_and_field(write, capsys):
    p = write("my-model.yaml", "id: m\nname: m\nn_layer: 2\nd_model: 64\nn_heads: 4\nn_kv_heads: 2\n"
                               "head_dim: 16\nd_ff: 128\nvocab_size: 1000\n")
    rc, out, err = run_cli(capsys, "eval", f"model={p}", "hardware=t4", "batch_size=1", "prompt_len=8")
    assert_clean_error(rc, out, err, "my-model.yaml", "'n_layer'", "did you mean n_layers")
    cfg = write("config.json", '{"hidden_size": 64,\n "num_attention_heads": 4,\n}')
    rc, out, err = run_cli(capsys, "eval", f"model={cfg}", "hardware=t4", "batch_size=1", "prompt_len=8")
    assert_clean_error(rc, out, err, "config.json", "line 3")


def test_bad_scenario_entries_name_the_file(write, capsys):
    p = write("scen.yaml", "name: s\nbase: {model: llama-2-7b, batch_size: 1, prompt_len: 8}\nhardware: true\n"
                           "strategies: [{strategy: autoregressive}]\n")
    rc, out, err = run_cli(capsys, "run", str(p))
    assert_clean_error(rc, out, err, "scen.yaml", "'hardware'", "list")
    p = write("scen2.yaml", "name: s\nbase: {model: llama-2-7b, batch_size: 1, prompt_len: 8}\nhardware: [t4]\n"
                            "strategies: [{strategy: speculative, draft_model: none, gama: 3, acceptance_rate: 0.5}]\n")
    rc, out, err = run_cli(capsys, "run", str(p))
    assert_clean_error(rc, out, err, "scen2.yaml", "'gama'", "did you mean gamma")
    p = write("scen3.yaml", "name: s\nbase: {model: llama-2-7b, batch_size: 1, prompt_len: 8}\nstratgies: []\n")
    rc, out, err = run_cli(capsys, "run", str(p))
    assert_clean_error(rc, out, err, "scen3.yaml", "'stratgies'", "did you mean strategies")


# ------------------------------------------------------------------------ CSV

@pytest.mark.parametrize("text,needles", [
    ("model,batch_size\nllama-2-7b,1\nt4,1,2\n", ["line 3", "3 cells", "2 columns"]),
    ("model,model\nx,y\n", ["line 1", "'model' appears twice"]),
    ("model,batch_size\nllama-2-7b,\"1\n", ["line"]),
    ('model,batch_size\n"llama"x,1\n', ["line 2"]),
    ("", ["empty"]),
])
def test_malformed_csv_names_file_and_line(text, needles, write):
    p = write("measurements.csv", text)
    with pytest.raises(InputError) as e:
        read_csv(p)
    for n in ["measurements.csv"] + needles:
        assert n in str(e.value), (n, str(e.value))


def test_csv_rows_carry_their_line_numbers_into_record_errors(write):
    p = write("m.csv", "model,hardware,batch_size,prompt_len\n\nllama-2-7b,t4,1,8\nllama-2-7b,t4,zero,8\n")
    rows = read_csv(p)
    assert [n for n, _ in rows] == [3, 4]
    parse_record(rows[0][1], source=f"{p.name}, line {rows[0][0]}")
    with pytest.raises(InputError, match=r"m\.csv, line 4: field 'batch_size'"):
        parse_record(rows[1][1], source=f"{p.name}, line {rows[1][0]}")


# ------------------------------------------------------------------------ nothing written

def test_a_bad_sweep_writes_nothing(tmp_path, capsys):
    out_file = tmp_path / "grid.csv"
    rc, out, err = run_cli(capsys, "sweep", *BASE, "batch_sze=1,2", "--output", str(out_file))
    assert rc == 2 and "batch_sze" in err and "Traceback" not in err
    assert not out_file.exists()
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------ a real process

def _subprocess(*argv, cwd):
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    env.pop("COSTMODEL_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "costmodel", *argv], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=120)


def test_real_process_bad_field_exit_2_no_traceback(tmp_path):
    p = _subprocess("eval", *BASE, "acceptance_rat=0.5", cwd=tmp_path)
    assert p.returncode == 2 and p.stdout == ""
    assert "field 'acceptance_rat'" in p.stderr and "did you mean acceptance_rate" in p.stderr
    assert "Traceback" not in p.stderr and p.stderr.count("\n") == 1


def test_real_process_hostile_yaml_exit_2_nothing_run(tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.yaml"
    evil.write_text(HOSTILE.replace("{marker}", str(marker)))
    p = _subprocess("run", str(evil), cwd=tmp_path)
    assert p.returncode == 2 and p.stdout == ""
    assert "evil.yaml" in p.stderr and "line 2" in p.stderr and "Traceback" not in p.stderr
    assert not marker.exists()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["evil.yaml"]


def test_overlong_id_is_an_input_error_not_a_crash(capsys):
    # pathlib raises OSError (ENAMETOOLONG) for a 500-character name instead of answering False
    from costmodel.cli.main import main as cli_main
    assert cli_main(["eval", "model=" + "x" * 500 + ".yaml", "hardware=t4", "batch_size=1", "prompt_len=8"]) == 2
    assert cli_main(["eval", "model=llama-2-7b", "hardware=" + "y" * 500, "batch_size=1", "prompt_len=8"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err

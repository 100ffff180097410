"""Fuzzing the loaders: hypothesis-generated YAML text, spec files and records give a result or an
InputError, never another exception (which the CLI would report as an internal error)."""

from __future__ import annotations

import contextlib
import copy
import io
import math

import yaml
from hypothesis import given, strategies as st

from costmodel import InputError, evaluate
from costmodel.inputs.hardware import parse_hardware
from costmodel.inputs.model import _from_zoo_yaml, from_hf_config
from costmodel.inputs.record import FIELD_NAMES, parse_record
from costmodel.inputs.runtime import parse_runtime
from costmodel.analysis.scenario import run_scenario
from costmodel.inputs.specs import load_yaml, parse_yaml, read_csv, zoo_dir, zoo_ids

HARDWARE = zoo_ids("hardware_specs")
MODELS = zoo_ids("model_specs")
RUNTIMES = zoo_ids("runtimes")

# --------------------------------------------------------------------------- values

TOKENS = ["- ", ": ", "{", "}", "[", "]", ", ", "\n", "  ", "'", '"', "? ", "|", ">", "---\n", "...\n",
          "# c", "&a ", "*a ", "<<: *a", "!!python/object/apply:os.system ['true']", "!!python/name:os.system",
          "!!int ", "!!float ", "!!timestamp ", "!!binary ", "!!set ", "!!omap ", "!custom ", "%YAML 1.1\n",
          "%TAG ! tag:x,2000:\n", "0x_", "0b_", "2024-13-45", "2024-01-01", ".nan", ".inf", "-.inf", "1e400",
          "9" * 400, "1:2:3", "~", "null", "yes", "batch_size", "model", "hardware", "compute", "value",
          "llama-2-7b", "\t", "\x00", "\ufeff", "é", "\\", "@", "`"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10 ** 300, max_value=10 ** 400),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["nan", "NaN", "inf", "-inf", "1e400", "-1", "0", "1_000", "0x10", "1.5", " 8 ", "", "abc",
                     "llama-2-7b", "a100-80gb", "none", "self", "medusa", "eagle", "fp16", "int4",
                     "speculative", "tree", "autoregressive", "shared_prefix", "0,0,1", "0.5,0.2",
                     "../hardware_specs/t4.yaml", "t4.yaml", "/nonexistent/x.yaml", "x\x00y"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=6)


def _yaml_or_input_error(text):
    try:
        return parse_yaml(text, "fuzz.yaml")
    except InputError as exc:
        assert str(exc).startswith("fuzz.yaml")
        return exc


# --------------------------------------------------------------------------- YAML text

@given(st.text(max_size=200))
def test_arbitrary_text_is_yaml_or_a_clean_error(text):
    _yaml_or_input_error(text)


@given(st.lists(st.sampled_from(TOKENS), max_size=25).map("".join))
def test_yaml_token_soup_is_yaml_or_a_clean_error(text):
    _yaml_or_input_error(text)


@given(values, st.lists(st.tuples(st.integers(0, 400), st.sampled_from(TOKENS)), max_size=4))
def test_mutated_yaml_documents_are_yaml_or_a_clean_error(doc, edits):
    text = yaml.safe_dump(doc)
    for pos, tok in edits:
        text = text[:pos] + tok + text[pos:]
    _yaml_or_input_error(text)


def test_hostile_tags_are_refused_not_run(tmp_path):
    marker = tmp_path / "pwned"
    for tag in ("!!python/object/apply:os.system", "!!python/object/new:os.system",
                "!!python/object/apply:subprocess.call", "!!python/name:os.system"):
        p = tmp_path / "evil.yaml"
        p.write_text(f"id: x\nname: {tag} [\"touch {marker}\"]\n")
        try:
            load_yaml(p)
        except InputError as exc:
            assert "evil.yaml" in str(exc) and "line 2" in str(exc) and "tag" in str(exc)
        else:
            raise AssertionError(tag)
        assert not marker.exists()


# --------------------------------------------------------------------------- spec mappings

def _mutate(data, draw):
    """Delete, replace or add keys at random places in a nested mapping."""
    data = copy.deepcopy(data)
    for _ in range(draw(st.integers(1, 4))):
        node = data
        path = []
        while isinstance(node, dict) and node and draw(st.booleans()):
            k = draw(st.sampled_from(sorted(node, key=str)))
            if not isinstance(node[k], dict):
                break
            path.append(k)
            node = node[k]
        if not isinstance(node, dict) or not node:
            continue
        op = draw(st.sampled_from(("delete", "replace", "replace", "add")))
        key = draw(st.sampled_from(sorted(node, key=str)))
        if op == "delete":
            del node[key]
        elif op == "replace":
            node[key] = draw(values)
        else:
            node[draw(st.one_of(st.text(max_size=8), st.integers()))] = draw(values)
    return data


def _spec(kind, sid):
    return load_yaml(zoo_dir(kind) / f"{sid}.yaml")


def _finite_or_inf(out):
    for k, v in out.items():
        if isinstance(v, float):
            assert not math.isnan(v), k


def _load_then_evaluate(parse, spec, src, record, field, evaluate_may_refuse=True):
    """A mutated spec either parses, or fails with an InputError naming ``src``; a parsed one is put
    into ``record`` as ``field`` and evaluated (an InputError there is allowed when
    ``evaluate_may_refuse``): no NaN in the outputs."""
    try:
        obj = parse(spec, src)
    except InputError as exc:
        assert src in str(exc)
        return
    rec = parse_record(record).replace(**{field: obj})
    try:
        out = evaluate(rec)
    except InputError:
        if not evaluate_may_refuse:
            raise
        return
    _finite_or_inf(out)


@given(st.sampled_from(HARDWARE), st.data())
def test_mutated_hardware_specs_load_or_fail_cleanly(hid, data):
    _load_then_evaluate(parse_hardware, _mutate(_spec("hardware_specs", hid), data.draw), "fuzz-hw.yaml",
                        dict(model="llama-2-7b", hardware="t4", batch_size=2, prompt_len=64), "hardware")


@given(st.sampled_from(MODELS), st.data())
def test_mutated_model_specs_load_or_fail_cleanly(mid, data):
    _load_then_evaluate(_from_zoo_yaml, _mutate(_spec("model_specs", mid), data.draw), "fuzz-model.yaml",
                        dict(model=mid, hardware="a100-80gb", batch_size=2, prompt_len=64), "model")


@given(st.data())
def test_mutated_hf_configs_load_or_fail_cleanly(data):
    base = {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
            "intermediate_size": 14336, "vocab_size": 32000, "hidden_act": "silu", "model_type": "mistral",
            "tie_word_embeddings": False, "head_dim": None, "num_local_experts": 8, "num_experts_per_tok": 2}
    try:
        from_hf_config(_mutate(base, data.draw), "fuzz/config.json")
    except InputError as exc:
        assert "fuzz/config.json" in str(exc)


@given(st.sampled_from(RUNTIMES), st.data())
def test_mutated_runtimes_load_or_fail_cleanly(rid, data):
    _load_then_evaluate(parse_runtime, _mutate(_spec("runtimes", rid), data.draw), "fuzz-rt.yaml",
                        dict(model="llama-68m", hardware="a10g", batch_size=2, prompt_len=64), "runtime",
                        evaluate_may_refuse=False)


@given(st.data())
def test_mutated_scenarios_run_or_fail_cleanly(tmp_path_factory, data):
    scen = {"name": "fuzz", "base": {"model": "llama-68m", "batch_size": 2, "prompt_len": 64, "gen_len": 8},
            "hardware": ["a10g", {"hardware": "t4", "label": "T4"}],
            "strategies": [{"strategy": "autoregressive"},
                           {"strategy": "speculative", "draft_model": "none", "acceptance_rate": 0.5}]}
    p = tmp_path_factory.mktemp("scen") / "fuzz-scenario.yaml"
    p.write_text(yaml.safe_dump(_mutate(scen, data.draw)))
    try:
        run_scenario(p)
    except InputError as exc:
        assert "fuzz-scenario.yaml" in str(exc) or "field '" in str(exc)


# --------------------------------------------------------------------------- records

field_names = st.one_of(st.sampled_from(FIELD_NAMES), st.sampled_from(["batch_sze", "modle", "gama", "alpha",
                                                                       "id", "metric", " batch_size "]),
                        st.text(max_size=10))


@st.composite
def fuzzed_records(draw):
    rec = {"model": draw(st.sampled_from(MODELS)), "hardware": draw(st.sampled_from(HARDWARE)),
           "batch_size": draw(st.integers(1, 64)), "prompt_len": draw(st.integers(1, 4096))}
    for _ in range(draw(st.integers(0, 6))):
        rec[draw(field_names)] = draw(values)
    return rec


@given(fuzzed_records())
def test_fuzzed_records_evaluate_or_fail_cleanly(rec):
    try:
        out = evaluate(rec)
    except InputError as exc:
        assert "field '" in str(exc) or str(exc).startswith("record")
        return
    _finite_or_inf(out)


@given(st.lists(st.tuples(field_names, st.one_of(st.text(max_size=12), scalars.map(str))), max_size=8))
def test_fuzzed_command_line_words_never_crash(words):
    from costmodel.cli.main import main
    argv = ["eval", "--format", "json", "model=llama-68m", "hardware=t4", "batch_size=2", "prompt_len=16"]
    argv += [f"{k}={v}" for k, v in words]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    assert rc in (0, 2), err.getvalue()
    assert "Traceback" not in err.getvalue() and "internal error" not in err.getvalue()
    if rc == 2:       # our message, or argparse's usage line for a word that starts with '-'
        assert err.getvalue().startswith(("costmodel: error:", "usage: costmodel")) and out.getvalue() == ""


# --------------------------------------------------------------------------- CSV

@given(st.lists(st.lists(st.sampled_from(["a", "b", "", '"', '"x"', "1", ",", "\n", "\r", "\x00", "é"]),
                         max_size=6).map("".join), max_size=6).map("\n".join))
def test_csv_text_is_rows_or_a_clean_error(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("csv") / "fuzz.csv"
    p.write_text(text, encoding="utf-8")
    try:
        rows = read_csv(p)
    except InputError as exc:
        assert "fuzz.csv" in str(exc)
        return
    for line, row in rows:
        assert line >= 2 and isinstance(row, dict)

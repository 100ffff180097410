"""What the sweep's plan reuses instead of parsing again: a record with one field changed
(parse_changed), the text conversions, and the refusals of Execs whose specs load. Each gives what a
fresh parse gives, and a spec file that failed to load is read again once it is fixed."""

import shutil
from pathlib import Path

import pytest

from costmodel.engine.evaluate import _execs
from costmodel.errors import InputError
from costmodel.inputs.record import parse_changed, parse_record

BASE = dict(model="llama-2-7b", hardware="a100-80gb", strategy="speculative", draft_model="llama-68m",
            acceptance_rate=0.7, gamma=4, batch_size=8, prompt_len=512, n_devices=4, pipeline_parallel=2)


def test_one_field_changed_is_the_whole_mapping_parsed():
    rec = parse_record(BASE)
    assert parse_changed(rec, "hardware", " H100-SXM ") == parse_record(dict(BASE, hardware=" H100-SXM "))
    assert parse_changed(rec, "hardware", " H100-SXM ").hardware == "H100-SXM"      # stripped, as given


def test_one_field_changed_raises_what_the_whole_mapping_raises():
    """n_devices 3 over pipeline_parallel 2 breaks a rule that ties fields together (3 % 2 = 1); a
    gamma of 0 is below gamma's range (>= 1): both messages are parse_record's, word for word."""
    rec = parse_record(BASE)
    for name, value in (("n_devices", 3), ("gamma", 0), ("strategy", "speculate")):
        with pytest.raises(InputError) as whole:
            parse_record(dict(BASE, **{name: value}), source="grid row")
        with pytest.raises(InputError) as changed:
            parse_changed(rec, name, value, source="grid row")
        assert str(changed.value) == str(whole.value)


def test_a_refused_exec_is_raised_again_alike():
    """llama-3-8b (128,256-token vocabulary) with the llama-68m draft (32,000 tokens): refused, the
    second time from the cache, the same message in a fresh exception."""
    rec = parse_record(dict(BASE, model="llama-3-8b", pipeline_parallel=1))
    errors = []
    for _ in range(2):
        with pytest.raises(InputError) as exc:
            _execs(rec)
        errors.append(exc.value)
    assert "vocabulary" in str(errors[0]) and str(errors[0]) == str(errors[1])
    assert errors[0] is not errors[1]


def test_a_spec_file_that_failed_to_load_is_read_again(tmp_path):
    path = tmp_path / "my-gpu.yaml"
    rec = parse_record(dict(BASE, hardware=str(path)))
    with pytest.raises(InputError):
        _execs(rec)                             # no such file yet
    shutil.copy(Path(__file__).resolve().parent.parent / "hardware_specs" / "a100-80gb.yaml", path)
    ex, _draft = _execs(rec)
    assert ex.hw.id == "a100-80gb"               # the file's own id, read now that it exists

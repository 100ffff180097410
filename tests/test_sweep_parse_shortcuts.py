"""A sweep's plan parses each group's record (costmodel.analysis.sweep_parse): a mapping that differs
from the last one the plan parsed in one field has that field parsed alone (inputs.record.parse_changed),
and the record or the refusal is parse_record's own."""

import pytest

from costmodel.analysis import sweep_parse as sp
from costmodel.errors import InputError
from costmodel.inputs.record import parse_record

BASE = {"model": "llama-2-7b", "hardware": "a100-80gb", "weight_dtype": "fp16", "n_devices": 1, "batch_size": 1,
        "prompt_len": 128}


def test_one_changed_field_by_hand():
    a = dict(BASE)
    assert sp._one_changed(a, dict(a, weight_dtype="int8")) == "weight_dtype"
    assert sp._one_changed(a, dict(a)) is None                                   # nothing changed
    assert sp._one_changed(a, dict(a, weight_dtype="int8", n_devices=2)) is None  # two fields
    assert sp._one_changed(a, dict(a, n_devices=1.0)) == "n_devices"             # 1 and 1.0: types differ
    assert sp._one_changed(a, dict(a, weight_dtype=" ")) is None                 # blank: the default
    assert sp._one_changed(a, dict(a, weight_dtype=None)) is None
    assert sp._one_changed(a, {**{k: a[k] for k in reversed(a)}}) is None       # other order
    assert sp._one_changed(a, dict(a, gamma=4)) is None                          # another field set


@pytest.fixture
def counted(monkeypatch):
    """parse_record as the plan calls it, counted."""
    calls = []

    def counting(d, source="record", **kw):
        calls.append(d)
        return parse_record(d, source=source, **kw)
    monkeypatch.setattr(sp, "parse_record", counting)
    return calls


def _in_plan(fn):
    token = sp._PARSED.set({})
    try:
        return fn()
    finally:
        sp._PARSED.reset(token)


def test_plan_parses_one_changed_field_alone(counted):
    """Three groups that differ in one field each: one full parse, then two fields parsed alone; each
    record equals parse_record of its mapping."""
    maps = [dict(BASE), dict(BASE, weight_dtype="int4"), dict(BASE, weight_dtype="int4", model="llama-2-13b")]
    recs = _in_plan(lambda: [sp._parse(m, [("model", m["model"])]) for m in maps])
    assert len(counted) == 1
    assert recs == [parse_record(m) for m in maps]


def test_plan_refusal_of_one_changed_field_is_parse_records(counted):
    """A changed field that is refused (a weight dtype that does not exist; 8 devices with a
    tensor_parallel of 2 given) raises parse_record's message; the next mapping is then parsed from
    the last one that parsed."""
    good = dict(BASE, tensor_parallel=1)
    bad_dtype = dict(good, weight_dtype="fp7")
    bad_devices = dict(good, n_devices=8)
    pairs = [("weight_dtype", "x")]

    def run():
        sp._parse(good, pairs)
        got = []
        for m in (bad_dtype, bad_devices):
            with pytest.raises(InputError) as exc:
                sp._parse(m, pairs)
            got.append(str(exc.value))
        return got, sp._parse(dict(good, n_devices=1.0), pairs)
    got, last = _in_plan(run)
    want = []
    for m in (bad_dtype, bad_devices):
        with pytest.raises(InputError) as exc:
            parse_record(m, source=sp._label(pairs))
        want.append(str(exc.value))
    assert got == want
    assert last == parse_record(dict(good, n_devices=1.0))
    assert len(counted) == 1


def test_hardware_signatures_equal_each_devices_own():
    """The plan reads the devices' signatures at once; they are each device's hardware_signature, for
    a weight dtype the signature does not read the device for (fp16: one signature) and for those
    it does (fp8, fp4: one per device)."""
    from costmodel.engine.evaluate import hardware_signature, hardware_signatures
    from costmodel.inputs.hardware import load_hardware
    devices = [load_hardware(h) for h in ("a100-80gb", "h100-sxm", "b200", "mi300x")]
    for wd, distinct in (("fp16", 1), ("fp8", 4), ("nvfp4", 4)):
        rec = parse_record(dict(BASE, weight_dtype=wd))
        got = hardware_signatures(rec, devices)
        assert got == [hardware_signature(rec, d) for d in devices]
        assert len(set(got)) == distinct

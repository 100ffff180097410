"""The measurement builders regenerate the committed CSVs byte for byte.

``validation/build_measurements_serving.py`` holds its tables in the file; ``validation/build_measurements.py``
maps the project's reference table (kept beside the repository, ``../shared/reference``), so its test
runs only where that table is present. Each builder writes into a temporary folder and the result is
compared with the committed file: a CSV edited by hand (or a builder changed without rebuilding)
fails here."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

VALIDATION = Path(__file__).resolve().parent.parent / "validation"


def _builder(name: str):
    spec = importlib.util.spec_from_file_location(f"_builder_{name}", VALIDATION / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _same_bytes(built: Path, name: str) -> None:
    got, want = (built / name).read_bytes(), (VALIDATION / name).read_bytes()
    if got != want:
        a, b = got.decode().splitlines(), want.decode().splitlines()
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        pytest.fail(f"{name}: the builder's output differs from the committed file from line {first + 1} "
                    f"({len(a)} built lines, {len(b)} committed)\nbuilt:     {a[first] if first < len(a) else ''}"
                    f"\ncommitted: {b[first] if first < len(b) else ''}")


def test_serving_builder_reproduces_the_committed_csvs(tmp_path, capsys):
    _builder("build_measurements_serving").main(out_dir=str(tmp_path))
    for name in ("measurements_serving.csv", "excluded_serving.csv"):
        _same_bytes(tmp_path, name)


def test_serving_builder_is_repeatable(tmp_path, capsys):
    """Two builds in one process give the same rows (the row list starts empty on every call)."""
    mod = _builder("build_measurements_serving")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    mod.main(out_dir=str(tmp_path / "a"))
    mod.main(out_dir=str(tmp_path / "b"))
    assert (tmp_path / "a" / "measurements_serving.csv").read_bytes() == \
        (tmp_path / "b" / "measurements_serving.csv").read_bytes()


def test_reference_builder_reproduces_the_committed_csvs(tmp_path, capsys):
    """The reference table's place: ``COSTMODEL_REFERENCE_CSV`` when set (a checkout in another folder),
    else the builder's default beside the repository."""
    mod = _builder("build_measurements")
    ref = os.environ.get("COSTMODEL_REFERENCE_CSV", mod.DEFAULT_REFERENCE)
    if not os.path.exists(ref):
        pytest.skip("the reference table (../shared/reference/published_measurements.csv) is not beside this "
                    "checkout; set COSTMODEL_REFERENCE_CSV to its path")
    mod.main(["build_measurements.py", ref], out_dir=str(tmp_path))
    for name in ("measurements.csv", "excluded.csv"):
        _same_bytes(tmp_path, name)

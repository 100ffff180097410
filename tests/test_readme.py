"""The README and docs/design.md say what the tool says: their generated sections (field table,
validation figures, claim verdicts, module layout) equal what scripts/gen_readme.py builds from the
tool's output now, and the documented entry points work."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import costmodel
from costmodel.calibration.validate import VALIDATION_DIR, summarize

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def gen():
    spec = importlib.util.spec_from_file_location("gen_readme", ROOT / "scripts" / "gen_readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def sections(gen, lopo, loso):
    return gen.compute_sections(lopo, loso)


def test_generated_sections_are_up_to_date(gen, sections):
    assert gen.stale(sections) == [], "run: python scripts/gen_readme.py (or make readme)"


def test_every_generated_section_is_present(gen):
    for rel, names in gen.FILES.items():
        text = (ROOT / rel).read_text(encoding="utf-8")
        for n in names:
            assert gen.section_text(text, n) is not None, (rel, n)


def test_readme_quotes_what_validate_prints(gen, capsys):
    """validate's first line (the held-out figures recorded by --report) and the README agree."""
    from costmodel.cli.main import main
    assert main(["validate"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    figs = re.findall(r"(\d+\.\d)%", first)
    assert len(figs) == 3, first                               # median, p90, within 25 %
    readme = gen.section_text((ROOT / "README.md").read_text(encoding="utf-8"), "validation")
    for f in figs:
        assert f"**{f} %**" in readme, (f, first)


def test_error_band_is_the_current_held_out_run(lopo):
    """The held-out figures validate prints (error_band.yaml, written by --report) are today's."""
    band = yaml.safe_load((VALIDATION_DIR / "error_band.yaml").read_text())["overall"]
    s = summarize(lopo["rows"])
    assert band["n"] == s["n"]
    for k in ("median_abs_rel_error", "p90_abs_rel_error", "within_25pct"):
        assert band[k] == round(s[k], 6), (k, "rerun: costmodel validate --report")


def test_readme_claim_counts_match_check(gen):
    readme = gen.section_text((ROOT / "README.md").read_text(encoding="utf-8"), "claims")
    res = costmodel.check(str(ROOT / "scenarios" / "article_claims.yaml"))
    rows = [ln for ln in readme.splitlines() if ln.startswith("| `")]
    assert len(rows) == len(res["claims"])
    for row, c in zip(rows, res["claims"]):
        assert row.startswith(f"| `{c['id']}` |") and row.endswith(f"| **{c['verdict']}** |")
    for verdict, n in res["summary"].items():
        assert f"{verdict}: {n}" in readme


def test_layout_lists_every_module(gen):
    layout = gen.section_text((ROOT / "README.md").read_text(encoding="utf-8"), "layout")
    for f in (ROOT / "costmodel").rglob("*.py"):
        if f.name != "__init__.py":
            assert f"`{f.name}` — " in layout, f
    for d in ("inputs", "engine", "fast", "analysis", "calibration", "cli"):
        assert f"`{d}/` — " in layout


def test_no_references_to_documents_outside_the_repository():
    pattern = re.compile("DESIGN" + " §|[Ii]ssue" + " [0-9]+")
    files = [p for d in ("costmodel", "tests", "docs", "scripts", "benchmarks", "validation")
             for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".md")] + [ROOT / "README.md"]
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in files
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert hits == []


def test_plots_as_documented(tmp_path):
    """`import costmodel` then costmodel.plots.decision_map(...), as the README shows."""
    code = ("import costmodel, sys\n"
            "d = costmodel.plots.decision_map({'model': 'llama-2-7b', 'hardware': 'h100-sxm', "
            "'acceptance_rate': 0.75}, sys.argv[1], batch_sizes=(1, 64), contexts=(512, 3968))\n"
            "assert costmodel.plots is sys.modules['costmodel.analysis.plots']\n"
            "print(sorted(d['names']))\n")
    out = tmp_path / "map.png"
    r = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert out.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(AttributeError):
        costmodel.no_such_thing


def test_make_run_installs_without_test_extras():
    mk = (ROOT / "Makefile").read_text()
    run_recipe = mk.split("$(STAMP): pyproject.toml")[1].split("\n\n")[0]
    assert "pip install --quiet -e ." in run_recipe and "[test]" not in run_recipe
    assert re.search(r"^run: \$\(STAMP\)$", mk, re.M) and re.search(r"^test: \$\(TSTAMP\)$", mk, re.M)

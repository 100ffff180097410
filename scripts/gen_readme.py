"""Rewrite the generated sections of README.md and docs/design.md from the tool's own output.

    python scripts/gen_readme.py           # rewrite the sections (after changing fields, physics or data)
    python scripts/gen_readme.py --check   # exit 1 and name the sections that are out of date

A generated section sits between ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->``;
everything outside the markers is written by hand. The sections:

* ``fields``: the record-field table, from :mod:`costmodel.inputs.fields` (README and docs/design.md);
* ``validation``: the validation summary: held-out errors, leave-one-publication-out (the headline, as
  ``costmodel validate --report``) and leave-one-table-out
  (:func:`costmodel.calibration.calibrate.leave_one_source_out`), in-sample errors (``costmodel
  validate``), the goals, the fitted runtime values it quotes;
* ``claims``: the verdict table and counts of ``costmodel check scenarios/article_claims.yaml``;
* ``layout``: every module of ``costmodel/``, one line each: the first line of its docstring.

tests/test_readme.py builds the same sections and fails when the files disagree with them.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = {"README.md": ("fields", "validation", "claims", "layout"), "docs/design.md": ("fields", "layout")}
#: sub-packages in reading order (data flows inputs -> engine -> tools); any other comes after them
PACKAGE_ORDER = ("inputs", "engine", "fast", "analysis", "calibration", "cli")
CLAIMS_FILE = ROOT / "scenarios" / "article_claims.yaml"


# ------------------------------------------------------------------------------------ sections

def fields_section() -> str:
    from costmodel.inputs.fields import markdown_table
    return ("Run `costmodel eval --help` for the same list. A field left out takes its default; `—` means "
            "not set.\n\n" + markdown_table())


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def validation_section(held_out: dict, by_table: dict, in_sample: dict, in_sample_rows: list) -> str:
    """``held_out``, ``by_table``, ``in_sample``: :func:`costmodel.calibration.validate.summarize` of the
    leave-one-publication-out rows (the headline), the leave-one-table-out rows and ``validate()``'s
    rows; ``in_sample_rows``: ``validate()["rows"]``."""
    from costmodel.calibration.report import GOALS, goals_met
    from costmodel.inputs.hardware import load_hardware
    from costmodel.inputs.runtime import load_runtime

    n = held_out["n"]
    within_n = round(held_out["within_25pct"] * n)
    met = goals_met(held_out)
    goals = (f"a median ≤ {100 * GOALS['median_abs_rel_error']:.0f} % and a p90 ≤ "
             f"{100 * GOALS['p90_abs_rel_error']:.0f} % on ≥ {GOALS['n']} rows")
    words = {"median_abs_rel_error": "the median", "p90_abs_rel_error": "the p90", "n": "the row count"}
    verdict = ("met" if all(met.values()) else
               "not yet met (" + ", ".join(words.get(k, k) for k, v in met.items() if not v) + " missed)")
    eager = load_runtime("eager")
    medusa_ops, medusa_syncs = eager.spec_host_ops("medusa"), eager.spec_syncs("medusa")
    sm_bw = load_runtime("llama.cpp").sm_bandwidth_bytes_per_s
    a100 = load_hardware("a100-80gb")
    sizes = [abs(r["rel_error"]) for r in in_sample_rows if r["metric"] == "weights_bytes"]
    cat = held_out["categorical"]

    def three(s):
        return f"{_pct(s['median_abs_rel_error'])}, {_pct(s['p90_abs_rel_error'])} and {_pct(s['within_25pct'])}"

    return (
        f"Held-out error against {n} published measurements, leave-one-publication-out (the rows of each "
        "publication — a paper, a README, a benchmark collection — are predicted with runtime parameters fitted "
        f"on all the others; `validation/REPORT.md`): median |relative error| **{_pct(held_out['median_abs_rel_error'])}**, "
        f"90th percentile **{_pct(held_out['p90_abs_rel_error'])}**, **{_pct(held_out['within_25pct'])}** of "
        f"rows within 25 % ({within_n} of {n}). The project's goals, {goals}, are {verdict}. Leaving out one "
        f"source table at a time instead (a publication's other tables stay in the fit) gives {three(by_table)}; "
        "in sample (parameters fitted on every row: the table plain `costmodel validate` prints under its "
        f"held-out line) {three(in_sample)}. {cat['n']} more row{'s' if cat['n'] != 1 else ''} "
        f"compare{'' if cat['n'] != 1 else 's'} a yes/no outcome (`fits`: does the configuration fit in memory?) "
        f"instead of a number: {cat['agree']} of {cat['n']} agree.\n\n"
        "Research code's host work per speculation step (candidates, acceptance with device-to-host "
        "syncs, KV compaction) is counted, not fitted: torch operations and syncs per step read from each "
        f"method's public code (`runtimes/eager.yaml`: Medusa {medusa_ops:.0f} operations and {medusa_syncs:.0f} syncs), "
        "each priced at the runtime's host cost per kernel and the device's launch plus host-link latency. "
        "A fitted mechanism is a kernel's bandwidth per SM (`sm_bandwidth_bytes_per_s`, "
        f"{sm_bw / 1e9:.0f} GB/s for llama.cpp: its bytes in flight over the DRAM latency, which caps it at "
        f"{a100.sm_count} × {sm_bw / 1e9:.0f} GB/s = {a100.sm_count * sm_bw / 1e12:.2f} TB/s on an A100's "
        f"{a100.sm_count} SMs). The {len(sizes)} model sizes (`weights_bytes` rows) match to within "
        f"{_pct(max(sizes))}.")


def claims_section(result: dict) -> str:
    """The README's verdict table and counts from :func:`costmodel.check`'s result."""
    lines = ["| claim | article says | verdict |", "|---|---|---|"]
    for c in result["claims"]:
        text = " ".join(str(c.get("text") or "").split())
        if len(text) > 88:
            text = text[:87] + "…"
        text = text.replace("|", "\\|")
        lines.append(f"| `{c['id']}` | {text} | **{c['verdict']}** |")
    counts = Counter(c["verdict"] for c in result["claims"])
    lines += ["", f"{len(result['claims'])} claims: "
              + ", ".join(f"{v}: {k}" for v, k in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))]
    return "\n".join(lines)


def _doc_line(path: Path) -> str:
    import ast
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    line = " ".join(doc.strip().split("\n\n")[0].split())        # the first paragraph, on one line
    if len(line) > 160 and ". " in line[20:]:
        line = line[:line.index(". ", 20) + 1]                      # its first sentence
    line = re.sub(r":\w+:`~?(?:[\w.]+\.)?(\w+)`", r"`\1`", line)     # :func:`a.b.f` -> `f`
    return line.replace("``", "`") or "(no docstring)"


def layout_section(pkg: Path | None = None, depth: int = 0) -> str:
    """A nested list of the package: each module with the first line of its docstring."""
    pkg = pkg or ROOT / "costmodel"
    ind = "  " * depth
    lines = [] if depth else [f"- `costmodel/` — {_doc_line(pkg / '__init__.py')}"]
    ind = "  " * (depth + 1)
    for f in sorted(pkg.glob("*.py")):
        if f.name != "__init__.py" or depth:
            if f.name == "__init__.py":
                continue
            lines.append(f"{ind}- `{f.name}` — {_doc_line(f)}")
    subs = [d for d in pkg.iterdir() if (d / "__init__.py").is_file()]
    subs.sort(key=lambda d: (PACKAGE_ORDER.index(d.name) if d.name in PACKAGE_ORDER else len(PACKAGE_ORDER), d.name))
    for d in subs:
        lines.append(f"{ind}- `{d.name}/` — {_doc_line(d / '__init__.py')}")
        lines.append(layout_section(d, depth + 1))
    return "\n".join(lines)


def compute_sections(lopo: dict | None = None, loso: dict | None = None) -> dict:
    """Every generated section. ``lopo``/``loso``: leave-one-publication-out / leave-one-table-out
    results to reuse (each takes seconds)."""
    from costmodel.analysis.claims import check
    from costmodel.calibration import calibrate
    from costmodel.calibration.validate import load_measurements, summarize, validate

    ms = load_measurements()
    if lopo is None:
        lopo = calibrate.leave_one_source_out(ms, by="publication")
    if loso is None:
        loso = calibrate.leave_one_source_out(ms, by="group")
    in_sample = validate(ms)
    return {"fields": fields_section(),
            "validation": validation_section(summarize(lopo["rows"]), summarize(loso["rows"]), in_sample["summary"],
                                             in_sample["rows"]),
            "claims": claims_section(check(str(CLAIMS_FILE))),
            "layout": layout_section()}


# ------------------------------------------------------------------------------------ files

def _pattern(name: str) -> re.Pattern:
    return re.compile(rf"(<!-- generated: {name} -->\n)(.*?)(<!-- end generated: {name} -->)", re.S)


def section_text(text: str, name: str) -> str | None:
    """The current body of section ``name`` in ``text`` (None when its markers are missing)."""
    m = _pattern(name).search(text)
    return None if m is None else m.group(2).rstrip("\n")


def rewrite(text: str, sections: dict, names) -> str:
    for name in names:
        pat = _pattern(name)
        if not pat.search(text):
            raise SystemExit(f"gen_readme: markers for section '{name}' not found")
        text = pat.sub(lambda m: m.group(1) + sections[name] + "\n" + m.group(3), text)
    return text


def stale(sections: dict) -> list[str]:
    """'FILE: section' for every generated section that differs from ``sections``."""
    out = []
    for rel, names in FILES.items():
        text = (ROOT / rel).read_text(encoding="utf-8")
        out += [f"{rel}: {n}" for n in names if section_text(text, n) != sections[n]]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="report out-of-date sections, write nothing")
    args = ap.parse_args(argv)
    sections = compute_sections()
    if args.check:
        bad = stale(sections)
        for b in bad:
            print(f"out of date: {b} (run python scripts/gen_readme.py)")
        return 1 if bad else 0
    for rel, names in FILES.items():
        path = ROOT / rel
        old = path.read_text(encoding="utf-8")
        new = rewrite(old, sections, names)
        if new != old:
            path.write_text(new, encoding="utf-8")
            print(f"rewrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

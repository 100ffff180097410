# Quick start: `make run` (the article's walkthrough) and `make test` (the whole suite).
# `run` installs costmodel alone; `test` adds the test extras (pytest, hypothesis, dask, pyarrow).
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed
TSTAMP  = $(VENV)/.installed-test

.PHONY: run test install install-test readme clean bench

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $(STAMP)

$(TSTAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(TSTAMP)

install: $(TSTAMP)

run: $(STAMP)
	$(VENV)/bin/costmodel run scenarios/walkthrough.yaml

test: $(TSTAMP)
	$(PY) -m pytest -q

# rewrite the README's and docs/design.md's generated sections (field table, validation figures, verdicts, layout)
readme: $(STAMP)
	$(PY) scripts/gen_readme.py

bench: $(STAMP)
	$(PY) benchmarks/bench_sweep.py

clean:
	rm -rf $(VENV) build *.egg-info

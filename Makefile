# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest-xdist: one worker per core; tests sharing a module-scoped fixture stay on one worker
# (tests/conftest.py). `make test PARALLEL=` runs the suite in one process.
PARALLEL ?= -n auto --dist loadscope

.PHONY: demo test test-fast lint clean bench bench-all schemas

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,ray]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sealbench demo

# Regenerate the shipped JSON Schemas (src/sealbench/schemas/ and docs/schemas/) from the models
# after a format change (docs/formats.md#schemas); tests/test_formats.py fails until you do.
schemas: $(STAMP)
	$(BIN)/python -m sealbench.schemas

test: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/mypy
	$(BIN)/pytest -q $(PARALLEL)

# Unit tests only (no whole-protocol runs, no sandbox): the inner loop, well under a minute.
test-fast: $(STAMP)
	$(BIN)/pytest -q $(PARALLEL) -m "not slow and not sandbox and not browser"

# `make bench`: every bench/*.py but the slow ones, at their default sizes (a few minutes on 2
# shared cores). bench_coverage.py simulates interval coverage (many minutes); bench_scale.py
# seals and runs a large protocol (run it with N by hand: `python bench/bench_scale.py 100000`).
# `make bench-all` runs every one. A new bench is quick unless listed here.
BENCH_SLOW := bench/bench_coverage.py bench/bench_scale.py
BENCH_QUICK := $(filter-out $(BENCH_SLOW),$(sort $(wildcard bench/*.py)))

bench: $(STAMP)
	for f in $(BENCH_QUICK); do $(BIN)/python $$f || exit 1; done

bench-all: $(STAMP)
	for f in bench/*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) .sealbench .pytest_cache .mypy_cache .ruff_cache

# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# pytest-xdist: one worker per core; tests sharing a module-scoped fixture stay on one worker
# (tests/conftest.py). `make test PARALLEL=` runs the suite in one process.
PARALLEL ?= -n auto --dist loadscope

.PHONY: demo test test-fast lint clean bench

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sealbench demo

test: $(STAMP)
	$(BIN)/ruff check src tests bench tools
	$(BIN)/mypy
	$(BIN)/pytest -q $(PARALLEL)

# Unit tests only (no whole-protocol runs, no sandbox): the inner loop, well under a minute.
test-fast: $(STAMP)
	$(BIN)/pytest -q $(PARALLEL) -m "not slow and not sandbox"

bench: $(STAMP)
	for f in bench/*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) .sealbench .pytest_cache .mypy_cache .ruff_cache

# Two entry points for a fresh machine: `make up` and `make test`. Everything else is a step of theirs.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml requirements.lock | cksum | cut -d' ' -f1)
PIP_VERSION := 26.3

UI_SOURCES := $(shell find frontend/src frontend/index.html frontend/package.json frontend/vite.config.ts frontend/tsconfig.json -type f 2>/dev/null)

.PHONY: install ui up test check lint ui-check suite unit bench check-python clean

# Steps that do not need each other run side by side: installing beside building the dashboard,
# linting beside the tests (a lint failure still fails the run).
MAKEFLAGS += --jobs=4

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Strata needs Python 3.11; set PYTHON=/path/to/python3.11")'

$(STAMP): pyproject.toml requirements.lock | check-python
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check pip==$(PIP_VERSION)
	$(BIN)/pip install --quiet -c requirements.lock -e ".[dev]"
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

# The dashboard: npm ci from the committed lock file, then a production build into frontend/dist.
frontend/node_modules/.package-lock.json: frontend/package-lock.json
	cd frontend && npm ci --no-audit --no-fund --loglevel=error

frontend/dist/index.html: frontend/node_modules/.package-lock.json $(UI_SOURCES)
	cd frontend && npm run build

ui: frontend/dist/index.html

## Run the control plane on this machine (server + 2 local agents, SQLite under ~/.strata) with a demo job.
up: install ui
	$(BIN)/strata up --demo

# The tests run on this many pytest-xdist workers, each test file whole on one: most wait on
# processes they started, so more workers than cores pays. At most STRATA_TEST_HEAVY_LANES of
# them (tests/conftest.py, default 2) run end-to-end files at once: each runs TensorFlow
# clusters against deadlines of its own.
TEST_WORKERS ?= 4
PARALLEL := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

## Lint, type-check and run the whole test suite with branch coverage (STRATA_TEST_STRICT=1 turns skips into failures).
test: lint ui-check suite

suite: install ui
	$(BIN)/pytest -q $(PARALLEL) --cov --cov-report=term:skip-covered --durations=20

ui-check: frontend/node_modules/.package-lock.json
	cd frontend && npm run check

## The inner loop, under 2 minutes: lint, type-check and the tests without TensorFlow, a browser, Docker or PostgreSQL.
check: lint unit

unit: install
	$(BIN)/pytest -q $(PARALLEL) -m "not e2e and not slow and not postgres"

## Run every benchmark (QUICK=1 for the short versions), draw the plots, render docs/benchmarks.md.
bench: install
	$(BIN)/pip install --quiet -c requirements.lock -e ".[dev,bench]"
	$(BIN)/python -m bench.metrics_pipeline $(if $(QUICK),--quick)
	$(BIN)/python -m bench.training_overhead $(if $(QUICK),--quick)
	$(BIN)/python -m bench.launch $(if $(QUICK),--quick)
	$(BIN)/python -m bench.warm_throughput $(if $(QUICK),--quick)
	$(BIN)/python -m bench.client_mode $(if $(QUICK),--quick)
	$(BIN)/python -m bench.recovery $(if $(QUICK),--quick)
	$(BIN)/python -m bench.scale $(if $(QUICK),--quick)
	$(BIN)/python -m bench.plots
	$(BIN)/python -m bench.report

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .import_linter_cache frontend/node_modules frontend/dist

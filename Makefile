# Two entry points for a fresh machine: `make up` and `make test`. Everything else is a step of theirs.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml requirements.lock | cksum | cut -d' ' -f1)
PIP_VERSION := 26.3

.PHONY: install up test lint check-python clean

check-python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Strata needs Python 3.11; set PYTHON=/path/to/python3.11")'

$(STAMP): pyproject.toml requirements.lock | check-python
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check pip==$(PIP_VERSION)
	$(BIN)/pip install --quiet -c requirements.lock -e ".[dev]"
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

## Run the control plane on this machine (server + 2 local agents, SQLite under ~/.strata) with a demo job.
up: install
	$(BIN)/strata up --demo

## Lint, type-check and run the whole test suite (STRATA_TEST_STRICT=1 turns skips into failures).
test: install lint
	$(BIN)/pytest -q

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# The two commands: `make demo` (a running pipeline on the embedded defaults) and `make test`.
# Both create .venv and install sluice into it on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/python -m sluice.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

test: $(STAMP) lint
	$(VENV)/bin/pytest

bench: $(STAMP)
	$(VENV)/bin/python bench/file_pipeline.py

# The two commands: `make demo` (a running pipeline on the embedded defaults) and `make test`.
# Both create .venv and install sluice into it on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test test-rocketmq lint bench venv

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

# The tests marked `rocketmq`, on a real broker: SLUICE_ROCKETMQ_NAMESRV if set, else the local
# RocketMQ 5.x of `scripts/servers.sh up rocketmq` (the tests start it on demand; this target
# leaves it running for the next run, `scripts/servers.sh down rocketmq` stops it).
test-rocketmq: $(STAMP)
	@if [ -z "$$SLUICE_ROCKETMQ_NAMESRV" ]; then bash scripts/servers.sh up rocketmq; fi
	$(VENV)/bin/pytest -m rocketmq

bench: $(STAMP)
	$(VENV)/bin/python bench/file_pipeline.py

# The two commands: `make demo` (a running pipeline on the embedded defaults) and `make test`.
# Both create .venv and install sluice into it on first use: `make demo` only the runtime,
# `make venv` / `make test` the runtime with every extra and the test tools.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed
RUNTIME_STAMP := $(VENV)/.installed-runtime
# the demo runs in a venv that has everything (make venv) as well as in one with the runtime only
DEMO_VENV := $(if $(shell test $(STAMP) -nt pyproject.toml && echo up),$(STAMP),$(RUNTIME_STAMP))

.PHONY: demo test test-rocketmq test-spark-cluster-kafka crash-kafka crash-redis crash-lake crash-rabbitmq crash-cdc bench-cdc-snapshot crash-mq chaos lint bench venv servers-prepare servers-up servers-down

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --upgrade pip
	$(VENV)/bin/pip install -e '.[all,dev]'
	touch $(STAMP)

$(RUNTIME_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --upgrade pip
	$(VENV)/bin/pip install -e .
	touch $(RUNTIME_STAMP)

venv: $(STAMP)

demo: $(DEMO_VENV)
	$(VENV)/bin/python -m sluice.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

# The servers the suite uses (scripts/servers/NAME.sh; see docs/servers.md); names without a script
# in this checkout are left out.
SERVERS ?= postgres mariadb redis rabbitmq mosquitto nats kafka kafka-cluster rocketmq spark-cluster chromium
SERVERS_HERE := $(foreach n,$(SERVERS),$(if $(wildcard scripts/servers/$(n).sh),$(n)))

# Install what the servers need (Debian packages as root, jars), start nothing: on a machine that
# has it all this takes well under a second. The tests start the servers they need themselves.
servers-prepare:
	scripts/servers.sh prepare $(SERVERS_HERE)

# Keep the servers up between test runs (a run stops only what it started itself).
servers-up:
	scripts/servers.sh up $(SERVERS_HERE)

servers-down:
	scripts/servers.sh down all

test: $(STAMP) lint servers-prepare
	$(VENV)/bin/pytest

# The tests marked `rocketmq`, on a real broker: SLUICE_ROCKETMQ_NAMESRV if set, else the local
# RocketMQ 5.x of `scripts/servers.sh up rocketmq` (the tests start it on demand; this target
# leaves it running for the next run, `scripts/servers.sh down rocketmq` stops it).
# The Spark standalone cluster test on the Kafka bus (the suite runs it on RocketMQ; see
# docs/spark-cluster.md).
test-spark-cluster-kafka: $(STAMP)
	SLUICE_SPARK_CLUSTER_BUS=kafka $(VENV)/bin/pytest tests/e2e/test_spark_cluster.py -k pipeline

test-rocketmq: $(STAMP)
	@if [ -z "$$SLUICE_ROCKETMQ_NAMESRV" ]; then bash scripts/servers.sh up rocketmq; fi
	$(VENV)/bin/pytest -m rocketmq

# kill -9 of a file → Kafka topic → file worker three times (the suite kills once), on the real
# broker of scripts/servers.sh (started if needed): sink byte-identical, each line once in the topic.
crash-kafka: $(STAMP)
	SLUICE_CRASH_ROUNDS=3 $(VENV)/bin/pytest tests/e2e/test_bus_crash.py -k kafka -s

# kill -9 of a Redis stream → topic → stream, list, hash and string keys and list → topic worker
# three times (the suite kills once; the rounds take turns catching the list, hash and string
# sinks with uncommitted writes), on the Redis of scripts/servers.sh (started if needed).
crash-redis: $(STAMP)
	SLUICE_CRASH_ROUNDS=3 $(VENV)/bin/pytest tests/e2e/test_redis_crash.py -s

# kill -9 of a worker writing 1M records into Parquet, Delta and Iceberg, twice (the suite kills
# once, with 30,000 records): each table holds each record once, every version/snapshot reads.
crash-lake: $(STAMP)
	SLUICE_LAKE_RECORDS=1000000 SLUICE_CRASH_ROUNDS=2 $(VENV)/bin/pytest tests/e2e/test_lake_crash.py -s --timeout 3600

# kill -9 of a RabbitMQ stream → topic → exchange and queue → topic worker three times (the suite
# kills once), on the RabbitMQ of scripts/servers.sh (started if needed).
crash-rabbitmq: $(STAMP)
	SLUICE_CRASH_ROUNDS=3 $(VENV)/bin/pytest tests/e2e/test_rabbitmq_crash.py -s

# CDC: five kill -9s of one worker while it streams one table and snapshots another
# (PostgreSQL → MariaDB), and five of a MariaDB → PostgreSQL worker streaming from the binlog
crash-cdc: $(STAMP)
	SLUICE_CDC_KILLS=5 $(VENV)/bin/pytest tests/e2e/test_cdc_crash.py tests/e2e/crash_cdc_mariadb.py -s

# CDC: a 1,000,000-row PostgreSQL table snapshotted over 2 tasks while a writer continues, then
# the topic replayed and compared with the table (no row missing or doubled); needs the servers
bench-cdc-snapshot: $(STAMP)
	$(VENV)/bin/python bench/cdc.py --skip pg,maria --snapshot-rows 1000000

# kill -9 of a NATS stream → topic → stream and MQTT → topic → MQTT worker three times (the suite
# kills once), on the NATS and Mosquitto of scripts/servers.sh (started if needed).
crash-mq: $(STAMP)
	SLUICE_CRASH_ROUNDS=3 $(VENV)/bin/pytest tests/e2e/test_mq_crash.py -s

# kill -9 of a real `sluice worker` (file → topic → file, embedded defaults) at random moments and
# during REST mutations, CHAOS_ROUNDS times (bench/chaos_worker.py; results in bench/README.md).
CHAOS_ROUNDS ?= 20
chaos: $(STAMP)
	$(VENV)/bin/python bench/chaos_worker.py --rounds $(CHAOS_ROUNDS)

bench: $(STAMP)
	$(VENV)/bin/python bench/file_pipeline.py

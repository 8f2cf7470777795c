# The two commands: `make demo` (a running pipeline on the embedded defaults) and `make test`.
# Both create .venv and install sluice into it on first use: `make demo` only the runtime,
# `make venv` / `make test` the runtime with every extra and the test tools.
#
# Test tiers (docs/testing.md):
#   make test-quick  unit + integration tests not marked `slow`, on two workers (a developer's loop)
#   make test        the whole suite as CI runs it (.ci/run): lint, unit, then integration and
#                    end-to-end tests on two pytest-xdist workers; timings in test-reports/
#   make test-deep   the many-round and 1M-scale crash runs, the stalled push, chaos and the CDC
#                    snapshot bench (`make -k test-deep` to run them all even if one fails)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed
RUNTIME_STAMP := $(VENV)/.installed-runtime
# the demo runs in a venv that has everything (make venv) as well as in one with the runtime only
DEMO_VENV := $(if $(shell test $(STAMP) -nt pyproject.toml && echo up),$(STAMP),$(RUNTIME_STAMP))

.PHONY: demo test test-quick test-deep test-rocketmq test-spark-cluster-kafka test-spark-cluster-rocketmq crash-file crash-kafka crash-rocketmq crash-jdbc crash-redis crash-lake crash-rabbitmq crash-cdc bench-cdc-snapshot crash-mq push-stall chaos lint jvm-archive bench venv servers-prepare servers-up servers-down

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

# The driver JVM's class archive (sluice.engine.class_archive), built once per JVM and Spark
# installation (~1 min; a worker builds it in the background otherwise): every Spark the tests
# start then maps Spark's classes instead of loading them (a session starts in about half the time).
jvm-archive: $(STAMP)
	-$(VENV)/bin/python -m sluice.engine.class_archive_build

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

# Hypothesis with the same examples every run; the run's per-test timings (JUnit XML) kept in
# $(REPORTS), the 25 slowest printed (pyproject's addopts).
PYTEST_CI := --hypothesis-profile=ci
# two workers: the serial group of tests/conftest.py on one, in its order, the rest balanced
XDIST := -n 2 --dist loadgroup --no-loadscope-reorder
REPORTS ?= test-reports
# a crash or stall run of test-deep: one round may take many minutes
DEEP := -s --timeout 3600

# The unit tests first, on two workers (107 s in CI while the servers start, against 130 s in one
# process; they need no server: .ci/run starts the servers meanwhile), then the rest; a failure in
# the first does not keep the second from running. The exit code is non-zero if either failed.
# `.ci/run` has prepared the servers already and is starting them (PREPARE= : a prepare now would
# wait for each server's start to end).
PREPARE ?= servers-prepare
test: $(STAMP) lint $(PREPARE) jvm-archive
	@mkdir -p $(REPORTS)
	@rm -f $(REPORTS)/timeline.tsv
	@rc=0; \
	$(VENV)/bin/pytest tests/unit -n 2 $(PYTEST_CI) --junitxml=$(REPORTS)/unit.xml || rc=$$?; \
	SLUICE_TEST_TIMELINE=$(REPORTS)/timeline.tsv \
		$(VENV)/bin/pytest tests/integration tests/e2e $(XDIST) $(PYTEST_CI) \
		--junitxml=$(REPORTS)/suite.xml || rc=$$?; \
	$(VENV)/bin/python -m tests.timeline $(REPORTS)/timeline.tsv || true; \
	exit $$rc

# Unit and integration tests without the `slow` ones, on two workers (about 10 minutes): the
# servers are started on demand as in `make test`.
test-quick: $(STAMP) jvm-archive
	$(VENV)/bin/pytest tests/unit tests/integration -m "not slow" $(XDIST) $(PYTEST_CI)

# What CI leaves out: the repetitions and the large scales of the crash and stall tests (the suite
# keeps one kill -9 of each and one outage of each server), chaos, the CDC snapshot bench and the
# Spark-cluster pipeline test on RocketMQ (the suite runs it on Kafka).
test-deep: crash-file crash-kafka crash-rocketmq crash-jdbc crash-redis crash-lake crash-rabbitmq crash-cdc crash-mq push-stall chaos bench-cdc-snapshot test-spark-cluster-rocketmq

# The tests marked `rocketmq`, on a real broker: SLUICE_ROCKETMQ_NAMESRV if set, else the local
# RocketMQ 5.x of `scripts/servers.sh up rocketmq` (the tests start it on demand; this target
# leaves it running for the next run, `scripts/servers.sh down rocketmq` stops it).
# The Spark standalone cluster pipeline test on the Kafka bus alone (the suite runs it on Kafka
# and RocketMQ; see docs/spark-cluster.md).
test-spark-cluster-kafka: $(STAMP)
	$(VENV)/bin/pytest tests/e2e/test_spark_cluster.py -k "pipeline and kafka"

# The same pipeline test on the RocketMQ bus (the suite runs it on Kafka alone).
test-spark-cluster-rocketmq: $(STAMP)
	SLUICE_SPARK_CLUSTER_BUSES=rocketmq $(VENV)/bin/pytest tests/e2e/test_spark_cluster.py -k pipeline

test-rocketmq: $(STAMP)
	@if [ -z "$$SLUICE_ROCKETMQ_NAMESRV" ]; then bash scripts/servers.sh up rocketmq; fi
	$(VENV)/bin/pytest -m rocketmq

# kill -9 of a file → topic → file process over 1,000,000 lines, fused and on the JVM path, at
# three random sink fill levels and once soon after a start (the suite kills once per path over
# 200,000 lines): the sink byte-identical to the source.
crash-file: $(STAMP)
	SLUICE_CRASH_ROUNDS=3 SLUICE_FILE_LINES=1000000 $(VENV)/bin/pytest tests/e2e/test_crash_recovery.py $(DEEP)

# kill -9 of a file → Kafka topic → file worker three times on 1M lines (the suite kills once, on
# 40k), on the real broker of scripts/servers.sh (started if needed): sink byte-identical, each
# line once in the topic as a read_committed consumer counts them.
crash-kafka: $(STAMP)
	SLUICE_CRASH_ROUNDS=3 SLUICE_CRASH_LINES=1000000 $(VENV)/bin/pytest tests/e2e/test_bus_crash.py -k kafka $(DEEP)

# The same on the RocketMQ 5 broker of scripts/servers.sh (the suite kills once, on 100k lines):
# each line once in the topic, the consumer group's offsets at the end.
crash-rocketmq: $(STAMP)
	SLUICE_CRASH_ROUNDS=3 SLUICE_CRASH_LINES=1000000 $(VENV)/bin/pytest tests/e2e/test_bus_crash.py -k rocketmq $(DEEP)

# kill -9 of a 1,000,000-row PostgreSQL → topic → MariaDB copy, at a random fill level and a random
# time after a start (the suite kills once, 200,000 rows): the target equals the source, each row
# once in the topic.
crash-jdbc: $(STAMP)
	SLUICE_CRASH_ROUNDS=2 SLUICE_JDBC_ROWS=1000000 $(VENV)/bin/pytest tests/e2e/test_jdbc_crash.py $(DEEP)

# kill -9 of a Redis stream → topic → stream, list, hash and string keys and list → topic worker
# three times (the suite kills once; the rounds take turns catching the list, hash and string
# sinks with uncommitted writes), on the Redis of scripts/servers.sh (started if needed).
crash-redis: $(STAMP)
	SLUICE_CRASH_ROUNDS=3 $(VENV)/bin/pytest tests/e2e/test_redis_crash.py $(DEEP)

# kill -9 of a worker writing 1M records into Parquet, Delta and Iceberg, twice (the suite kills
# once, with 30,000 records): each table holds each record once, every version/snapshot reads.
crash-lake: $(STAMP)
	SLUICE_LAKE_RECORDS=1000000 SLUICE_CRASH_ROUNDS=2 $(VENV)/bin/pytest tests/e2e/test_lake_crash.py $(DEEP)

# kill -9 of a RabbitMQ stream → topic → exchange and queue → topic worker three times (the suite
# kills once), on the RabbitMQ of scripts/servers.sh (started if needed).
crash-rabbitmq: $(STAMP)
	SLUICE_CRASH_ROUNDS=3 $(VENV)/bin/pytest tests/e2e/test_rabbitmq_crash.py $(DEEP)

# CDC: five kill -9s of one worker while it streams one table and snapshots another
# (PostgreSQL → MariaDB), five of a MariaDB → PostgreSQL worker streaming from the binlog, and
# four mirror rounds per direction with ADD COLUMNs while running and while killed
crash-cdc: $(STAMP)
	SLUICE_CDC_KILLS=5 $(VENV)/bin/pytest tests/e2e/test_cdc_crash.py tests/e2e/crash_cdc_mariadb.py $(DEEP)

# CDC: a 1,000,000-row PostgreSQL table snapshotted over 2 tasks while a writer continues, then
# the topic replayed and compared with the table (no row missing or doubled); needs the servers
bench-cdc-snapshot: $(STAMP)
	$(VENV)/bin/python bench/cdc.py --skip pg,maria --snapshot-rows 1000000

# kill -9 of a NATS stream → topic → stream and MQTT → topic → MQTT worker three times (the suite
# kills once), on the NATS and Mosquitto of scripts/servers.sh (started if needed).
crash-mq: $(STAMP)
	SLUICE_CRASH_ROUNDS=3 $(VENV)/bin/pytest tests/e2e/test_mq_crash.py $(DEEP)

# A stalled HTTP target with 1M records of 2 KB (1.9 GiB) waiting in the topic for 60 s: the
# worker's memory stays bounded and every record arrives (the suite: 60,000 records of 4 KB, 10 s).
push-stall: $(STAMP)
	$(VENV)/bin/python bench/push_stall.py --records 1000000 --stall-s 60

# kill -9 of a real `sluice worker` (file → topic → file, embedded defaults) at random moments and
# during REST mutations, CHAOS_ROUNDS times (bench/chaos_worker.py; results in bench/README.md).
CHAOS_ROUNDS ?= 20
chaos: $(STAMP)
	$(VENV)/bin/python bench/chaos_worker.py --rounds $(CHAOS_ROUNDS)

bench: $(STAMP)
	$(VENV)/bin/python bench/file_pipeline.py

"""Benchmark: change events into the topic, PostgreSQL (pgoutput slot) and MariaDB (binlog).

For each database: an 8-column table gets `--changes` changes (60% inserts, 30% updates, 10%
deletes, in transactions of 1,000 rows) after the capture position was fixed, then:
  baseline  the decoding floor outside sluice: PostgreSQL `SELECT count(*) FROM
            pg_logical_slot_peek_binary_changes(…)` (the server decodes the whole range once);
            MariaDB: iterating the binlog range with mysql-replication alone (decoded rows);
  cdc       the CDC connector started on a fresh runner, timed until the topic holds every change
            event (Spark start-up included: a warm-up of 1,000 changes runs first, untimed);
            "steady" is the rate between 20% and 80% of the events.

Needs the test servers (PostgreSQL 127.0.0.1:5432, MariaDB 127.0.0.1:3306, user root, no
password). Uses the schema/database `sluice_bench_cdc`, dropped at the end.

Snapshots (`bench_snapshot`): a table of `--snapshot-rows` rows snapshotted while a writer keeps
changing it, against the database's Python driver fetching it once (`snapshot`: PostgreSQL,
`maria-snapshot`: MariaDB).

Usage: python bench/cdc.py [--changes 200000] [--snapshot-rows 1000000]
                           [--skip pg,snapshot,maria-snapshot,maria]
       python bench/cdc.py --harness pg|maria [--changes 50000] [--profile]   (no Spark: the task
       alone against the decoder alone, optionally under cProfile)
       python bench/cdc.py --encode [--changes 20000]   (no servers: the engine's costs per event
       after the task, the envelope against a flat value of the same columns)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from typing import Any

import sqlalchemy as sa

from sluice.engine.session import build_session
from sluice.runtime.runner import ConnectorRunner

NS = "sluice_bench_cdc"
SLOT = "sluice_bench_cdc"
PG_URL = "postgresql+psycopg://root@127.0.0.1:5432/test"
MY_URL = "mysql+pymysql://root@127.0.0.1:3306/mysql?charset=utf8mb4"
TX = 1000


def workload(conn: Any, table: str, first: int, changes: int, pg: bool) -> None:
    """`changes` row changes: inserts of ids from `first`, then updates, then deletes."""
    inserts, updates = changes * 6 // 10, changes * 3 // 10
    deletes = changes - inserts - updates
    for low in range(first, first + inserts, TX):
        high = min(low + TX, first + inserts)
        if pg:
            conn.exec_driver_sql(
                f"INSERT INTO {table} SELECT g, 'name ' || g, g * 1.5, g %% 1000, g / 7.0, "
                "g %% 2 = 0, timestamp '2024-01-01' + g * interval '1 second', "
                f"'note ' || md5(g::text) FROM generate_series({low}, {high - 1}) g"
            )
        else:
            conn.exec_driver_sql(
                f"INSERT INTO {table} SELECT seq, CONCAT('name ', seq), seq * 1.5, seq %% 1000, "
                "seq / 7.0, seq %% 2, TIMESTAMP '2024-01-01 00:00:00' + INTERVAL seq SECOND, "
                f"CONCAT('note ', MD5(seq)) FROM seq_{low}_to_{high - 1}"
            )
        conn.commit()
    for low in range(first, first + updates, TX):
        high = min(low + TX, first + updates)
        conn.exec_driver_sql(f"UPDATE {table} SET qty = qty + 1 WHERE id >= {low} AND id < {high}")
        conn.commit()
    start = first + inserts - deletes
    for low in range(start, first + inserts, TX):
        conn.exec_driver_sql(f"DELETE FROM {table} WHERE id >= {low} AND id < {low + TX}")
        conn.commit()


COLUMNS = {
    True: "id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, amount NUMERIC(18,4), qty INTEGER, "
    "price DOUBLE PRECISION, flag BOOLEAN, created TIMESTAMP(6), note TEXT",
    False: "id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, amount DECIMAL(18,4), qty INT, "
    "price DOUBLE, flag TINYINT, created DATETIME(6), note TEXT",
}


def topic_count(runner: ConnectorRunner, topic: str) -> int:
    log = runner.bus.log
    if not log.topic_exists(topic):
        return 0
    return sum(q.max_offset - q.min_offset for q in log.offsets(topic).values())


def run_connector(spark: Any, config: dict[str, str], topic: str, expect: int) -> dict:
    """Start the connector on a fresh store; time until `topic` holds `expect` records."""
    with tempfile.TemporaryDirectory(prefix="sluice-bench-cdc-") as root:
        runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
        started = time.perf_counter()
        runner.start("cdc", config)
        marks: dict[float, float] = {}
        try:
            while True:
                running = runner.running["cdc"]
                failure = running.failure()
                if failure is not None:
                    raise RuntimeError(failure[0])
                n = topic_count(runner, topic)
                now = time.perf_counter() - started
                for frac in (0.2, 0.8):
                    if frac not in marks and n >= expect * frac:
                        marks[frac] = now
                if n >= expect:
                    break
                time.sleep(0.05)
            total = time.perf_counter() - started
        finally:
            runner.stop("cdc")
        steady = expect * 0.6 / max(marks[0.8] - marks[0.2], 1e-9)
        return {"seconds": total, "rate": expect / total, "steady": steady, "events": n}


def bench_pg(spark: Any, changes: int) -> dict:
    engine = sa.create_engine(PG_URL)
    with engine.connect() as c:
        c.exec_driver_sql(f"DROP SCHEMA IF EXISTS {NS} CASCADE")
        c.exec_driver_sql(f"CREATE SCHEMA {NS}")
        c.exec_driver_sql(f"CREATE TABLE {NS}.t ({COLUMNS[True]})")
        c.exec_driver_sql(f"ALTER TABLE {NS}.t REPLICA IDENTITY FULL")
        c.commit()
    # several micro-batches, so a steady rate shows; the changes only (bench_snapshot times
    # the snapshot)
    config = pg_config(**{"read.max.rows": "20000", "snapshot.mode": "never"})
    topic = f"b.{NS}.t"
    try:
        # warm-up: creates the slot, starts Spark's Python workers
        run_connector_warm(spark, config, engine, topic)
        with engine.connect() as c:
            _wait_slot_free(c)
            c.exec_driver_sql(
                "SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (SLOT,)
            )
            c.commit()
            workload(c, f"{NS}.t", 10_000_000, changes, pg=True)
            # Decoding sees what is flushed (the server runs synchronous_commit=off): wait for it.
            end = c.exec_driver_sql("SELECT pg_current_wal_insert_lsn()").scalar()
            while not c.exec_driver_sql(
                "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (end,)
            ).scalar():
                time.sleep(0.05)
            t0 = time.perf_counter()
            n = c.exec_driver_sql(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
                "'proto_version', '1', 'publication_names', %s)",
                (SLOT, SLOT),
            ).scalar()
            baseline = time.perf_counter() - t0
        result = run_connector(spark, config, topic, changes)
        result.update(baseline=baseline, messages=n)
        return result
    finally:
        drop_pg(engine)


def pg_config(**extra: str) -> dict[str, str]:
    return {
        "connector.class": "PostgresCdcSourceConnector",
        "connection.url": "jdbc:postgresql://127.0.0.1:5432/test",
        "connection.user": "root",
        "topic.prefix": "b",
        "table.include.list": f"{NS}.t",
        "slot.name": SLOT,
        "publication.name": SLOT,
        "value.converter": "AvroConverter",
        **extra,
    }


def _wait_slot_free(c: Any) -> None:
    """Until no session holds the bench's slot: a peek of a stopped query may hold it until its
    backend notices."""
    while c.exec_driver_sql(
        "SELECT coalesce(bool_or(active), false) FROM pg_replication_slots WHERE slot_name = %s",
        (SLOT,),
    ).scalar():
        time.sleep(0.05)


def drop_bench_db(engine: Any, pg: bool) -> None:
    """Drop what a run made: PostgreSQL's slot, publication and schema, or MariaDB's database."""
    if pg:
        drop_pg(engine)
        return
    with engine.connect() as c:
        c.exec_driver_sql(f"DROP DATABASE IF EXISTS {NS}")
        c.commit()


def drop_pg(engine: Any) -> None:
    with engine.connect() as c:
        _wait_slot_free(c)
        c.exec_driver_sql(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name = %s",
            (SLOT,),
        )
        c.exec_driver_sql(f"DROP PUBLICATION IF EXISTS {SLOT}")
        c.exec_driver_sql(f"DROP SCHEMA IF EXISTS {NS} CASCADE")
        c.commit()


def run_connector_warm(spark: Any, config: dict, engine: Any, topic: str) -> None:
    with tempfile.TemporaryDirectory(prefix="sluice-bench-cdc-warm-") as root:
        runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
        runner.start("warm", config)
        pg = "Postgres" in config["connector.class"]
        time.sleep(3)  # the first (empty) micro-batch fixes the start position
        with engine.connect() as c:
            workload(c, f"{NS}.t", 1, 1000, pg=pg)
        while topic_count(runner, topic) < 1000:
            failure = runner.running["warm"].failure()
            if failure is not None:
                raise RuntimeError(failure[0])
            time.sleep(0.1)
        runner.stop("warm")


def bench_maria(spark: Any, changes: int) -> dict:
    engine = sa.create_engine(MY_URL)
    with engine.connect() as c:
        c.exec_driver_sql(f"DROP DATABASE IF EXISTS {NS}")
        c.exec_driver_sql(f"CREATE DATABASE {NS}")
        c.exec_driver_sql(f"CREATE TABLE {NS}.t ({COLUMNS[False]})")
        c.commit()
    config = maria_config()
    topic = f"b.{NS}.t"
    try:
        run_connector_warm(spark, config, engine, topic)
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.row_event import (
            DeleteRowsEvent,
            UpdateRowsEvent,
            WriteRowsEvent,
        )

        with engine.connect() as c:
            file, pos = c.exec_driver_sql("SHOW MASTER STATUS").fetchone()[:2]
            workload(c, f"{NS}.t", 10_000_000, changes, pg=False)
        t0 = time.perf_counter()
        stream = BinLogStreamReader(
            connection_settings={"host": "127.0.0.1", "port": 3306, "user": "root", "passwd": ""},
            server_id=6544,
            resume_stream=True,
            blocking=False,
            log_file=file,
            log_pos=int(pos),
            only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
            only_schemas=[NS],
            enable_logging=False,
        )
        rows = sum(len(e.rows) for e in stream)
        stream.close()
        baseline = time.perf_counter() - t0
        result = run_connector_from(spark, config, engine, topic, changes)
        result.update(baseline=baseline, messages=rows)
        return result
    finally:
        with engine.connect() as c:
            c.exec_driver_sql(f"DROP DATABASE IF EXISTS {NS}")
            c.commit()


def maria_config() -> dict[str, str]:
    return {
        "connector.class": "MySqlCdcSourceConnector",
        "connection.url": f"jdbc:mysql://127.0.0.1:3306/{NS}",
        "connection.user": "root",
        "topic.prefix": "b",
        "table.include.list": f"{NS}.t",
        "database.server.id": "6543",
        "read.max.rows": "20000",
        "value.converter": "AvroConverter",
        "snapshot.mode": "never",
    }


def run_connector_from(spark: Any, config: dict, engine: Any, topic: str, changes: int) -> dict:
    """MariaDB: start the connector, let it fix its start position, then run the workload and time
    until the topic holds every event (the workload's own time is included)."""
    with tempfile.TemporaryDirectory(prefix="sluice-bench-cdc-") as root:
        runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
        runner.start("cdc", config)
        time.sleep(5)
        started = time.perf_counter()
        with engine.connect() as c:
            workload(c, f"{NS}.t", 20_000_000, changes, pg=False)
        written = time.perf_counter() - started
        while topic_count(runner, topic) < changes:
            failure = runner.running["cdc"].failure()
            if failure is not None:
                raise RuntimeError(failure[0])
            time.sleep(0.05)
        total = time.perf_counter() - started
        runner.stop("cdc")
        return {"seconds": total, "rate": changes / total, "written": written, "events": changes}


def bench_snapshot(spark: Any, rows: int, pg: bool = True) -> dict:
    """A `rows`-row table of PostgreSQL (or MariaDB: `pg=False`) snapshotted by the CDC connector
    over 2 tasks (chunks of the connector's default `read.max.rows`, Avro as docs/cdc.md
    configures it) while a writer keeps updating and inserting; timed from the connector's start
    until its stored position says the snapshot is done. Then the writer stops, the stream
    drains to the log's end, and the topic is checked against the table (`check_handover`).
    Baseline: the database's Python driver (psycopg, PyMySQL) fetching the whole table once
    (`SELECT *`), in the same run."""
    import threading

    engine = sa.create_engine(PG_URL if pg else MY_URL)
    table = f"{NS}.t"
    with engine.connect() as c:
        if pg:
            c.exec_driver_sql(f"DROP SCHEMA IF EXISTS {NS} CASCADE")
            c.exec_driver_sql(f"CREATE SCHEMA {NS}")
        else:
            c.exec_driver_sql(f"DROP DATABASE IF EXISTS {NS}")
            c.exec_driver_sql(f"CREATE DATABASE {NS}")
        c.exec_driver_sql(f"CREATE TABLE {table} ({COLUMNS[pg]})")
        # 2N changes for N rows: 1.2N inserts of ids 1…, updates, 0.2N deletes
        workload(c, table, 1, rows * 2, pg=pg)
        count = c.exec_driver_sql(f"SELECT count(*) FROM {table}").scalar()
        c.commit()
        t0 = time.perf_counter()
        fetched = len(c.exec_driver_sql(f"SELECT * FROM {table}").fetchall())
        baseline = time.perf_counter() - t0
    stop, writes = threading.Event(), [0]

    def writer() -> None:
        with engine.connect() as c:
            i = 0
            while not stop.is_set():
                c.exec_driver_sql(
                    f"UPDATE {table} SET qty = qty + 1 WHERE id = {i * 7919 % count + 1}"
                )
                c.exec_driver_sql(f"INSERT INTO {table} (id, name) VALUES ({50_000_000 + i}, 'w')")
                c.commit()
                i += 1
                writes[0] = i
                stop.wait(0.002)

    snapshot = {"max.tasks": "2", "snapshot.mode": "initial"}  # Avro, as docs/cdc.md has it
    if pg:
        config = pg_config(**snapshot, **{"value.converter": "AvroConverter"})
    else:
        config = {**maria_config(), **snapshot}
        del config["read.max.rows"]  # the connector's default chunk, as for PostgreSQL
    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        with tempfile.TemporaryDirectory(prefix="sluice-bench-cdc-snap-") as root:
            runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
            started = time.perf_counter()
            runner.start("snap", config)
            while True:
                failure = runner.running["snap"].failure()
                if failure is not None:
                    raise RuntimeError(failure[0])
                stored = list(runner.positions.load("snap").values())
                if stored and "snapshot" not in stored[0]:
                    break
                time.sleep(0.1)
            seconds = time.perf_counter() - started
            if os.environ.get("BENCH_PROGRESS"):
                _print_progress("snap", runner.running["snap"].query)
            stop.set()
            thread.join()
            drain(runner)
            events = topic_count(runner, f"b.{NS}.t")
            runner.stop("snap")
            check = check_handover(runner, engine, f"b.{NS}.t")
    finally:
        stop.set()
        thread.join()
        drop_bench_db(engine, pg)
    return {
        "rows": count,
        "seconds": seconds,
        "baseline": baseline,
        "fetched": fetched,
        "events": events,
        "writes": writes[0],
        "check": check,
    }


def drain(runner: ConnectorRunner, quiet: float = 5.0) -> None:
    """Wait until the connector's stored position has not moved for `quiet` seconds after the
    writer stopped (micro-batches run back to back: a change left would move it)."""
    last, since = None, time.perf_counter()
    while time.perf_counter() - since < quiet:
        failure = runner.running["snap"].failure()
        if failure is not None:
            raise RuntimeError(failure[0])
        stored = runner.positions.load("snap")
        if stored != last:
            last, since = stored, time.perf_counter()
        time.sleep(0.2)


def check_handover(runner: ConnectorRunner, engine: Any, topic: str) -> str:
    """Replay the topic's events (each key's in order: they share a queue) into rows and
    compare with the table: no row missing, none extra, none read twice (`op='r'`). A row
    changed before its chunk was read has its change events first, then its snapshot record
    (the watermark handover lets every change event flow; a chunk drops only the rows changed
    inside its own window). A line saying what was checked, or AssertionError."""
    log = runner.bus.log
    state: dict[int, int | None] = {}
    read: set[int] = set()
    streamed: set[int] = set()
    events = early = 0
    from sluice.converters import converter_from_config
    from sluice.sdk import Schema

    schema = Schema.from_json(json.loads(runner.schemas.latest(f"{topic}-value").schema))
    avro = converter_from_config({"value.converter": "AvroConverter"}, "value", runner.schemas)
    decoder = avro.decoder(schema)
    for queue, r in sorted(log.offsets(topic).items()):
        for _, batch in log.read(topic, queue, r.min_offset, r.max_offset):
            decoded = decoder.arrow(batch.column("value"))
            assert decoded.errors is None or decoded.errors.null_count == len(decoded.errors)
            for e in decoded.values.to_pylist():
                row = e["after"] if e["after"] is not None else e["before"]
                key, events = row["id"], events + 1
                if e["op"] == "r":
                    assert key not in read, f"row {key} read twice"
                    read.add(key)
                    early += key in streamed
                else:
                    streamed.add(key)
                if e["op"] == "d":
                    state.pop(key, None)
                else:
                    state[key] = e["after"]["qty"]
    with engine.connect() as c:
        table = dict(c.exec_driver_sql(f"SELECT id, qty FROM {NS}.t").fetchall())
    missing = sorted(set(table) - set(state))
    extra = sorted(set(state) - set(table))
    wrong = sorted(k for k in table.keys() & state.keys() if table[k] != state[k])
    assert not (missing or extra or wrong), (
        f"{len(missing)} rows missing (e.g. {missing[:5]}), {len(extra)} extra "
        f"(e.g. {extra[:5]}), {len(wrong)} with another qty (e.g. {wrong[:5]})"
    )
    return (
        f"exact: {len(table):,} rows = the topic's {events:,} events replayed; "
        f"{len(read):,} rows read once each ({early:,} of them after change events), none "
        "read twice"
    )


def harness(kind: str, changes: int, profile: bool) -> dict:
    """Spark-free: the connector's task driven as the runtime drives it (`latest`, then `read`
    into a list of records) over `changes` changes made beforehand; with `profile`, under
    cProfile (the top functions by own time are printed). Baseline, same run: the decoder
    alone over the same range (PostgreSQL: the server's peek; MariaDB: mysql-replication)."""
    import cProfile
    import pstats

    from sluice.sdk import ReadLimit

    pg = kind == "pg"
    engine = sa.create_engine(PG_URL if pg else MY_URL)
    with engine.connect() as c:
        if pg:
            drop_pg(engine)
            c.exec_driver_sql(f"CREATE SCHEMA {NS}")
        else:
            c.exec_driver_sql(f"DROP DATABASE IF EXISTS {NS}")
            c.exec_driver_sql(f"CREATE DATABASE {NS}")
        c.exec_driver_sql(f"CREATE TABLE {NS}.t ({COLUMNS[pg]})")
        if pg:
            c.exec_driver_sql(f"ALTER TABLE {NS}.t REPLICA IDENTITY FULL")
        c.commit()
    config = pg_config(**{"snapshot.mode": "never"}) if pg else maria_config()
    connector = _connector_class(pg)()
    connector.start(config)
    task = connector.task_class()
    task.start(connector.task_configs(1)[0])
    (partition,) = task.partitions()
    limit = ReadLimit(max_rows=20_000)
    start = task.latest(partition, None, limit)
    try:
        with engine.connect() as c:
            workload(c, f"{NS}.t", 10_000_000, changes, pg=pg)
            if pg:
                end = c.exec_driver_sql("SELECT pg_current_wal_insert_lsn()").scalar()
                while not c.exec_driver_sql(
                    "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (end,)
                ).scalar():
                    time.sleep(0.05)
        baseline = decoder_alone(engine, pg, start)
        profiler = cProfile.Profile() if profile else None
        t0 = time.perf_counter()
        if profiler:
            profiler.enable()
        n = 0
        while n < changes:
            end = task.latest(partition, start, limit)
            n += sum(1 for _ in task.read(partition, start, end))
            start = end
        seconds = time.perf_counter() - t0
        if profiler:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
        return {"seconds": seconds, "events": n, "baseline": baseline}
    finally:
        task.stop()
        drop_bench_db(engine, pg)


def _connector_class(pg: bool) -> type:
    from sluice.connectors.cdc import MySqlCdcSourceConnector, PostgresCdcSourceConnector

    return PostgresCdcSourceConnector if pg else MySqlCdcSourceConnector


def decoder_alone(engine: Any, pg: bool, start: Any) -> float:
    """Seconds the decoder alone takes over everything after `start`."""
    t0 = time.perf_counter()
    if pg:
        with engine.connect() as c:
            c.exec_driver_sql(
                "SELECT count(*) FROM pg_logical_slot_peek_binary_changes(%s, NULL, NULL, "
                "'proto_version', '1', 'publication_names', %s)",
                (SLOT, SLOT),
            ).scalar()
        return time.perf_counter() - t0
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": 3306, "user": "root", "passwd": ""},
        server_id=6544,
        resume_stream=True,
        blocking=False,
        log_file=start["file"],
        log_pos=int(start["pos"]),
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        only_schemas=[NS],
        enable_logging=False,
    )
    sum(len(e.rows) for e in stream)
    stream.close()
    return time.perf_counter() - t0


def bench_lag(spark: Any, rate: int, seconds: float) -> dict:
    """MariaDB → topic → PostgreSQL at a fixed `rate` of inserts a second for `seconds`
    (transactions of `rate // 100` rows every 10 ms): the lag of each row from its commit to
    its visibility in PostgreSQL (the target polled every 50 ms; a row's lag is the time its id
    was first seen there minus its commit time). Inserts only: each row is seen once."""
    import threading

    my_engine, pg_engine = sa.create_engine(MY_URL), sa.create_engine(PG_URL)
    with my_engine.connect() as c:
        c.exec_driver_sql(f"DROP DATABASE IF EXISTS {NS}")
        c.exec_driver_sql(f"CREATE DATABASE {NS}")
        c.exec_driver_sql(f"CREATE TABLE {NS}.t ({COLUMNS[False]})")
        c.commit()
    with pg_engine.connect() as c:
        c.exec_driver_sql(f"DROP SCHEMA IF EXISTS {NS} CASCADE")
        c.exec_driver_sql(f"CREATE SCHEMA {NS}")
        c.commit()
    committed: dict[int, float] = {}
    per_tx = max(rate // 100, 1)
    ids = iter(range(1, 10**9))

    def write(until: float) -> None:
        with my_engine.connect() as c:
            tick = time.perf_counter()
            while tick < until:
                batch = [next(ids) for _ in range(per_tx)]
                c.exec_driver_sql(
                    f"INSERT INTO {NS}.t (id, name, qty, note) VALUES (%s, 'n', 1, 'lag')",
                    [(i,) for i in batch],
                )
                c.commit()
                now = time.perf_counter()
                committed.update(dict.fromkeys(batch, now))
                tick += 0.01
                time.sleep(max(0.0, tick - time.perf_counter()))

    sink = {
        "connector.class": "JdbcSinkConnector",
        "connection.url": f"jdbc:postgresql://127.0.0.1:5432/test?currentSchema={NS}",
        "connection.user": "root",
        "connect.topicnames": f"b.{NS}.t",
        "table.name.format": "t",
        "value.converter": "AvroConverter",
        "insert.mode": "upsert",
        "pk.mode": "record_key",
        "delete.enabled": "true",
        "auto.create": "true",
    }
    lags: list[float] = []
    with tempfile.TemporaryDirectory(prefix="sluice-bench-cdc-lag-") as root:
        runner = ConnectorRunner(spark, root, trigger_interval_ms=0)
        try:
            runner.start("cdc", maria_config())
            runner.start("sink", sink)
            time.sleep(5)  # the source's first (empty) micro-batch fixes its start position
            write(time.perf_counter() + 3)  # warm-up: Spark's Python workers, the target table
            seen = _poll_seen(pg_engine, 0, lambda: False, [], until=max(committed), timeout=120)
            committed.clear()
            start = time.perf_counter()
            writer = threading.Thread(target=write, args=(start + seconds,), daemon=True)
            writer.start()
            # the target is polled while the writer writes: a row's lag is when it first showed
            # (ids are inserted in order, so each poll's new ids are those above the last max)
            shown: list[tuple[int, int, float]] = []
            seen = _poll_seen(pg_engine, seen, writer.is_alive, shown)
            wrote = len(committed)
            last = max(committed)
            _poll_seen(pg_engine, seen, lambda: False, shown, until=last)
            timed = [
                (committed[i] - start, t - committed[i])
                for low, end, t in shown
                for i in range(low, end)
                if i in committed
            ]
            lags.extend(lag for _, lag in timed)
            for name in ("cdc", "sink"):
                failure = runner.running[name].failure()
                if failure is not None:
                    raise RuntimeError(failure[0])
                if os.environ.get("BENCH_PROGRESS"):
                    _print_progress(name, runner.running[name].query)
        finally:
            for name in list(runner.running):
                runner.stop(name)
            with my_engine.connect() as c:
                c.exec_driver_sql(f"DROP DATABASE IF EXISTS {NS}")
                c.commit()
            with pg_engine.connect() as c:
                c.exec_driver_sql(f"DROP SCHEMA IF EXISTS {NS} CASCADE")
                c.commit()
    # the median lag of the rows committed in each quarter of the run: steady, or a backlog growing
    quarters = [
        statistics.median(lag for at, lag in timed if q * seconds / 4 <= at < (q + 1) * seconds / 4)
        for q in range(4)
    ]
    lags.sort()
    return {
        "quarters": quarters,
        "rows": wrote,
        "rate": wrote / seconds,
        "p50": lags[len(lags) // 2],
        "p99": lags[int(len(lags) * 0.99)],
        "max": lags[-1],
    }


def _print_progress(name: str, query: Any) -> None:
    """What the query's recent micro-batches spent their time on (Spark's `durationMs`, summed
    over the batches that moved rows): what bounds the pipeline's rate."""
    import collections

    busy = [p for p in query.recentProgress if p.numInputRows]
    total: collections.Counter[str] = collections.Counter()
    for p in busy:
        total.update(p.durationMs)
    rows = sum(p.numInputRows for p in busy)
    parts = ", ".join(f"{k} {v / max(len(busy), 1):.0f}" for k, v in total.most_common())
    print(f"{name}: {len(busy)} batches of {rows / max(len(busy), 1):,.0f} rows; ms/batch: {parts}")


def _poll_seen(
    engine: Any,
    seen: int,
    going: Any,
    shown: list[tuple[int, int, float]],
    until: int = 0,
    timeout: float = 300,
) -> int:
    """Poll the target's highest id every 50 ms while `going()` (and until `until` is there);
    append (first id, end id, time) for the ids that showed in each poll; return the highest."""
    deadline = time.perf_counter() + timeout
    with engine.connect() as c:
        while going() or seen < until:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"id {until} not in the target after {timeout} s")
            try:
                top = c.exec_driver_sql(f"SELECT max(id) FROM {NS}.t").scalar() or 0
            except Exception:  # the sink has not created the table yet
                c.rollback()
                top = 0
            c.commit()
            if top > seen:
                shown.append((seen + 1, top + 1, time.perf_counter()))
                seen = top
            time.sleep(0.05)
    return seen


def bench_encode(n: int) -> dict[str, float]:
    """Events/s of the engine's steps after the task, for `n` insert events of the bench's 8
    columns: the envelope's dicts into Arrow (`pa.array`, what `records_to_batch` does), the
    same built column by column, and the Avro encoding of the envelope (nested structs, which
    the vectorised encoder takes since 2026-11-24) against a flat value of the same columns
    plus `__op`, `__deleted` (Debezium's flattened form)."""
    from datetime import UTC, datetime
    from decimal import Decimal

    import pyarrow as pa

    from avro_codec import SCHEMA  # the same 8 columns (bench/ is on the path)
    from sluice.connectors.cdc._envelope import envelope_schema, source_block
    from sluice.converters._avro import _AvroEncoder
    from sluice.sdk import FieldType, Schema

    cols = [(f.name, f.schema) for f in SCHEMA.fields]
    envelope = envelope_schema("b.t", cols)
    frame = envelope.to_arrow()
    source = source_block("postgresql", "b", "test", "t", schema=NS, lsn=5, txId=3)
    now = datetime.now(UTC)
    rows = [
        {"id": i, "name": f"n{i}", "amount": Decimal("1.5"), "qty": i, "price": 1.5}
        | {"flag": True, "created": now, "note": "x" * 20}
        for i in range(n)
    ]
    events = [{"before": None, "after": r, "source": source, "op": "c", "ts_ms": 1} for r in rows]

    def rate(step: Any) -> tuple[float, Any]:
        t0 = time.perf_counter()
        out = step()
        return n / (time.perf_counter() - t0), out

    dicts, value = rate(lambda: pa.array(events, type=frame))
    after = frame.field("after").type
    names = [name for name, _ in cols]

    def by_column() -> list[pa.Array]:
        return [pa.array([r[c] for r in rows], type=after.field(c).type) for c in names]

    columns, arrays = rate(by_column)
    nested, _ = rate(lambda: _AvroEncoder("AvroConverter", "value", envelope, 1).arrow(value))
    flat = Schema.struct(
        *cols,
        ("__op", Schema.string()),
        ("__deleted", Schema.of(FieldType.BOOLEAN)),
        optional=False,
        name="b.t.Value",
    )
    flat_value = pa.StructArray.from_arrays(
        [*arrays, pa.array(["c"] * n), pa.array([False] * n)], fields=list(flat.to_arrow())
    )
    flat_rate, _ = rate(lambda: _AvroEncoder("AvroConverter", "value", flat, 1).arrow(flat_value))
    return {"dicts": dicts, "columns": columns, "avro_envelope": nested, "avro_flat": flat_rate}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=200_000)
    parser.add_argument("--skip", default="")
    parser.add_argument("--snapshot-rows", type=int, default=1_000_000)
    parser.add_argument("--harness", choices=["pg", "maria"], help="Spark-free task loop only")
    parser.add_argument("--profile", action="store_true", help="with --harness: under cProfile")
    parser.add_argument("--lag", type=int, default=0, help="MariaDB → PostgreSQL lag at this rate")
    parser.add_argument("--lag-seconds", type=float, default=30.0)
    parser.add_argument("--encode", action="store_true", help="no servers: the engine's steps")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    if args.lag:
        spark = build_session({"spark.master": "local[2]"}, log_level="ERROR")
        r = bench_lag(spark, args.lag, args.lag_seconds)
        print(
            f"lag MariaDB → topic → PostgreSQL: {r['rows']:,} inserts at {r['rate']:,.0f}/s; "
            f"p50 {r['p50']:.2f}s, p99 {r['p99']:.2f}s, max {r['max']:.2f}s; median by quarter "
            f"of the run {' '.join(f'{q:.2f}s' for q in r['quarters'])}; load "
            f"{os.getloadavg()[0]:.1f}"
        )
        return
    if args.encode:
        r = bench_encode(args.changes)
        print(
            f"{args.changes:,} events, per second: envelope dicts → Arrow {r['dicts']:,.0f}; "
            f"columns → Arrow {r['columns']:,.0f}; Avro of the envelope {r['avro_envelope']:,.0f}; "
            f"Avro of the flattened value {r['avro_flat']:,.0f}"
        )
        return
    if args.harness:
        r = harness(args.harness, args.changes, args.profile)
        print(
            f"{args.harness} task alone (no Spark): {r['events']:,} events in "
            f"{r['seconds']:.2f}s = {r['events'] / r['seconds']:,.0f}/s; decoder alone "
            f"{r['baseline']:.2f}s = {args.changes / r['baseline']:,.0f}/s; load "
            f"{os.getloadavg()[0]:.1f}"
        )
        return
    spark = build_session({"spark.master": "local[2]"}, log_level="ERROR")
    print(
        f"machine: {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    if "pg" not in skip:
        r = bench_pg(spark, args.changes)
        print(
            f"postgres: {args.changes} changes; baseline peek {r['baseline']:.2f}s "
            f"({args.changes / r['baseline']:,.0f} changes/s, {r['messages']} messages); "
            f"cdc → topic {r['seconds']:.2f}s = {r['rate']:,.0f}/s, steady {r['steady']:,.0f}/s"
        )
    for db in ("snapshot", "maria-snapshot"):
        if db in skip:
            continue
        r = bench_snapshot(spark, args.snapshot_rows, pg=db == "snapshot")
        print(
            f"{db}: {r['rows']:,} rows over 2 tasks in {r['seconds']:.1f}s = "
            f"{r['rows'] / r['seconds']:,.0f} rows/s with {r['writes']:,} writer transactions "
            f"meanwhile ({r['events']:,} records in the topic); baseline SELECT * "
            f"{r['baseline']:.1f}s = {r['fetched'] / r['baseline']:,.0f} rows/s\n"
            f"handover check: {r['check']}"
        )
    if "maria" not in skip:
        r = bench_maria(spark, args.changes)
        print(
            f"mariadb: {args.changes} changes; baseline mysql-replication {r['baseline']:.2f}s "
            f"({r['messages'] / r['baseline']:,.0f} rows/s); workload written in "
            f"{r['written']:.2f}s; cdc → topic done {r['seconds']:.2f}s after the workload "
            f"started = {r['rate']:,.0f}/s"
        )


if __name__ == "__main__":
    main()

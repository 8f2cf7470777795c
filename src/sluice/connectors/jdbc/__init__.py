"""JDBC source and sink for MySQL/MariaDB and PostgreSQL (SQLAlchemy Core, psycopg 3, PyMySQL).

`JdbcSourceConnector` copies tables (or a query) into topics, exactly once: each micro-batch reads
the rows between two positions of a table (`{"table": "db.orders"}` → `{"incrementing": 1041}`,
`{"timestamp": …}`, or a bulk load's progress). `JdbcSinkConnector` writes a micro-batch per task in
one transaction of set-based statements (COPY / `INSERT … ON CONFLICT` on PostgreSQL, multi-row
`INSERT … ON DUPLICATE KEY UPDATE` on MySQL); `upsert` and `update` make replays harmless.

Source keys: `connection.url` (`jdbc:mysql://…`, `jdbc:mariadb://…`, `jdbc:postgresql://…` or a
SQLAlchemy URL), `connection.user`, `connection.password`, `connection.attempts`,
`connection.backoff.ms`, `mode` (bulk, incrementing, timestamp, timestamp+incrementing),
`incrementing.column.name`, `timestamp.column.name`, `table.whitelist` / `table.blacklist` /
`query`, `topic.prefix`, `connect.topicname`, `poll.interval.ms`, `batch.max.rows`,
`timestamp.delay.interval.ms`, `timestamp.initial`, `validate.non.null`, `max.tasks`.
Sink keys: the `connection.*` keys, `insert.mode` (insert, upsert, update), `pk.mode` (none,
record_key, record_value), `pk.fields`, `delete.enabled`, `auto.create`, `auto.evolve`,
`table.name.format`, `batch.size`, `fields.whitelist`, `max.retries`, `retry.backoff.ms`,
`errors.retry.timeout`, `errors.retry.delay.max.ms`. The full reference, with the type mapping, is
`docs/jdbc.md`.

Example (library level)::

    runner.start("from-maria", {
        "connector.class": "org.apache.rocketmq.connect.jdbc.source.JdbcSourceConnector",
        "connection.url": "jdbc:mysql://127.0.0.1:3306/shop", "connection.user": "root",
        "mode": "incrementing", "incrementing.column.name": "id",
        "table.whitelist": "shop.orders", "connect.topicname": "orders",
        "value.converter": "AvroConverter"})
    runner.start("to-pg", {
        "connector.class": "JdbcSinkConnector",
        "connection.url": "jdbc:postgresql://127.0.0.1:5432/dw", "connection.user": "root",
        "connect.topicnames": "orders", "value.converter": "AvroConverter",
        "insert.mode": "upsert", "pk.mode": "record_value", "pk.fields": "id",
        "auto.create": "true"})

Importing this package is cheap: SQLAlchemy and the drivers load when a connector first connects.
"""

from sluice.connectors.jdbc.sink import JdbcSinkConnector, JdbcSinkTask
from sluice.connectors.jdbc.source import JdbcSourceConnector, JdbcSourceTask

__all__ = ["JdbcSinkConnector", "JdbcSinkTask", "JdbcSourceConnector", "JdbcSourceTask"]

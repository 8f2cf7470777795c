"""RedisSinkConnector: writes records to Redis streams, lists, string keys or hashes.

Delivery: exactly-once, whatever ``redis.type``. The records of one topic queue are written in
chunks, each in one ``MULTI``/``EXEC`` transaction together with the queue's next offset under
``redis.offsets.key.format`` (one small string key per topic queue: ``"<run> <next offset>"``),
watched with ``WATCH``: a replayed micro-batch finds its records' offsets below that mark and
writes nothing twice, and a crash between two chunks leaves whole chunks only. (Offsets are
compared within one run of the connector: after an offsets reset, records are written again, as
asked.)

Why not an entry id derived from the record's position (``XADD key <offset>-<queue> …``)? Redis
refuses an explicit id that is not greater than the stream's last one, so such a mapping only
works if ids grow in the order *every* writer of the stream adds entries. A sluice topic has
several queues written by parallel tasks into one stream, so no mapping of (queue, offset) grows
that way, and treating "id too small" as "already written" would silently drop a slower queue's
records. Keeping the mark beside the data in one transaction works for every type, and the
entries get ordinary ``*`` ids (their time of arrival).

Unit of parallelism: one task per group of queues (`max.tasks`); a queue's records stay in order.

``redis.type``:

* ``stream`` (default): ``XADD <key> * key <record key> value <record value> <header> <text> …``
  (fields named by ``stream.key.field`` / ``stream.value.field``; a null key or value is left out,
  an entry with no field at all gets an empty value); ``stream.maxlen`` trims approximately.
  `RedisStreamSourceConnector` reads this back into the same records.
* ``list``: ``LPUSH <key> <value>`` (queue order: `RedisListSourceConnector` and ``RPOP`` take the
  oldest first); a null value is pushed as an empty element. Keys and headers are not kept.
* ``string``: ``SET <key> <value>``; a null value deletes the key (a tombstone).
* ``hash``: ``HSET <key> <record key> <value>``; a null value deletes the field.

``redis.key.format`` names the Redis key: ``${topic}`` and ``${key}`` (the record key) are
replaced; the default is ``${topic}``, and ``${key}`` for ``string``. A record whose key is needed
but null is given up (`SinkTaskContext.dead_letter`): dead-lettered with ``errors.tolerance=all``,
else the micro-batch fails naming it. Values and keys that are not BYTES or STRING are written as
JSON text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluice.connectors._messaging import Refusals, Row, RowSinkTask
from sluice.connectors.redis._client import connect, failure, probe, redis_module
from sluice.connectors.redis._config import SINK_CONFIG, Settings
from sluice.connectors.redis._config import client_options as redis_options
from sluice.sdk import (
    BatchId,
    ClientOption,
    ConfigException,
    ConnectException,
    Delivery,
    SinkConnector,
)
from sluice.sdk.extras import REDIS


class RedisSinkTask(RowSinkTask):
    """Writes each topic queue's records in transactions that also move the queue's mark."""

    def start(self, config: Mapping[str, str]) -> None:
        values = SINK_CONFIG.parse(config)
        self.settings = Settings.of(values)
        self.type = values["redis.type"]
        self.key_format = values["redis.key.format"] or (
            "${key}" if self.type == "string" else "${topic}"
        )
        self.key_field = values["stream.key.field"]
        self.value_field = values["stream.value.field"]
        self.maxlen = values["stream.maxlen"] or None
        self.offsets_format = values["redis.offsets.key.format"].replace(
            "${connector}", self.context.connector_name
        )
        self.chunk = values["redis.batch.size"]
        batch = self.context.batch_id
        self.run = batch.run if batch else "norun"
        self._client: Any = None
        self._refusals = Refusals(self.context)

    def _redis(self) -> Any:
        if self._client is None:
            self._client = connect(self.settings)
        return self._client

    def write_rows(self, rows: list[Row]) -> None:
        groups: dict[tuple[str, int], list[Row]] = {}
        for row in rows:
            groups.setdefault((row.topic, row.queue), []).append(row)
        for (topic, queue), group in groups.items():
            mark = self.offsets_format.replace("${topic}", topic).replace("${queue}", str(queue))
            for i in range(0, len(group), self.chunk):
                self._transaction(mark, group[i : i + self.chunk])

    def _transaction(self, mark: str, rows: list[Row]) -> None:
        r = redis_module()
        client = self._redis()
        where = f"topic {rows[0][0]!r} queue {rows[0][1]} offsets {rows[0][2]}..{rows[-1][2]}"
        # Every record's command (or refusal) is made on every delivery, replays included: a
        # refused record's dead letter is written with its micro-batch's commit, once.
        pending = [(row, self._command(row)) for row in rows]
        try:
            with client.pipeline(transaction=True) as pipe:
                while True:
                    try:
                        pipe.watch(mark)
                        done = pipe.get(mark)
                        if done is not None:
                            run, _, following = done.decode().partition(" ")
                            if run == self.run:
                                pending = [p for p in pending if p[0][2] >= int(following)]
                        if not pending:
                            pipe.unwatch()
                            return
                        commands = [c for _, c in pending if c is not None]
                        self._check_types(pipe, {c[1] for c in commands}, pending[0][0])
                        pipe.multi()
                        for name, key, *args in commands:
                            self._queue(pipe, name, key, args)
                        pipe.set(mark, f"{self.run} {pending[-1][0][2] + 1}")
                        results = pipe.execute(raise_on_error=False)
                        break
                    except r.WatchError:
                        continue  # another writer of this queue moved the mark: look again
        except r.RedisError as exc:
            raise failure(self.settings, f"writing {where}", exc) from None
        failed = next((x for x in results if isinstance(x, Exception)), None)
        if failed is not None:
            raise ConnectException(f"{self.settings.where}: writing {where}: {failed}")

    def _check_types(self, pipe: Any, keys: set[bytes], row: Row) -> None:
        # A command of a transaction that fails does not undo the others (Redis has no
        # rollback), so the mark would move past a record never written: refuse before.
        if self.type == "string":
            return  # SET replaces a key of any type
        want = {"stream": b"stream", "list": b"list", "hash": b"hash"}[self.type]
        for key in keys:
            found = pipe.type(key)
            if found not in (b"none", want):
                raise ConnectException(
                    f"redis.key.format: key {key.decode(errors='replace')!r} on "
                    f"{self.settings.where} is a {found.decode()}, not a {self.type} "
                    f"(record {row.where})"
                )

    def _command(self, row: Row) -> tuple[Any, ...] | None:
        topic, queue, offset, key, value, headers = row
        fmt = self.key_format.encode()
        if b"${key}" in fmt:
            if key is None:
                self._refusals.refuse(
                    row, f"null key, which redis.key.format={self.key_format!r} needs"
                )
                return None
            fmt = fmt.replace(b"${key}", key)
        target = fmt.replace(b"${topic}", topic.encode())
        if self.type == "stream":
            fields: dict[str, bytes | str] = {}
            if key is not None:
                fields[self.key_field] = key
            if value is not None:
                fields[self.value_field] = value
            for name, text in headers.items():
                if name in (self.key_field, self.value_field):
                    raise ConnectException(
                        f"record {{topic={topic!r}, queue={queue}, offset={offset}}}: header "
                        f"{name!r} has the name of the entry's key or value field",
                        suggestion="rename the header, or set stream.key.field/value.field",
                    )
                fields[name] = text
            return ("xadd", target, fields or {self.value_field: b""})
        if self.type == "list":
            return ("lpush", target, value if value is not None else b"")
        if self.type == "string":
            return ("set", target, value) if value is not None else ("delete", target)
        if key is None:
            self._refusals.refuse(row, "null key, which redis.type=hash needs (the hash field)")
            return None
        return ("hset", target, key, value) if value is not None else ("hdel", target, key)

    def _queue(self, pipe: Any, name: str, key: bytes, args: list[Any]) -> None:
        if name == "xadd":
            pipe.xadd(key, args[0], maxlen=self.maxlen, approximate=True)
        elif name == "hset":
            pipe.hset(key, args[0], args[1])
        else:
            getattr(pipe, name)(key, *args)

    def flush(self, batch_id: BatchId) -> Any:
        return None

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class RedisSinkConnector(SinkConnector):
    """Writes records to Redis (``redis.type`` stream, list, string or hash), exactly once."""

    config_def = SINK_CONFIG
    task_class = RedisSinkTask
    requires = (REDIS,)
    guarantee = Delivery.EXACTLY_ONCE

    @classmethod
    def client_options(cls, config: Mapping[str, str]) -> list[ClientOption]:
        """The query parameters (and a unix:// socket path) of redis.url."""
        return redis_options(config)

    def validate(self, config: Mapping[str, str]) -> None:
        values = SINK_CONFIG.parse(config)
        fmt = values["redis.key.format"]
        if fmt and values["redis.type"] == "string" and "${key}" not in fmt:
            raise ConfigException(
                "redis.key.format",
                f"{fmt!r} has no ${{key}}: every record would overwrite one string key",
            )
        if (
            "${topic}" not in values["redis.offsets.key.format"]
            or "${queue}" not in (values["redis.offsets.key.format"])
        ):
            raise ConfigException("redis.offsets.key.format", "must contain ${topic} and ${queue}")
        probe(Settings.of(values)).close()

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.config) for _ in range(max_tasks)]

"""Redis sources: streams by entry id (exactly-once) and lists as queues (at-least-once).

`RedisStreamSourceConnector` — delivery: exactly-once. A stream is read in exact entry-id ranges
(``XRANGE (start end``), so a replayed micro-batch reads the same entries again.
Unit of parallelism: one stream; each stream belongs to one task (`max.tasks` at most).
Position: ``{"stream": <key>}`` → ``{"id": "<ms>-<seq>"}``, the id of the last delivered entry.
A new connector starts at the first entry. Entries deleted (``XDEL``/``XTRIM``) after the committed
position before they were read fail the task naming the stream: they cannot be delivered.

Record mapping: the entry's ``stream.value.field`` (default ``value``) → value (BYTES),
``stream.key.field`` (default ``key``) → key (BYTES), every other field → an extension (header,
UTF-8 text), the entry id's milliseconds → timestamp. This is what `RedisSinkConnector` writes with
``redis.type=stream``, so a stream copies to a stream intact.

`RedisListSourceConnector` — delivery: at-least-once. A list is a queue (producers ``LPUSH``, the
connector takes from the right): each poll ``LMOVE``s up to ``list.poll.max.records`` elements to
a processing list (``list.processing.key.format``), and removes them there only after the
micro-batch that carried them committed. When a task starts, what its processing list still holds
(taken by a process that died) goes back to the right end of the list, in order, to be taken
again. Unit of parallelism: one list. Value: the element (BYTES); no key, no headers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from sluice.connectors._messaging import NamedSourceConnector, patiently, source_batch
from sluice.connectors.redis._client import connect, failure, probe, redis_module
from sluice.connectors.redis._config import LIST_CONFIG, STREAM_CONFIG, Settings
from sluice.connectors.redis._config import client_options as redis_options
from sluice.sdk import (
    ClientOption,
    ConfigException,
    ConnectException,
    ConnectRecord,
    ReadLimit,
    RecordOffset,
    RecordPartition,
    ReplayableSourceTask,
    SourceTask,
)
from sluice.sdk.extras import REDIS

_PAGE = 10_000  # entries per XRANGE call in read()
# The id of the `count`-th entry after `start`, stepping server-side so only one id travels back.
_NTH_ID = """
local pos, left, last = ARGV[1], tonumber(ARGV[2]), false
while left > 0 do
  local n = math.min(left, 1000)
  local r = redis.call('XRANGE', KEYS[1], pos, '+', 'COUNT', n)
  if #r == 0 then break end
  last = r[#r][1]
  pos = '(' .. last
  left = left - #r
  if #r < n then break end
end
return last
"""

# How many entries lie in [lo, hi], counted server-side a page at a time, stopping at a cap: the
# lag probe's one call (only a count travels back).
_COUNT = """
local pos, hi, cap, n = ARGV[1], ARGV[2], tonumber(ARGV[3]), 0
while n < cap do
  local r = redis.call('XRANGE', KEYS[1], pos, hi, 'COUNT', 1000)
  n = n + #r
  if #r < 1000 then break end
  pos = '(' .. r[#r][1]
end
return n
"""
_LAG_COUNT_CAP = 200_000  # entries one side of the position is counted up to


def _id(raw: bytes | str) -> tuple[int, int]:
    text = raw.decode() if isinstance(raw, bytes) else raw
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


class RedisStreamSourceTask(ReplayableSourceTask):
    """Reads its streams in exact entry-id ranges."""

    def start(self, config: Mapping[str, str]) -> None:
        values = STREAM_CONFIG.parse(config)
        self.settings = Settings.of(values)
        self.streams: list[str] = values["redis.streams"]
        self.topic = values["connect.topicname"] or None
        self.key_field = values["stream.key.field"].encode()
        self.value_field = values["stream.value.field"].encode()
        self._client: Any = None
        self._nth: Any = None

    def _redis(self) -> Any:
        if self._client is None:
            self._client = connect(self.settings)
            self._nth = self._client.register_script(_NTH_ID)
        return self._client

    def _call(self, doing: str, fn: Any) -> Any:
        try:
            return fn()
        except redis_module().RedisError as exc:
            raise failure(self.settings, doing, exc) from None

    def partitions(self) -> list[RecordPartition]:
        return [{"stream": s} for s in self.streams]

    def latest(
        self, partition: RecordPartition, start: RecordOffset | None, limit: ReadLimit
    ) -> RecordOffset | None:
        stream = partition["stream"]
        client = self._redis()
        if start is not None:
            self._check_not_trimmed(stream, start["id"])
        lower = f"({start['id']}" if start else "-"
        if limit.max_rows is None:
            top = self._call(f"XREVRANGE {stream}", lambda: client.xrevrange(stream, count=1))
            last = top[0][0] if top else None
            if last is not None and start is not None and _id(last) <= _id(start["id"]):
                last = None
        else:
            last = self._call(
                f"XRANGE {stream}",
                lambda: self._nth(keys=[stream], args=[lower, limit.max_rows], client=client),
            )
        if not last:
            return start
        return {"id": last.decode() if isinstance(last, bytes) else last}

    def _check_not_trimmed(self, stream: str, committed: str) -> None:
        client = self._redis()
        try:
            info = client.xinfo_stream(stream)
        except redis_module().ResponseError:
            return  # no such key (yet, or any more): nothing to read
        except redis_module().RedisError as exc:
            raise failure(self.settings, f"XINFO STREAM {stream}", exc) from None
        deleted = info.get("max-deleted-entry-id")
        if deleted and _id(deleted) > _id(committed):
            raise ConnectException(
                f"redis.streams: entries of stream {stream!r} after the committed id {committed} "
                f"were deleted (XDEL/XTRIM up to {deleted.decode()}) before they were read",
                suggestion="trim only what was delivered, or reset the connector's offsets",
            )

    def read(
        self, partition: RecordPartition, start: RecordOffset | None, end: RecordOffset
    ) -> Iterator[pa.RecordBatch]:
        stream = partition["stream"]
        lower = f"({start['id']}" if start else "-"
        stop = end["id"]
        while True:
            page = self._page(stream, lower, stop)
            if page:
                yield self._batch(stream, page)
            if len(page) < _PAGE:
                return
            lower = f"({page[-1][0].decode()}"

    def _page(self, stream: str, lower: str, stop: str) -> list[Any]:
        return patiently(
            lambda: self._call(
                f"XRANGE {stream}", lambda: self._redis().xrange(stream, lower, stop, count=_PAGE)
            )
        )

    def _batch(
        self, stream: str, entries: list[tuple[bytes, dict[bytes, bytes]]]
    ) -> pa.RecordBatch:
        keys, values, stamps, headers = [], [], [], []
        for entry_id, fields in entries:
            keys.append(fields.get(self.key_field))
            values.append(fields.get(self.value_field))
            stamps.append(_id(entry_id)[0] * 1000)
            pairs = []
            for name, value in fields.items():
                if name in (self.key_field, self.value_field):
                    continue
                try:
                    pairs.append((name.decode(), value.decode()))
                except UnicodeDecodeError:
                    raise ConnectException(
                        f"stream {stream!r} entry {entry_id.decode()}: field {name!r} is not "
                        "UTF-8 text, which record extensions (headers) must be",
                        suggestion="put binary data in the stream.value.field field",
                    ) from None
            headers.append(pairs or None)
        return source_batch(self.topic or stream, keys, values, stamps, headers)

    def lag(self, partition: RecordPartition, position: RecordOffset | None) -> int | None:
        """Entries after the position. Counted server-side on the shorter side: the entries
        after it, or (past 200,000 of them) XLEN minus the entries up to it; when both sides
        are longer than that, 200,000 (a floor)."""
        stream = partition["stream"]
        client = self._redis()
        count = client.register_script(_COUNT)
        if position is None:
            return int(self._call(f"XLEN {stream}", lambda: client.xlen(stream)))
        after = int(count(keys=[stream], args=[f"({position['id']}", "+", _LAG_COUNT_CAP]))
        if after < _LAG_COUNT_CAP:
            return after
        before = int(count(keys=[stream], args=["-", position["id"], _LAG_COUNT_CAP]))
        if before >= _LAG_COUNT_CAP:
            return after
        return int(client.xlen(stream)) - before

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _check_keys(
    settings: Settings, key: str, names: list[str], kind: str, *, must_exist: bool
) -> None:
    client = probe(settings)
    try:
        for name in names:
            found = client.type(name).decode()
            if found == "none" and not must_exist:
                continue  # an empty list does not exist in Redis
            if found == "none":
                raise ConfigException(key, f"{kind} {name!r} does not exist on {settings.where}")
            if found != kind:
                raise ConfigException(
                    key, f"{name!r} on {settings.where} is a {found}, not a {kind}"
                )
    except redis_module().RedisError as exc:
        err = failure(settings, f"TYPE of {key}", exc)
        raise (
            err if isinstance(err, ConfigException) else ConfigException(key, str(err))
        ) from None
    finally:
        client.close()


class RedisStreamSourceConnector(NamedSourceConnector):
    """Copies Redis streams (``redis.streams``) into a topic by entry id, exactly once, with
    keys, headers and timestamps."""

    names_key = "redis.streams"
    config_def = STREAM_CONFIG
    task_class = RedisStreamSourceTask
    requires = (REDIS,)

    @classmethod
    def client_options(cls, config: Mapping[str, str]) -> list[ClientOption]:
        """The query parameters (and a unix:// socket path) of redis.url."""
        return redis_options(config)

    def validate(self, config: Mapping[str, str]) -> None:
        values = STREAM_CONFIG.parse(config)
        _check_keys(
            Settings.of(values), "redis.streams", values["redis.streams"], "stream", must_exist=True
        )

    def default_read_limit(self) -> ReadLimit:
        # finding the end id of a range walks the stream server-side: keep a batch moderate
        return ReadLimit(max_rows=100_000)

    def offset_problem(self, partition: RecordPartition, offset: RecordOffset) -> str | None:
        entry = offset.get("id")
        if not isinstance(entry, str) or re.fullmatch(r"\d{1,20}-\d{1,20}", entry) is None:
            return f"'id' must be a stream entry id such as \"1700000000000-0\", got {entry!r}"
        return None


class RedisListSourceTask(SourceTask):
    """Moves elements to its processing lists on `poll`, removes them there on `commit`."""

    def start(self, config: Mapping[str, str]) -> None:
        values = LIST_CONFIG.parse(config)
        self.settings = Settings.of(values)
        self.topic = values["connect.topicname"] or None
        self.max_records = values["list.poll.max.records"]
        fmt = values["list.processing.key.format"]
        self.lists = {
            name: fmt.replace("${list}", name).replace("${connector}", self.context.connector_name)
            for name in values["redis.lists"]
        }
        self._client = connect(self.settings)
        self._move = self._client.register_script(_TAKE)
        for name, processing in self.lists.items():
            # what a dead process took but never acknowledged goes back, oldest to the right end
            self._call(
                f"restoring {processing} to {name}",
                lambda n=name, p=processing: self._move(keys=[p, n], args=[0, "restore"]),
            )

    def _call(self, doing: str, fn: Any) -> Any:
        try:
            return fn()
        except redis_module().RedisError as exc:
            raise failure(self.settings, doing, exc) from None

    def poll(self) -> list[ConnectRecord]:
        records = []
        for name, processing in self.lists.items():
            taken = self._call(
                f"LMOVE {name} {processing}",
                lambda n=name, p=processing: self._move(
                    keys=[n, p], args=[self.max_records, "take"]
                ),
            )
            for element in taken:
                records.append(
                    ConnectRecord(
                        value=element,
                        partition={"list": name},
                        topic=self.topic or name,
                    )
                )
        return records

    def commit(self, records: list[ConnectRecord]) -> None:
        counts: dict[str, int] = {}
        for record in records:
            name = record.partition["list"] if record.partition else None
            if name in self.lists:
                counts[name] = counts.get(name, 0) + 1
        for name, n in counts.items():
            processing = self.lists[name]
            # elements wait in taking order, the oldest at the right: the committed ones are the
            # n rightmost (commits come in poll order)
            self._call(f"RPOP {processing} {n}", lambda p=processing, k=n: self._client.rpop(p, k))

    def stop(self) -> None:
        self._client.close()


# Moves up to ARGV[1] elements atomically (all at once, or none if the connection drops):
# "take" from the right of KEYS[1] to the left of KEYS[2] (returns them, oldest first);
# "restore" everything from the left of KEYS[1] (the processing list) to the right of KEYS[2].
_TAKE = """
local out = {}
if ARGV[2] == 'take' then
  for i = 1, tonumber(ARGV[1]) do
    local v = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
    if not v then break end
    out[#out + 1] = v
  end
else
  while redis.call('LMOVE', KEYS[1], KEYS[2], 'LEFT', 'RIGHT') do end
end
return out
"""


class RedisListSourceConnector(NamedSourceConnector):
    """Takes elements from Redis lists used as queues (``LPUSH`` in, taken from the right):
    at-least-once, acknowledged after commit."""

    names_key = "redis.lists"
    config_def = LIST_CONFIG
    task_class = RedisListSourceTask
    requires = (REDIS,)

    @classmethod
    def client_options(cls, config: Mapping[str, str]) -> list[ClientOption]:
        """The query parameters (and a unix:// socket path) of redis.url."""
        return redis_options(config)

    def validate(self, config: Mapping[str, str]) -> None:
        values = LIST_CONFIG.parse(config)
        _check_keys(
            Settings.of(values), "redis.lists", values["redis.lists"], "list", must_exist=False
        )


__all__ = [
    "RedisListSourceConnector",
    "RedisListSourceTask",
    "RedisStreamSourceConnector",
    "RedisStreamSourceTask",
]

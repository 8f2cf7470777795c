"""Finds plugin classes by name: built-ins and their aliases, entry points, modules under
`pluginPaths`, or any importable `module.Class`.

`PluginRegistry.reload()` rescans entry points and plugin folders, so a connector module dropped
into a plugin folder is usable without restarting the worker (`/plugin/reload`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import logging
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType

from sluice.connectors.cdc import MySqlCdcSourceConnector, PostgresCdcSourceConnector
from sluice.connectors.file import FileSinkConnector, FileSourceConnector
from sluice.connectors.http import HttpSinkConnector
from sluice.connectors.jdbc import JdbcSinkConnector, JdbcSourceConnector
from sluice.connectors.kafka import KafkaSinkConnector, KafkaSourceConnector
from sluice.connectors.lake import DeltaSinkConnector, IcebergSinkConnector, ParquetSinkConnector
from sluice.connectors.mqtt import MqttSinkConnector, MqttSourceConnector
from sluice.connectors.nats import NatsSinkConnector, NatsSourceConnector
from sluice.connectors.rabbitmq import (
    RabbitMQSinkConnector,
    RabbitMQSourceConnector,
    RabbitMQStreamSourceConnector,
)
from sluice.connectors.redis import (
    RedisListSourceConnector,
    RedisSinkConnector,
    RedisStreamSourceConnector,
)
from sluice.connectors.rocketmq import RocketMQSinkConnector, RocketMQSourceConnector
from sluice.converters import BUILTIN_CONVERTERS, Converter
from sluice.sdk import (
    ConfigException,
    Connector,
    Predicate,
    SinkConnector,
    SourceConnector,
    Transform,
)
from sluice.sdk._config import closest
from sluice.transforms import BUILTIN_TRANSFORMS
from sluice.transforms.filters import PREDICATE_NAMES

log = logging.getLogger(__name__)

BUILTIN_CONNECTORS: dict[str, type[Connector]] = {
    "FileSourceConnector": FileSourceConnector,
    "FileSinkConnector": FileSinkConnector,
    "org.apache.rocketmq.connect.file.FileSourceConnector": FileSourceConnector,
    "org.apache.rocketmq.connect.file.FileSinkConnector": FileSinkConnector,
    # Kafka's quickstart classes (their keys `file`/`topic`/`topics` are aliases too)
    "org.apache.kafka.connect.file.FileStreamSourceConnector": FileSourceConnector,
    "org.apache.kafka.connect.file.FileStreamSinkConnector": FileSinkConnector,
    "FileStreamSource": FileSourceConnector,
    "FileStreamSink": FileSinkConnector,
    "HttpSinkConnector": HttpSinkConnector,
    "org.apache.rocketmq.connect.http.sink.HttpSinkConnector": HttpSinkConnector,
    "JdbcSourceConnector": JdbcSourceConnector,
    "JdbcSinkConnector": JdbcSinkConnector,
    "org.apache.rocketmq.connect.jdbc.source.JdbcSourceConnector": JdbcSourceConnector,
    "org.apache.rocketmq.connect.jdbc.sink.JdbcSinkConnector": JdbcSinkConnector,
    "org.apache.rocketmq.connect.jdbc.connector.JdbcSourceConnector": JdbcSourceConnector,
    "org.apache.rocketmq.connect.jdbc.connector.JdbcSinkConnector": JdbcSinkConnector,
    "org.apache.rocketmq.connect.jdbc.mysql.source.JdbcSourceConnector": JdbcSourceConnector,
    "io.confluent.connect.jdbc.JdbcSourceConnector": JdbcSourceConnector,
    "io.confluent.connect.jdbc.JdbcSinkConnector": JdbcSinkConnector,
    "PostgresCdcSourceConnector": PostgresCdcSourceConnector,
    "MySqlCdcSourceConnector": MySqlCdcSourceConnector,
    "io.debezium.connector.mysql.MySqlConnector": MySqlCdcSourceConnector,
    "io.debezium.connector.mariadb.MariaDbConnector": MySqlCdcSourceConnector,
    "io.debezium.connector.postgresql.PostgresConnector": PostgresCdcSourceConnector,
    "RocketMQSourceConnector": RocketMQSourceConnector,
    "RocketMQSinkConnector": RocketMQSinkConnector,
    "KafkaSourceConnector": KafkaSourceConnector,
    "KafkaSinkConnector": KafkaSinkConnector,
    "org.apache.rocketmq.connect.kafka.connector.KafkaSourceConnector": KafkaSourceConnector,
    "org.apache.rocketmq.connect.kafka.connector.KafkaSinkConnector": KafkaSinkConnector,
    "RedisStreamSourceConnector": RedisStreamSourceConnector,
    "RedisListSourceConnector": RedisListSourceConnector,
    "RedisSinkConnector": RedisSinkConnector,
    # RocketMQ Connect's Redis source follows the replication stream; sluice's reads streams
    "org.apache.rocketmq.connect.redis.connector.RedisSourceConnector": RedisStreamSourceConnector,
    "org.apache.rocketmq.connect.redis.connector.RedisSinkConnector": RedisSinkConnector,
    "ParquetSinkConnector": ParquetSinkConnector,
    "DeltaSinkConnector": DeltaSinkConnector,
    "IcebergSinkConnector": IcebergSinkConnector,
    "RabbitMQStreamSourceConnector": RabbitMQStreamSourceConnector,
    "RabbitMQSourceConnector": RabbitMQSourceConnector,
    "RabbitMQSinkConnector": RabbitMQSinkConnector,
    # RocketMQ Connect has a (JMS) source only, under two spellings; no sink
    "org.apache.rocketmq.connect.rabbitmq.connector.RabbitmqSourceConnector": (
        RabbitMQSourceConnector
    ),
    "org.apache.rocketmq.connect.rabbitmq.connector.RabbitMQSourceConnector": (
        RabbitMQSourceConnector
    ),
    "NatsSourceConnector": NatsSourceConnector,
    "NatsSinkConnector": NatsSinkConnector,
    "MqttSourceConnector": MqttSourceConnector,
    "MqttSinkConnector": MqttSinkConnector,
    "org.apache.rocketmq.connect.mqtt.connector.MqttSourceConnector": MqttSourceConnector,
    "org.apache.rocketmq.connect.mqtt.connector.MqttSinkConnector": MqttSinkConnector,
}

ENTRY_POINT_GROUPS = {"connector": "sluice.connectors", "transform": "sluice.transforms"}


@dataclass(frozen=True)
class PluginInfo:
    """One plugin class as the REST API lists it."""

    class_name: str
    type: str  # source | sink | transform | converter | predicate
    version: str
    aliases: tuple[str, ...] = ()
    origin: str = "builtin"  # builtin | entry-point | plugin-path
    #: a connector's guarantee under its default config (`Connector.delivery({})`), else None
    delivery: str | None = None
    #: the first line of the class's docstring: what the console's class picker shows
    summary: str = ""


def summary_of(cls: type) -> str:
    """The first line of a plugin class's own docstring ("" when it has none)."""
    doc = cls.__dict__.get("__doc__") or ""
    return next((line.strip() for line in doc.strip().splitlines() if line.strip()), "")


def delivery_of(cls: type | None, config: Mapping[str, str]) -> str | None:
    """`cls.delivery(config)` as text; None for a non-connector or a plugin whose method fails
    (a plugin written before `delivery` was derived may still set it as a plain string)."""
    if cls is None or not issubclass(cls, Connector):
        return None
    stated = cls.__dict__.get("delivery", getattr(cls, "delivery", None))
    if isinstance(stated, str):
        return stated
    try:
        return str(cls.delivery(config))
    except Exception:  # a plugin's bug must not break the plugin list or a status
        return None


@dataclass
class _Names:
    connectors: dict[str, type[Connector]] = field(default_factory=dict)
    transforms: dict[str, type[Transform]] = field(default_factory=dict)
    origins: dict[type, str] = field(default_factory=dict)


def plugin_kind(cls: type | None) -> str:
    """What kind of plugin `cls` is: "source", "sink", "converter", "predicate" or "transform"
    ("unknown" for None: a class that could not be found)."""
    if cls is None:
        return "unknown"
    if issubclass(cls, SourceConnector):
        return "source"
    if issubclass(cls, SinkConnector):
        return "sink"
    if issubclass(cls, Converter):
        return "converter"
    if issubclass(cls, Predicate):
        return "predicate"
    return "transform"


def _full_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class PluginRegistry:
    """Every connector and transform class a worker can run, by name."""

    def __init__(self, plugin_paths: tuple[str, ...] | list[str] = ()) -> None:
        self.plugin_paths = tuple(os.path.abspath(p) for p in plugin_paths)
        self.errors: dict[str, str] = {}
        self._lock = threading.Lock()
        self._names = _Names()
        self._loaded: dict[str, float] = {}  # module name -> file mtime when imported
        self.reload()

    # -- scanning -------------------------------------------------------------------------------
    def reload(self) -> list[str]:
        """Rescan entry points and plugin folders; returns the plugin class names now known."""
        names = _Names(dict(BUILTIN_CONNECTORS), dict(BUILTIN_TRANSFORMS))
        for cls in (*BUILTIN_CONNECTORS.values(), *BUILTIN_TRANSFORMS.values()):
            names.origins[cls] = "builtin"
        errors: dict[str, str] = {}
        self._scan_entry_points(names, errors)
        for folder in self.plugin_paths:
            self._scan_folder(folder, names, errors)
        with self._lock:
            self._names = names
            self.errors = errors
        for where, message in errors.items():
            log.warning("plugin %s could not be loaded: %s", where, message)
        return sorted({_full_name(c) for c in names.origins})

    def _scan_entry_points(self, names: _Names, errors: dict[str, str]) -> None:
        for group in ENTRY_POINT_GROUPS.values():
            for ep in importlib.metadata.entry_points(group=group):
                try:
                    cls = ep.load()
                except Exception as exc:
                    errors[f"entry point {group}:{ep.name}"] = f"{type(exc).__name__}: {exc}"
                    continue
                self._add(names, cls, "entry-point", errors, f"entry point {ep.name}", ep.name)

    def _scan_folder(self, folder: str, names: _Names, errors: dict[str, str]) -> None:
        if not os.path.isdir(folder):
            errors[folder] = "plugin path is not a directory"
            return
        if folder not in sys.path:
            sys.path.insert(0, folder)
        importlib.invalidate_caches()
        for entry in sorted(os.listdir(folder)):
            path = os.path.join(folder, entry)
            if entry.endswith(".py") and not entry.startswith("_"):
                module_name, marker = entry[:-3], path
            elif os.path.isfile(os.path.join(path, "__init__.py")):
                module_name, marker = entry, os.path.join(path, "__init__.py")
            else:
                continue
            try:
                module = self._import(module_name, marker)
            except Exception as exc:
                errors[path] = f"{type(exc).__name__}: {exc}"
                continue
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if cls.__module__ == module.__name__ or cls.__module__.startswith(
                    module.__name__ + "."
                ):
                    self._add(names, cls, "plugin-path", errors, path)

    def _import(self, module_name: str, marker: str) -> ModuleType:
        mtime = os.stat(marker).st_mtime
        module = sys.modules.get(module_name)
        if module is not None and self._loaded.get(module_name) != mtime:
            module = importlib.reload(module)
        elif module is None:
            module = importlib.import_module(module_name)
        self._loaded[module_name] = mtime
        return module

    @staticmethod
    def _add(
        names: _Names, cls: object, origin: str, errors: dict[str, str], where: str, *aliases: str
    ) -> None:
        if not isinstance(cls, type) or inspect.isabstract(cls):
            return
        if issubclass(cls, (SourceConnector, SinkConnector)) and cls not in (
            SourceConnector,
            SinkConnector,
        ):
            table: dict = names.connectors
        elif issubclass(cls, Transform) and cls is not Transform:
            table = names.transforms
        else:
            return
        for name in (_full_name(cls), cls.__name__, *aliases):
            taken = table.get(name)
            shadows = taken is not None and taken is not cls and name != _full_name(cls)
            if shadows and names.origins.get(taken) == "builtin":
                continue  # a plugin never shadows a built-in's short name
            table[name] = cls
        names.origins[cls] = origin

    # -- lookups --------------------------------------------------------------------------------
    def connector(self, name: str, *, load: bool = True) -> type[Connector]:
        """The class named by `connector.class`. `load=False`: a registered name, or a
        `module.Class` of a module imported already — never an import (what a read asks)."""
        with self._lock:
            table = self._names.connectors
        return _resolve(
            name,
            table,
            Connector,
            "connector.class",
            "connector",
            "a SourceConnector or SinkConnector",
            load=load,
        )

    def connector_or_none(self, name: str) -> type[Connector] | None:
        """The class named by `connector.class`, or None when there is none by that name (a
        stored config whose plugin went away: what a read shows as "unknown")."""
        try:
            return self.connector(name)
        except ConfigException:
            return None

    def transform(self, name: str) -> type[Transform]:
        """The class named by `transforms.<n>.class`."""
        with self._lock:
            table = self._names.transforms
        return _resolve(name, table, Transform, "transforms", "transform", "a Transform")

    def plugins(self) -> list[PluginInfo]:
        """Every known plugin class once, with the other names it answers to."""
        with self._lock:
            names = self._names
        by_class: dict[type, list[str]] = {}
        tables: tuple[Mapping[str, type], ...] = (
            names.connectors,
            names.transforms,
            BUILTIN_CONVERTERS,
            PREDICATE_NAMES,
        )
        for table in tables:
            for name, cls in table.items():
                by_class.setdefault(cls, []).append(name)
        out = []
        for cls, aliases in by_class.items():
            full = _full_name(cls)
            version = str(
                getattr(cls, "version", "")
                or getattr(sys.modules.get(cls.__module__), "__version__", "")
                or _sluice_version()
            )
            out.append(
                PluginInfo(
                    full,
                    plugin_kind(cls),
                    version,
                    tuple(sorted(a for a in aliases if a != full)),
                    names.origins.get(cls, "builtin"),
                    delivery_of(cls, {}),
                    summary_of(cls),
                )
            )
        return sorted(out, key=lambda p: (p.type, p.class_name))


def _sluice_version() -> str:
    try:
        return importlib.metadata.version("sluice")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - always installed
        return "0"


def _resolve(
    name: str,
    known: dict[str, type],
    base: type,
    key: str,
    kind: str,
    expected: str,
    *,
    load: bool = True,
) -> type:
    """A known name or alias, or `module.Class` / `module:Class` that subclasses `base` (with
    `load=False`, only in a module imported already: no module's code runs)."""
    name = name.strip()
    if name in known:
        return known[name]
    module_name, sep, attr = name.replace(":", ".").rpartition(".")
    if not sep or "$" in name:
        if (unknown := _misspelt(name, known, key, kind)) is not None:
            raise unknown
        short = ", ".join(sorted(k for k in known if "." not in k and "$" not in k))
        raise ConfigException(key, f"unknown {kind} class {name!r}; known: {short}")
    if not module_name or not attr or module_name.startswith(".") or module_name.endswith("."):
        raise ConfigException(key, f"{name!r} is not a class name (module.Class)")
    if not load:
        module = sys.modules.get(module_name)
        # the module's own attributes only: a module __getattr__ may import
        cls = vars(module).get(attr) if module is not None else None
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise ConfigException(
                key,
                f"{name!r} is not a registered {kind} (built-in, entry point or pluginPaths) "
                f"nor the class of a connector created on this worker",
            )
        return cls
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:  # ImportError, or whatever the module raised while importing
        # no such module or class, and a known name is close: a typo, not a broken plugin
        absent = isinstance(exc, AttributeError) or (
            isinstance(exc, ModuleNotFoundError)
            and bool(exc.name)
            and f"{module_name}.".startswith(f"{exc.name}.")
        )
        if absent and (unknown := _misspelt(name, known, key, kind)) is not None:
            raise unknown from None
        raise ConfigException(key, f"cannot load {name!r}: {type(exc).__name__}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigException(key, f"{name!r} is not {expected}")
    return cls


#: How close a class name must be to be taken for a typo of a known one: closer than for keys,
#: since class names share long parts (`…SourceConnector`, `io.confluent.connect.`), which
#: made `NoSuchConnector` "close" to `NatsSourceConnector` and Confluent's HDFS sink to its JDBC
#: sink at the keys' 0.75. A letter wrong, missing or doubled stays above it.
_CLASS_CUTOFF = 0.9


def _misspelt(name: str, known: Mapping[str, type], key: str, kind: str) -> ConfigException | None:
    """`unknown class …; did you mean …?` when a known name is close to `name`, else None. A
    name without dots is compared with the last part of each known name (Kafka's
    `FileStreamSourceConnecter` with `org.apache.kafka.connect.file.FileStreamSourceConnector`),
    and the shortest known name ending so is suggested."""
    names = {*known, *(_full_name(cls) for cls in known.values())}
    if "." in name:
        near = closest(name, names, cutoff=_CLASS_CUTOFF)
    else:
        tails: dict[str, str] = {}
        for full in sorted(names, key=lambda k: (k.count("."), k)):
            tails.setdefault(full.rsplit(".", 1)[-1], full)
        tail = closest(name, tails, cutoff=_CLASS_CUTOFF)
        near = tails[tail] if tail is not None else None
    if near is None:
        return None
    return ConfigException(key, f"unknown {kind} class {name!r}; did you mean {near}?")


_DEFAULT: PluginRegistry | None = None


def default_registry() -> PluginRegistry:
    """The registry of a process without plugin folders (built-ins + entry points)."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = PluginRegistry()
    return _DEFAULT


def resolve_connector(name: str) -> type[Connector]:
    """The class named by `connector.class`: a built-in name or alias, or `module.Class`."""
    return default_registry().connector(name)


def resolve_transform(name: str) -> type[Transform]:
    """The class named by `transforms.<n>.class`: a built-in name or alias, or `module.Class`."""
    return default_registry().transform(name)

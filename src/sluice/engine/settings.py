"""The one owner of the connector-level keys: what every connector config may carry besides the
connector's own keys, parsed once into `ConnectorSettings` and validated key by key.

Keys (all optional)::

    common   connector.class, name, max.tasks (Kafka: tasks.max), read.max.rows, read.max.bytes,
             pipeline.fused, key.converter[.*], value.converter[.*], transforms[.<n>.*],
             predicates[.<n>.*], errors.*  (see `sluice.engine.keys`)
    sink     connect.topicnames (Kafka: topics), consume.from.where, task.group.id

`check_config` reports **every** problem of a config, not the first one: each declared key is
parsed on its own, then the converters, transforms, error policy and the connector's own
`validate` run, each catching its own error. A key nobody declares is not an error (Kafka Connect
tolerates them, and plugins may read keys they never declare) but a warning with a "did you mean"
when a declared key is close. Aliases (Kafka's names) are rewritten to sluice's names, so the rest
of the runtime reads one name per setting.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sluice.converters import converter_from_config
from sluice.engine.errors import ErrorPolicy
from sluice.engine.keys import ERROR_KEYS, PIPELINE_KEYS, RUNTIME_KEYS, SINK_KEYS
from sluice.engine.retry import RetryPolicy
from sluice.engine.transforms import TransformResolver, parse_transforms
from sluice.sdk import ConfigDef, ConfigException, ConfigKey, ConnectException
from sluice.sdk._config import closest

#: Keys every connector config may carry besides `RUNTIME_KEYS`.
COMMON_KEYS = ConfigDef(
    ConfigKey("connector.class", doc="the connector plugin: a built-in name, alias, module.Class"),
    ConfigKey("name", default="", doc="the connector's name (Kafka Connect repeats it here)"),
    *RUNTIME_KEYS.keys.values(),
    *PIPELINE_KEYS.keys.values(),
    ConfigKey("key.converter", default="", doc="converter of record keys (StringConverter)"),
    ConfigKey("value.converter", default="", doc="converter of record values (StringConverter)"),
    ConfigKey("transforms", type="list", default=[], doc="transform names, applied in order"),
    ConfigKey("predicates", type="list", default=[], doc="predicate names for transforms"),
)

#: Kafka Connect's (or older sluice) names -> the name sluice reads.
ALIASES = {"tasks.max": "max.tasks", "topics": "connect.topicnames"}

#: Keys the runtime adds itself (never typed by a user, never warned about).
_PREFIXES = ("key.converter.", "value.converter.", "sluice.")


@dataclass(frozen=True)
class Problem:
    """One bad (error) or suspicious (warning) key, as the REST API and CLI show it."""

    key: str
    message: str
    code: str = "connect.config"
    suggestion: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "key": self.key,
            "message": self.message,
            "suggestion": self.suggestion,
        }

    @staticmethod
    def of(exc: ConnectException, key: str = "") -> Problem:
        """The problem an SDK error describes (its key, message without the key, suggestion)."""
        name = getattr(exc, "key", key)
        message = exc.message
        if name and message.startswith(f"{name}: "):
            message = message[len(name) + 2 :]
        return Problem(name, message, exc.code, exc.suggestion)


@dataclass(frozen=True)
class RestartPolicy:
    """`restart.*`: how often and how long a query failed by a transient Spark error or by a
    server being away is restarted by itself (`sluice.runtime.herder.restarts`)."""

    max_attempts: int = 5
    backoff_max_ms: int = 60_000
    retriable_timeout_ms: int = 600_000


@dataclass(frozen=True)
class ConnectorSettings:
    """The connector-level keys of one config, typed: parsed once (`parse_settings`) and passed
    down to whatever plans and runs the connector's query, which reads none of these keys again."""

    kind: str  # source | sink
    max_tasks: int
    read_max_rows: int | None
    read_max_bytes: int | None
    pipeline_fused: bool
    key_converter: str
    value_converter: str
    transforms: tuple[str, ...]
    topics: tuple[str, ...] = ()
    consume_from_where: str | None = None
    task_group_id: str | None = None
    #: the topic a source writes (`connect.topicname`; "" when its connector picks per record)
    writes: str = ""
    #: `errors.*` (tolerance, log, dead-letter topic) and `errors.retry.*`
    errors: ErrorPolicy = field(default_factory=ErrorPolicy)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    #: the connector's own `schema.compatibility` (None: the worker's)
    schema_compatibility: str | None = None
    restart: RestartPolicy = field(default_factory=RestartPolicy)

    @property
    def fused(self) -> bool:
        """Whether the settings allow the fused path (no transforms, `pipeline.fused` not
        false); the converters decide the rest (`sluice.engine.pipeline.fusable`)."""
        return self.pipeline_fused and not self.transforms


@dataclass
class ConfigReport:
    """What `check_config` found: the canonical config, its settings (None when a common key is
    bad), every error and every warning."""

    config: dict[str, str]
    settings: ConnectorSettings | None
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def every_alias(aliases: Mapping[str, str] | None = None) -> dict[str, str]:
    """Alias -> sluice name: the runtime's `ALIASES` and a connector's own `key_aliases`."""
    return {**ALIASES, **(aliases or {})}


def canonical_keys(
    config: Mapping[str, str], aliases: Mapping[str, str] | None = None
) -> tuple[dict[str, str], list[Problem]]:
    """`config` with aliases (`ALIASES` and a connector's own `key_aliases`) renamed to sluice's
    names; conflicting pairs are errors."""
    out = dict(config)
    errors: list[Problem] = []
    for alias, name in every_alias(aliases).items():
        if alias not in out:
            continue
        value = out.pop(alias)
        if name in out and out[name].strip() != value.strip():
            errors.append(
                Problem(
                    alias,
                    f"{value!r} contradicts {name}={out[name]!r} ({alias} is Kafka Connect's "
                    f"name of {name})",
                    suggestion=f"set only {name}",
                )
            )
        out.setdefault(name, value)
    return out, errors


#: The key of a stored config that remembers which aliases its user typed ("max.tasks=tasks.max,
#: connect.topicnames=topics"): the config runs under sluice's names and is shown as posted.
POSTED_NAMES_KEY = "sluice.posted.names"


def posted_names(
    typed: Mapping[str, str], canonical: Mapping[str, str], aliases: Mapping[str, str] | None
) -> str:
    """The `POSTED_NAMES_KEY` value for a config typed as `typed` and stored as `canonical`
    (`canonical_keys`' result): each sluice name renamed from an alias the user typed, as
    `name=alias` ("" when none was)."""
    pairs = [
        f"{name}={alias}"
        for alias, name in every_alias(aliases).items()
        if alias in typed and name not in typed and name in canonical
    ]
    return ",".join(sorted(pairs))


def as_posted(config: Mapping[str, str]) -> dict[str, str]:
    """A stored config under the names its user typed (`POSTED_NAMES_KEY` undone and dropped):
    what Kafka Connect's users expect `GET …/config` to return after they `PUT` it."""
    out = dict(config)
    for pair in out.pop(POSTED_NAMES_KEY, "").split(","):
        name, _, alias = pair.partition("=")
        if name in out and alias and alias not in out:
            out[alias] = out.pop(name)
    return out


def key_definitions(kind: str, connector_keys: ConfigDef) -> dict[str, ConfigKey]:
    """Every key a connector of `kind` declares: the common keys, the sink keys for a sink, and
    the connector's own (which win: a connector may redeclare `connect.topicnames`)."""
    keys = dict(COMMON_KEYS.keys)
    if kind == "sink":
        keys.update(SINK_KEYS.keys)
    keys.update(connector_keys.keys)
    return keys


def _typed(name: str, definition: ConfigKey, conf: Mapping[str, str]) -> Any:
    return ConfigDef(definition).parse({name: conf[name]} if name in conf else {})[name]


def check_config(
    config: Mapping[str, str],
    *,
    kind: str,
    connector_keys: ConfigDef,
    resolve_transform: TransformResolver,
    validate: Callable[[dict[str, str]], None] | None = None,
    aliases: Mapping[str, str] | None = None,
    topic_problem: Callable[[str], str | None] | None = None,
) -> ConfigReport:
    """Check a normalised config of a `kind` ("source" | "sink") connector; never raises for a
    config problem, reports them all. `aliases`: the connector's own other names of its keys;
    `topic_problem`: the bus's topic name rule, for the topics the config names."""
    conf, errors = canonical_keys(config, aliases)
    definitions = key_definitions(kind, connector_keys)
    values: dict[str, Any] = {}
    for name, definition in definitions.items():
        try:
            values[name] = _typed(name, definition, conf)
        except ConfigException as exc:
            errors.append(Problem.of(exc))
    bad = {p.key for p in errors}

    def attempt(step: Callable[[], Any]) -> Any:
        """`step()`'s value, or None with its problems noted."""
        try:
            return step()
        except ConfigException as exc:
            for one in getattr(exc, "problems", [exc]):  # InvalidConfig: every bad key
                if one.key not in bad:  # a key parsed above already has its message
                    errors.append(Problem.of(one))
                    bad.add(one.key)
        except ConnectException as exc:
            errors.append(Problem.of(exc, "connector.class"))
        except Exception as exc:  # a plugin's own check crashed: still the caller's config
            errors.append(
                Problem(
                    "connector.class",
                    f"config rejected by the connector: {type(exc).__name__}: {exc}",
                )
            )
        return None

    topics = list(values.get("connect.topicnames") or [])
    if kind == "sink" and not topics and "connect.topicnames" not in bad:
        errors.append(
            Problem(
                "connect.topicnames",
                "required key is missing: a sink reads topics",
                suggestion="name the topics to read (Kafka Connect's key `topics` works too)",
            )
        )
        bad.add("connect.topicnames")
    for role in ("key", "value"):
        if f"{role}.converter" not in bad:
            attempt(lambda role=role: converter_from_config(conf, role))
    policy = attempt(lambda: error_policy(conf, topics))
    chain: list[Any] = []
    if "transforms" not in bad and "predicates" not in bad:
        chain = attempt(lambda: parse_transforms(conf, resolve_transform)) or []
    if validate is not None:
        attempt(lambda: validate(dict(conf)))
    if topic_problem is not None:
        errors += [p for p in _topic_problems(conf, topics, topic_problem) if p.key not in bad]
    warnings = _unknown_keys(conf, definitions, chain, resolve_transform)
    renamed = every_alias(aliases)
    errors = [_as_typed(p, config, renamed) for p in errors]
    errors = _typos_named(errors, warnings, renamed)
    settings = None
    common = ("max.tasks", "read.max.rows", "read.max.bytes", "pipeline.fused")
    if all(k in values for k in common) and not errors:
        settings = _settings(kind, conf, values, topics, policy)
    return ConfigReport(conf, settings, errors, warnings)


def _as_typed(problem: Problem, typed: Mapping[str, str], aliases: Mapping[str, str]) -> Problem:
    """`problem` under the key the user typed: aliases are renamed before any check runs, so a
    bad `tasks.max` is found as `max.tasks`; the user must read the name they wrote."""
    for alias, name in aliases.items():
        if problem.key == name and alias in typed and name not in typed:
            return replace(problem, key=alias)
    return problem


def _typos_named(
    errors: list[Problem], warnings: list[Problem], aliases: Mapping[str, str]
) -> list[Problem]:
    """Each missing required key that an unknown key of the config looks like a typo of
    (`connect.topicnmae` for `connect.topicname`) says so: the unknown key is only a warning,
    and the error alone would send the user looking for a key they believe they set."""
    unknown = [w.key for w in warnings if w.code == "connect.config.unknown"]
    out = []
    for problem in errors:
        if unknown and problem.message.startswith("required key is missing"):
            names = [problem.key, *(a for a, n in aliases.items() if n == problem.key)]
            for name in names:
                if (typo := closest(name, unknown)) is not None:
                    why = f"{typo} is set, and looks like a typo of {name}"
                    problem = replace(
                        problem,
                        message=f"{problem.message}; {why}",
                        suggestion=f"rename {typo} to {name}",
                    )
                    break
        out.append(problem)
    return out


#: The keys naming topics on the bus (a source's own, a sink's, the dead-letter topic).
_TOPIC_KEYS = ("connect.topicname", "errors.deadletterqueue.topic.name")


def _topic_problems(
    conf: Mapping[str, str], topics: list[str], problem: Callable[[str], str | None]
) -> list[Problem]:
    """One problem per topic name the bus would refuse, naming the key that holds it."""
    named = [(key, conf.get(key, "").strip()) for key in _TOPIC_KEYS]
    named += [("connect.topicnames", topic) for topic in topics]
    found = []
    for key, topic in named:
        if topic and (why := problem(topic)) is not None:
            found.append(Problem(key, why))
    return found


def _settings(
    kind: str,
    conf: Mapping[str, str],
    values: Mapping[str, Any],
    topics: list[str],
    errors: ErrorPolicy,
) -> ConnectorSettings:
    """The typed settings from the keys parsed already (`conf` canonical: aliases renamed)."""
    return ConnectorSettings(
        kind=kind,
        max_tasks=values["max.tasks"],
        read_max_rows=values["read.max.rows"],
        read_max_bytes=values["read.max.bytes"],
        pipeline_fused=values["pipeline.fused"],
        key_converter=values.get("key.converter") or "",
        value_converter=values.get("value.converter") or "",
        transforms=tuple(values.get("transforms") or ()),
        topics=tuple(topics),
        consume_from_where=values.get("consume.from.where"),
        task_group_id=values.get("task.group.id"),
        writes=conf.get("connect.topicname", "").strip() if kind == "source" else "",
        errors=errors,
        retry=RetryPolicy(values["errors.retry.timeout"], values["errors.retry.delay.max.ms"]),
        schema_compatibility=values["schema.compatibility"],
        restart=_restart(values),
    )


def _restart(values: Mapping[str, Any]) -> RestartPolicy:
    return RestartPolicy(
        max_attempts=values["restart.transient.max.attempts"],
        backoff_max_ms=values["restart.transient.backoff.max.ms"],
        retriable_timeout_ms=values["restart.retriable.timeout.ms"],
    )


def error_policy(config: Mapping[str, str], reads: Sequence[str] = ()) -> ErrorPolicy:
    """The `errors.*` policy of a connector config; `reads`: the topics a sink reads (its
    dead-letter topic must not be one of them, or a bad record would come back forever)."""
    keys = ERROR_KEYS.parse(config)
    kafka = keys["errors.deadletterqueue.context.headers.enable"]
    rocketmq = keys["errors.deadletterqueue.context.properties.enable"]
    if kafka is not None and rocketmq is not None and kafka != rocketmq:
        raise ConfigException(
            "errors.deadletterqueue.context.headers.enable",
            "contradicts errors.deadletterqueue.context.properties.enable; set one of them",
        )
    topic = keys["errors.deadletterqueue.topic.name"].strip()
    tolerate = keys["errors.tolerance"] == "all"
    if topic and not tolerate:
        raise ConfigException(
            "errors.deadletterqueue.topic.name",
            "a dead-letter topic needs errors.tolerance=all (with none, the first bad "
            "record fails the task and nothing reaches the dead-letter topic)",
        )
    if topic and topic in reads:
        raise ConfigException(
            "errors.deadletterqueue.topic.name",
            f"{topic!r} is a topic this sink reads (connect.topicnames): its dead letters "
            "would be read again",
        )
    return ErrorPolicy(
        tolerate=tolerate,
        log=keys["errors.log.enable"],
        log_messages=keys["errors.log.include.messages"],
        dlq_topic=topic,
        dlq_queues=keys["errors.deadletterqueue.write.queue.nums"]
        or keys["errors.deadletterqueue.read.queue.nums"],
        context_headers=next((v for v in (rocketmq, kafka) if v is not None), True),
    )


def restart_policy(config: Mapping[str, str]) -> RestartPolicy:
    """The `restart.*` keys of a stored config, typed (a bad value raises `ConfigException`
    naming its key; validation refused it at create time)."""
    keys = {k: v for k, v in config.items() if k.startswith("restart.")}
    return _restart(RUNTIME_KEYS.parse(keys))


def parse_settings(config: Mapping[str, str], kind: str) -> ConnectorSettings:
    """The connector-level keys of an accepted config (aliases renamed), typed; the first bad
    key raises `ConfigException` naming it (`check_config` reports them all at create time)."""
    conf, _errors = canonical_keys(config)
    values = COMMON_KEYS.parse({k: v for k, v in conf.items() if k in COMMON_KEYS.keys})
    if kind == "sink":
        values.update(SINK_KEYS.parse({k: v for k, v in conf.items() if k in SINK_KEYS.keys}))
    topics = list(values.get("connect.topicnames") or [])
    return _settings(kind, conf, values, topics, error_policy(conf, topics))


@dataclass(frozen=True)
class TopicUse:
    """The topics one connector config names: the one a source writes, those a sink reads, and
    its dead-letter topic (empty when it names none)."""

    writes: str = ""
    reads: tuple[str, ...] = ()
    dead_letters: str = ""

    def names(self, topic: str) -> bool:
        """Whether the config uses `topic` in any of these ways."""
        return bool(topic) and (topic in (self.writes, self.dead_letters) or topic in self.reads)


def topic_use(config: Mapping[str, str]) -> TopicUse:
    """The topics a stored (or posted) config names, read by the same rules as when it runs (an
    alias such as Kafka's `topics` renamed, `,` or `;` between names)."""
    conf, _errors = canonical_keys(config)
    reads = conf.get("connect.topicnames", "").replace(";", ",")
    return TopicUse(
        writes=conf.get("connect.topicname", "").strip(),
        reads=tuple(_names(reads)),
        dead_letters=conf.get("errors.deadletterqueue.topic.name", "").strip(),
    )


def _names(value: str) -> list[str]:
    return [n.strip() for n in value.split(",") if n.strip()]


_OPTION = re.compile(r"^(transforms|predicates)\.([^.]+)\.(.+)$")


def _unknown_keys(
    conf: Mapping[str, str],
    definitions: Mapping[str, ConfigKey],
    chain: list[Any],
    resolve_transform: TransformResolver,
) -> list[Problem]:
    """A warning for every key nothing declares, with the closest declared key when one is near."""
    known = set(definitions) | set(ALIASES)  # aliases are renamed already: only for suggestions
    for group in ("transforms", "predicates"):
        for name in _names(conf.get(group, "")):
            prefix = f"{group}.{name}."
            known |= {prefix + k for k in ("class", "type", "predicate", "negate")}
            cls_name = conf.get(prefix + "class") or conf.get(prefix + "type") or ""
            try:
                declared = resolve_transform(cls_name).config_def.keys if cls_name else {}
            except ConnectException:
                declared = {}  # reported as an error already
            if not declared:  # a plugin that declares nothing may read anything under its prefix
                known |= {k for k in conf if k.startswith(prefix)}
            known |= {prefix + k for k in declared}
    warnings: list[Problem] = []
    for key in sorted(conf):
        if key in known or key.startswith(_PREFIXES):
            continue
        match = _OPTION.match(key)
        near = closest(key, known)
        if match and match.group(2) not in _names(conf.get(match.group(1), "")):
            group, name = match.group(1), match.group(2)
            message = f"{group}.{name} is not in {group}= ({conf.get(group) or 'empty'})"
            if near and not near.startswith(group + "."):
                near = None
        else:
            message = "unknown key: no part of this connector reads it"
        warnings.append(
            Problem(
                key,
                message,
                code="connect.config.unknown",
                suggestion=f"did you mean {near}?" if near else None,
            )
        )
    return warnings


__all__ = [
    "ALIASES",
    "COMMON_KEYS",
    "ConfigReport",
    "ConnectorSettings",
    "Problem",
    "canonical_keys",
    "check_config",
    "key_definitions",
]

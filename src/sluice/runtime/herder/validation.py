"""Create-time checks of a connector config, shared by every herder: what `start` would refuse is
refused here, with every bad key at once (`sluice.engine.settings` owns the keys).

Decision on unknown keys: a key nothing declares is a **warning** (in the create/update response
under `warnings`, in the validation result, and in the worker's log), not an error. Kafka Connect
tolerates them too, and plugins may read keys they never declare; a close declared key is given as
"did you mean".
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from sluice.engine.settings import ConfigReport, Problem, check_config, key_definitions
from sluice.runtime.herder.api import BadRequest, Conflict
from sluice.runtime.plugins import PluginRegistry, plugin_kind
from sluice.runtime.secrets import password_keys, redact, scrub
from sluice.sdk import (
    ConfigException,
    ConfigKey,
    Connector,
    ConnectorContext,
    InvalidConfig,
    SourceConnector,
    count_problem,
    extras,
    partition_key,
)
from sluice.sdk._config import normalize_config

log = logging.getLogger(__name__)

#: control characters (C0 but tab, DEL, C1, line and paragraph separators): never in a key
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_KEY = "a config key may not hold control characters (newlines, escapes…)"


#: What a herder does to a config before the connector validates it: resolve `${provider:…}`
#: references and check the file paths it names (`file.allowed.dirs`); returns the config as the
#: connector will see it. The report keeps the unresolved values (they are what is stored).
Prepare = Callable[[dict[str, str], type], dict[str, str]]

#: What a herder refuses before anything else looks at a config, as a 400 even where a
#: validation result would list problems per key: a `${provider:…}` reference the worker does
#: not allow (`ConfigProviders.check`). Raises `ConfigException` naming the key.
Screen = Callable[[Mapping[str, str]], None]


def check(
    registry: PluginRegistry,
    config: Mapping[str, Any],
    prepare: Prepare | None = None,
    topic_problem: Callable[[str], str | None] | None = None,
    screen: Screen | None = None,
) -> tuple[ConfigReport, type]:
    """Every problem of `config`, and the connector class. Raises BadRequest only when the
    config cannot be looked at (not a string map, no or unknown `connector.class`) or `screen`
    refuses it. `topic_problem`: the bus's rule for the topic names the config gives."""
    try:
        conf = normalize_config(config)
        if screen is not None:
            screen(conf)
    except ConfigException as exc:
        raise as_bad_request([Problem.of(exc)]) from None
    controls = [
        Problem(k.encode("unicode_escape").decode("ascii"), _CONTROL_KEY)
        for k in conf
        if _CONTROL.search(k)
    ]
    if controls:  # a newline in a key forged lines of the worker's log
        raise as_bad_request(controls)
    name = conf.get("connector.class", "").strip()
    if not name:
        raise as_bad_request([Problem("connector.class", "required key is missing")])
    try:
        cls = registry.connector(name)
    except ConfigException as exc:
        raise as_bad_request([Problem.of(exc)]) from None
    missing = extras.problem(cls.requires, cls.__name__)  # its client library's extra
    if missing is not None:
        raise as_bad_request([Problem("connector.class", missing)])
    report = check_config(
        conf,
        kind=plugin_kind(cls),
        connector_keys=cls.config_def,
        resolve_transform=registry.transform,
        validate=lambda c: _validate(cls, prepare(c, cls) if prepare is not None else c),
        aliases=getattr(cls, "key_aliases", None),
        topic_problem=topic_problem,
    )
    # A client option given as a key of its own (`source.kafka.<option>`) is read, by the
    # client library: the worker's client policy judges it, not the unknown-key warning.
    passed = _client_option_keys(cls, conf)
    report.warnings = [
        w for w in report.warnings if w.key not in passed or w.code != "connect.config.unknown"
    ]
    return report, cls


def _client_option_keys(cls: type[Connector], conf: Mapping[str, str]) -> set[str]:
    try:
        return {o.key for o in cls.client_options(conf) if not o.in_url}
    except ConfigException:
        return set()  # a config the connector cannot read: its validate says why


def _validate(cls: type[Connector], config: dict[str, str]) -> None:
    """The connector's own `validate`, after every key's own `check` (many connectors override
    `validate` without calling the SDK's). Runs on the prepared config: the paths are already
    inside `file.allowed.dirs` and `${…}` references resolved."""
    problems = cls.config_def.problems(config)
    connector = cls()
    # the name it will run under, when the caller gave one (a create's config carries it)
    connector.initialize(ConnectorContext(config.get("name", "")))
    try:
        connector.validate(config)
    except ConfigException as exc:
        seen = {p.key for p in problems}
        problems += [p for p in getattr(exc, "problems", [exc]) if p.key not in seen]
    except Exception:
        if not problems:  # else a bad key is the likelier cause, and what to report
            raise
    if problems:
        raise InvalidConfig(problems) if len(problems) > 1 else problems[0]


def as_bad_request(errors: list[Problem]) -> BadRequest:
    """One 400 carrying every problem; the message lists them (`key: message; …`), the first
    gives the body's `key`, `code` and `suggestion`."""
    first = errors[0]
    message = scrub("; ".join(f"{p.key}: {p.message}" for p in errors))  # never a secret
    return BadRequest(
        message,
        key=first.key,
        suggestion=first.suggestion,
        code=first.code,
        errors=[{**p.as_dict(), "message": scrub(p.message)} for p in errors],
    )


def accepted(
    registry: PluginRegistry,
    name: str,
    config: Mapping[str, Any],
    prepare: Prepare | None = None,
    topic_problem: Callable[[str], str | None] | None = None,
    screen: Screen | None = None,
) -> ConfigReport:
    """The report of a config a herder may store: BadRequest with every error otherwise; the
    warnings are logged here (once, where the config is accepted)."""
    report, _ = check(registry, config, prepare, topic_problem, screen)
    if report.errors:
        raise as_bad_request(report.errors)
    for warning in report.warnings:
        hint = f" ({warning.suggestion})" if warning.suggestion else ""
        log.warning("connector %s: %s: %s%s", name, warning.key, warning.message, hint)
    return report


def is_plan_error(exc: ConfigException) -> bool:
    """True for a config error found only when Spark plans the connector's query (a transform's
    SQL that does not analyse, or drops record columns; transforms on a sink whose topics differ
    in schema): a herder refuses those at create."""
    # `transforms` itself: a sink's transforms that change more than the topic cannot run over
    # topics whose schemas differ (`front_door._check_mixed_sink`), which shows only once the
    # topics' schemas are looked up
    return exc.key == "transforms" or exc.key.startswith(("transforms.", "predicates."))


def definition(name: str, key: ConfigKey | None) -> dict[str, Any]:
    """A key as Kafka Connect's validation result and `/plugin/config` show it."""
    if key is None:
        return {
            "name": name,
            "type": "string",
            "required": False,
            "default_value": None,
            "documentation": "",
        }
    default = None if key.required or key.default in (None, []) else key.default
    return {
        "name": name,
        "type": key.type,
        "required": key.required,
        "default_value": None if default is None else shown_default(default),
        "documentation": key.doc,
    }


def shown_default(value: Any) -> str:
    """A key's default as a user would type it: `true`, not Python's `True`; a list
    comma-separated."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(shown_default(v) for v in value)
    return str(value)


def plugin_keys(cls: type[Connector]) -> list[dict[str, Any]]:
    """The connector's own keys first, then the connector-level keys its kind accepts."""
    own = cls.config_def.keys
    every = key_definitions(plugin_kind(cls), cls.config_def)
    names = [*own, *(k for k in every if k not in own)]
    return [definition(k, every[k]) for k in names]


def validation_result(
    registry: PluginRegistry,
    config: Mapping[str, Any],
    prepare: Prepare | None = None,
    topic_problem: Callable[[str], str | None] | None = None,
    screen: Screen | None = None,
) -> dict[str, Any]:
    """Kafka Connect's validation shape, with every error and warning per key:
    `{"name", "error_count", "warning_count", "configs": [{"definition", "value": {"name",
    "value", "errors", "warnings"}}]}`."""
    report, cls = check(registry, config, prepare, topic_problem, screen)
    shown = redact(report.config, password_keys(cls))
    definitions = key_definitions(plugin_kind(cls), cls.config_def)
    errors: dict[str, list[str]] = {k: [] for k in definitions}
    warnings: dict[str, list[str]] = {}
    for p in report.errors:
        errors.setdefault(p.key, []).append(scrub(_text(p)))
    for p in report.warnings:
        errors.setdefault(p.key, [])
        warnings.setdefault(p.key, []).append(_text(p))
    return {
        "name": f"{cls.__module__}.{cls.__qualname__}",
        "error_count": len(report.errors),
        "warning_count": len(report.warnings),
        "configs": [
            {
                "definition": definition(key, definitions.get(key)),
                "value": {
                    "name": key,
                    "value": shown.get(key),
                    "errors": errs,
                    "warnings": warnings.get(key, []),
                },
            }
            for key, errs in errors.items()
        ],
    }


def _text(p: Problem) -> str:
    return f"{p.key}: {p.message}" + (f" ({p.suggestion})" if p.suggestion else "")


def check_position_keys(
    cls: type[Connector], old: Mapping[str, str], new: Mapping[str, str], has_positions: bool
) -> None:
    """Refuse a changed config whose stored positions mean something else under it: keys the
    connector lists in `position_keys` (e.g. a JDBC source's `mode`) must not change while
    positions are stored."""
    if not has_positions:
        return
    for key in getattr(cls, "position_keys", ()):
        if old.get(key, "") != new.get(key, ""):
            raise Conflict(
                f"{key}: cannot change from {old.get(key)!r} to {new.get(key)!r} while the "
                "connector has stored positions (they were written under the old value)",
                key=key,
                suggestion="stop the connector, reset its offsets (DELETE "
                "/v1/connectors/<name>/offsets), then update it; or create a new connector",
            )


#: The offset of a sink's queue: the runtime keeps it, as the queue offset to read next.
SINK_OFFSET_COUNTS = ("queueOffset",)


def check_offsets(cls: type[Connector] | None, offsets: list[dict[str, Any]]) -> None:
    """BadRequest naming the first offset set by hand that the connector could not resume from
    (a source's `offset_problem`; a sink's queue offset must be an integer ≥ 0)."""
    for i, entry in enumerate(offsets):
        offset = entry["offset"]
        if offset is None or cls is None:
            continue
        if issubclass(cls, SourceConnector):
            why = cls().offset_problem(entry["partition"], offset)
        else:
            why = count_problem(offset, SINK_OFFSET_COUNTS)
        if why is not None:
            raise BadRequest(
                f"offsets[{i}].offset: {why}",
                key=f"offsets[{i}].offset",
                suggestion="see the stored form with GET /v1/connectors/<name>/offsets",
            )


def match_partitions(
    offsets: list[dict[str, Any]], stored: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The offsets entries with each partition matched to a stored one.

    A partition equal to a stored one once its values are compared as text (`"queueId": 4`
    against a stored `"4"`) takes the stored form. When the connector has stored positions, a
    partition that matches none of them is refused (writing it would change nothing the
    connector reads); with none stored, partitions are taken as given.
    """
    if not stored:
        return offsets
    by_text: dict[str, dict[str, Any]] = {}
    for key in stored:
        partition = json.loads(key)
        by_text[_as_text(partition)] = partition
    out = []
    for i, entry in enumerate(offsets):
        partition = entry["partition"]
        if partition_key(partition) in stored:
            out.append(entry)
            continue
        match = by_text.get(_as_text(partition))
        if match is None:
            known = ", ".join(sorted(json.dumps(json.loads(k)) for k in stored)[:5])
            raise BadRequest(
                f"offsets[{i}].partition: {json.dumps(partition)} is none of the connector's "
                f"partitions ({known}{', …' if len(stored) > 5 else ''})",
                key=f"offsets[{i}].partition",
                suggestion="copy the partition from GET /v1/connectors/<name>/offsets",
            )
        out.append({**entry, "partition": match})
    return out


def _as_text(partition: Mapping[str, Any]) -> str:
    return json.dumps({k: str(v) for k, v in partition.items()}, sort_keys=True)


__all__ = [
    "accepted",
    "as_bad_request",
    "check",
    "check_position_keys",
    "definition",
    "is_plan_error",
    "match_partitions",
    "plugin_keys",
    "validation_result",
]

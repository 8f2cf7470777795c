"""Client options: what a connector hands from its config to a client library, and the worker's
policy on them (modelled on Kafka Connect's `connector.client.config.override.policy`).

Several connectors pass options the user typed straight to their client library: the Kafka
connectors' ``source.kafka.<option>`` keys go to librdkafka, a JDBC URL's parameters to libpq or
PyMySQL, a Redis or AMQP URL's query to redis-py or pika. Some such options load native code
(librdkafka's ``plugin.library.paths`` dlopen()s the libraries it names when a client is built,
and validation builds one), run commands (``sasl.kerberos.kinit.cmd``), read files (keys,
certificates, option files) or let a server read the worker's files (MySQL ``local_infile``). A
REST client allowed to create connectors must reach none of that. So:

- a `ClientFamily` is what sluice knows of one client library: the options known to be safe
  (`allowed`: tuning, security protocol, SASL mechanism and credentials, TLS verification), those
  that name a local file (`files`: allowed only inside the worker's `file.allowed.dirs`), those
  sluice sets itself (`reserved`), and those **never** passed whatever the worker's settings
  (`never`: they load code, run commands, or hand the server the worker's files), each with why;
- a `ClientOption` is one option a user typed, with the config key that holds it;
- the worker's `ClientPolicy` (keys `connector.client.config.override.policy` and
  `connector.client.config.override.allowlist`) decides the rest: ``allowlist`` (the default) lets
  through a family's allowed and file options plus the operator's additions (``family:option``
  or ``option``), ``all`` anything but the never and reserved options, ``none`` no option at all.
  File options stay inside `file.allowed.dirs` and value checks (e.g. no shell characters in what
  librdkafka substitutes into its kinit command) apply under every policy.

A connector that passes options through declares them (`Connector.client_options`); the worker
applies its policy to them at create, update and validation, before the connector's own
`validate` opens any client. Where the connector builds its client it calls `refuse_unsafe`
too, which needs no worker setting: a config stored before this policy existed, or one that
reaches a client some other way, still never loads a library.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from sluice.sdk._errors import ConfigException, InvalidConfig
from sluice.sdk._paths import ALLOWED_DIRS_KEY, allowed_dirs, inside

POLICY_KEY = "connector.client.config.override.policy"
ALLOWLIST_KEY = "connector.client.config.override.allowlist"
POLICY_MODES = ("allowlist", "all", "none")

#: Why a value of an option is refused (None: it is fine). Applied under every policy.
ValueCheck = Callable[[str], str | None]


@dataclass(frozen=True, eq=False, repr=False)
class ClientFamily:
    """One client library's pass-through options as sluice judges them (see the module doc).

    `name` is how operators name the family in `connector.client.config.override.allowlist`
    (``kafka:debug``); `library` is how messages name the library."""

    name: str
    library: str
    allowed: frozenset[str]
    #: options naming a local file or folder: allowed only inside `file.allowed.dirs`
    files: frozenset[str] = frozenset()
    #: option → why sluice never passes it, whatever the worker's settings
    never: Mapping[str, str] = field(default_factory=dict)
    #: option → what to do instead: sluice sets it itself (its guarantees depend on it)
    reserved: Mapping[str, str] = field(default_factory=dict)
    #: option → the check of its value
    checks: Mapping[str, ValueCheck] = field(default_factory=dict)
    #: values of a file option that name no file (librdkafka's ``ssl.ca.location=probe``)
    not_files: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: name endings of options that name a file though not listed (so that the ``all`` policy
    #: still keeps them inside `file.allowed.dirs`), and of options never passed (callbacks)
    file_suffixes: tuple[str, ...] = ()
    never_suffixes: tuple[str, ...] = ()

    def __repr__(self) -> str:
        return f"ClientFamily({self.name!r})"

    def reserving(self, reserved: Mapping[str, str]) -> ClientFamily:
        """This family with more options that a connector sets itself (option → what to do)."""
        return replace(self, reserved={**self.reserved, **reserved})

    def never_reason(self, name: str) -> str | None:
        """Why `name` is never passed to the library, or None."""
        reason = self.never.get(name)
        if reason is None and name.endswith(self.never_suffixes or ("\0",)):
            reason = "a callback of the client's API, not an option a config can set"
        return reason

    def names_file(self, name: str) -> bool:
        return name in self.files or name.endswith(self.file_suffixes or ("\0",))


@dataclass(frozen=True)
class ClientOption:
    """One option a user typed that a connector hands to a client library.

    `key` is the config key the user typed: ``source.kafka.plugin.library.paths`` for an option
    given as a key of its own, ``connection.url`` for a parameter inside a URL (`in_url`);
    `name` is the library's name of the option."""

    family: ClientFamily
    key: str
    name: str
    value: str
    in_url: bool = False

    def error(self, why: str, suggestion: str | None = None) -> ConfigException:
        """A `ConfigException` naming the key the user typed (and the URL parameter)."""
        where = f"URL parameter {self.name!r}: " if self.in_url else ""
        return ConfigException(self.key, where + why, suggestion=suggestion)


def prefixed_options(
    family: ClientFamily, config: Mapping[str, str], prefix: str
) -> list[ClientOption]:
    """The options given as ``<prefix><option>`` keys (e.g. ``source.kafka.``)."""
    return [
        ClientOption(family, key, key[len(prefix) :], value)
        for key, value in config.items()
        if key.startswith(prefix) and len(key) > len(prefix)
    ]


def url_options(
    family: ClientFamily, key: str, params: Iterable[tuple[str, str]]
) -> list[ClientOption]:
    """The parameters of the URL that config key `key` holds (name, value pairs)."""
    return [ClientOption(family, key, name, value, in_url=True) for name, value in params]


def _unsafe(option: ClientOption) -> ConfigException | None:
    """The problem of `option` that no worker setting can lift: a never option, a bad value."""
    family, name = option.family, option.name
    reason = family.never_reason(name)
    if reason is not None:
        return option.error(
            f"{family.library} is never given this option: {reason}",
            suggestion="remove it; no worker setting allows it",
        )
    check = family.checks.get(name)
    why = check(option.value) if check is not None else None
    if why is not None:
        return option.error(f"{option.value!r} is refused: {why}")
    return None


def refuse_unsafe(options: Iterable[ClientOption]) -> None:
    """Raise for an option no policy allows (one that loads code, runs a command, or a value
    its check refuses). Needs no worker setting: call it where the client is built."""
    problems = [p for p in map(_unsafe, options) if p is not None]
    if problems:
        raise _one_per_key(problems)


@dataclass(frozen=True)
class ClientPolicy:
    """The worker's rule for pass-through client options (see the module doc)."""

    mode: str = "allowlist"
    #: the operator's additions to the allowlists: ``family:option`` or ``option`` (any family)
    extra: frozenset[str] = frozenset()
    #: `file.allowed.dirs` as real paths; () = no limit
    allowed_dirs: tuple[str, ...] = ()

    @staticmethod
    def of(props: Mapping[str, str]) -> ClientPolicy:
        """The policy a worker's properties set; a bad value is a `ConfigException` naming it."""
        mode = props.get(POLICY_KEY, "allowlist").strip().lower() or "allowlist"
        if mode not in POLICY_MODES:
            raise ConfigException(
                POLICY_KEY, f"must be one of {', '.join(POLICY_MODES)}, got {mode!r}"
            )
        extra = frozenset(
            e.strip()
            for e in props.get(ALLOWLIST_KEY, "").replace(";", ",").split(",")
            if e.strip()
        )
        for entry in extra:
            if not re.fullmatch(r"(?:[a-z0-9_-]+:)?[^:\s]+", entry):
                raise ConfigException(
                    ALLOWLIST_KEY,
                    f"{entry!r} is not an option name or family:option (e.g. kafka:debug)",
                )
        return ClientPolicy(mode, extra, allowed_dirs(props.get(ALLOWED_DIRS_KEY, "")))

    def _listed(self, option: ClientOption) -> bool:
        family, name = option.family, option.name
        if self.mode == "all":
            return True
        return (
            name in family.allowed
            or name in family.files
            or name in self.extra
            or f"{family.name}:{name}" in self.extra
        )

    def problem(self, option: ClientOption) -> ConfigException | None:
        """Why `option` may not reach its library on this worker, or None."""
        unsafe = _unsafe(option)
        if unsafe is not None:
            return unsafe
        family, name = option.family, option.name
        instead = family.reserved.get(name)
        if instead is not None:
            return option.error(f"sluice sets this {family.library} option itself; {instead}")
        if self.mode == "none":
            return option.error(
                f"this worker passes no option to {family.library} ({POLICY_KEY}=none)",
                suggestion=f"remove it, or ask the operator to set {POLICY_KEY}=allowlist",
            )
        if not self._listed(option):
            return option.error(
                f"not an option this worker passes to {family.library} (it is not in the "
                "allowlist of options known to be safe)",
                suggestion=f"remove it, or ask the operator to add {family.name}:{name} to "
                f"{ALLOWLIST_KEY} (or to set {POLICY_KEY}=all)",
            )
        literal = option.value.strip() in family.not_files.get(name, frozenset())
        confined = family.names_file(name) and self.allowed_dirs and not literal
        if confined and not inside(option.value, self.allowed_dirs):
            return option.error(
                f"{option.value!r} is outside the folders this worker allows "
                f"({ALLOWED_DIRS_KEY}={','.join(self.allowed_dirs)})",
                suggestion=f"use a file under {self.allowed_dirs[0]}, or ask the operator "
                f"to add its folder to {ALLOWED_DIRS_KEY}",
            )
        return None

    def problems(self, options: Iterable[ClientOption]) -> list[ConfigException]:
        """One `ConfigException` per config key with refused options (a URL's refused
        parameters together), in the order found."""
        found = [p for p in map(self.problem, options) if p is not None]
        if not found:
            return []
        merged = _one_per_key(found)
        return list(getattr(merged, "problems", [merged]))

    def check(self, options: Iterable[ClientOption]) -> None:
        """Raise the problems of `options`: one `ConfigException`, or `InvalidConfig`."""
        found = self.problems(options)
        if found:
            raise found[0] if len(found) == 1 else InvalidConfig(found)


def _one_per_key(problems: list[ConfigException]) -> ConfigException:
    """`problems` as one exception: a key with several problems (a URL's parameters) gets one
    message listing them; several keys make an `InvalidConfig`."""
    by_key: dict[str, list[ConfigException]] = {}
    for p in problems:
        by_key.setdefault(p.key, []).append(p)
    merged = []
    for key, same in by_key.items():
        if len(same) == 1:
            merged.append(same[0])
            continue
        prefix = f"{key}: "
        text = "; ".join(p.message.removeprefix(prefix) for p in same)
        merged.append(ConfigException(key, text, suggestion=same[0].suggestion))
    return merged[0] if len(merged) == 1 else InvalidConfig(merged)


__all__ = [
    "ALLOWLIST_KEY",
    "POLICY_KEY",
    "POLICY_MODES",
    "ClientFamily",
    "ClientOption",
    "ClientPolicy",
    "ValueCheck",
    "prefixed_options",
    "refuse_unsafe",
    "url_options",
]

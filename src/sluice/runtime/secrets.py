"""Secrets in connector configs: config providers (Kafka's KIP-297) and masking.

A connector config may hold references instead of secrets::

    connection.password=${env:PG_PASSWORD}
    connection.password=${file:/etc/sluice/db.properties:password}

The worker config names the providers it enables (Kafka's keys)::

    config.providers=env,file
    config.providers.file.class=FileConfigProvider    # optional (Kafka's full name works too)

The stores keep the references; they are resolved only when the connector's query is built
(`ConfigProviders.resolve`), and what was resolved is never shown: REST answers keep each
reference as written and show every other value of a key declared `type="password"` as
`PASSWORD_MASK` (`redact`); log lines and failure traces have every resolved secret replaced by the
mask (`scrub`, `install_log_scrubber`).
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Protocol

from sluice.sdk import PASSWORD_MASK, ConfigException

log = logging.getLogger(__name__)

#: `${provider:[path:]key}`, as Kafka's ConfigTransformer reads it
REFERENCE = re.compile(r"\$\{([^}:]*?):(?:([^}]*?):)?([^}]*?)\}")


class ConfigProvider(Protocol):
    """Gives the values of `keys` found at `path` (`path` is "" when the reference has none)."""

    def get(self, path: str, keys: set[str]) -> dict[str, str]: ...


class EnvProvider:
    """`${env:NAME}`: the worker process's environment variable NAME."""

    def __init__(self, params: Mapping[str, str] | None = None) -> None:
        self.params = dict(params or {})

    def get(self, path: str, keys: set[str]) -> dict[str, str]:
        missing = sorted(k for k in keys if k not in os.environ)
        if missing:
            raise LookupError(f"environment variable {missing[0]} is not set on this worker")
        return {k: os.environ[k] for k in keys}


class FileProvider:
    """`${file:/path/to/file.properties:key}`: the `key=value` line of a properties file."""

    def __init__(self, params: Mapping[str, str] | None = None) -> None:
        self.params = dict(params or {})

    def get(self, path: str, keys: set[str]) -> dict[str, str]:
        # imported here: worker_config imports the bus, which this module does not need
        from sluice.runtime.worker_config import parse_properties

        if not path:
            raise LookupError("a file reference needs a path: ${file:/path/to/file:key}")
        try:
            with open(path, encoding="utf-8") as f:
                props = parse_properties(f.read(), path)
        except OSError as exc:
            raise LookupError(f"cannot read {path}: {exc.strerror}") from None
        missing = sorted(k for k in keys if k not in props)
        if missing:
            raise LookupError(f"{path} has no key {missing[0]!r}")
        return {k: props[k] for k in keys}


#: built-in providers by the names users write in `config.providers.<name>.class`
_BUILTIN: dict[str, type] = {
    "env": EnvProvider,
    "file": FileProvider,
    "EnvVarConfigProvider": EnvProvider,
    "FileConfigProvider": FileProvider,
    "org.apache.kafka.common.config.provider.EnvVarConfigProvider": EnvProvider,
    "org.apache.kafka.common.config.provider.FileConfigProvider": FileProvider,
    "sluice.runtime.secrets.EnvProvider": EnvProvider,
    "sluice.runtime.secrets.FileProvider": FileProvider,
}

PROVIDERS_KEY = "config.providers"


def is_provider_key(key: str) -> bool:
    """True for `config.providers` and its `config.providers.<name>.*` keys."""
    return key == PROVIDERS_KEY or key.startswith(PROVIDERS_KEY + ".")


def _load_class(name: str, key: str) -> type:
    if name in _BUILTIN:
        return _BUILTIN[name]
    module, _, attr = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigException(
            key,
            f"cannot load config provider class {name!r}: {exc}",
            suggestion="use env, file, or a Python class path (module.Class)",
        ) from None


class ConfigProviders:
    """The providers a worker enabled; resolves the references of a connector config."""

    def __init__(self, providers: Mapping[str, ConfigProvider] | None = None) -> None:
        self.providers = dict(providers or {})

    @classmethod
    def from_worker(cls, props: Mapping[str, str]) -> ConfigProviders:
        """From the worker config's `config.providers=a,b` and `config.providers.a.class=…`
        (`.param.<k>=v` keys are given to the provider's constructor as a dict)."""
        names = [n.strip() for n in props.get(PROVIDERS_KEY, "").split(",") if n.strip()]
        providers: dict[str, ConfigProvider] = {}
        for name in names:
            key = f"{PROVIDERS_KEY}.{name}.class"
            class_name = props.get(key, "").strip() or name
            if class_name not in _BUILTIN and "." not in class_name:
                raise ConfigException(
                    key,
                    f"provider {name!r} has no class",
                    suggestion=f"set {key} (built-ins: env, file)",
                )
            prefix = f"{PROVIDERS_KEY}.{name}.param."
            params = {k[len(prefix) :]: v for k, v in props.items() if k.startswith(prefix)}
            providers[name] = _load_class(class_name, key)(params)
        return cls(providers)

    def resolve(
        self, config: Mapping[str, str], password_keys: Iterable[str] = ()
    ) -> dict[str, str]:
        """`config` with every reference to an enabled provider replaced by its value.

        A reference to a provider the worker did not enable stays as written (as in Kafka); one
        that cannot be resolved is a `ConfigException` naming the key (never the value). Every
        resolved value, and every literal value of a password key, is remembered so that logs
        and traces never show it (`scrub`).
        """
        out: dict[str, str] = {}
        for key, value in config.items():
            out[key] = self._resolve_value(key, value)
            if out[key] != value:
                _SECRETS.add(out[key])
        for key in password_keys:
            if key in out:
                _SECRETS.add(out[key])
        return out

    def _resolve_value(self, key: str, value: str) -> str:
        if "${" not in value:
            return value

        def one(match: re.Match[str]) -> str:
            provider, path, name = match.group(1), match.group(2) or "", match.group(3)
            if provider not in self.providers:
                return match.group(0)
            try:
                return self.providers[provider].get(path, {name})[name]
            except LookupError as exc:
                raise ConfigException(key, f"cannot resolve {match.group(0)}: {exc}") from None
            except Exception as exc:  # a provider plugin failed: still this key's problem
                raise ConfigException(
                    key, f"cannot resolve {match.group(0)}: {type(exc).__name__}"
                ) from None

        return REFERENCE.sub(one, value)


def password_keys(connector_class: type) -> list[str]:
    """The keys a connector class declares `type="password"`."""
    config_def = getattr(connector_class, "config_def", None)
    keys = getattr(config_def, "keys", {})
    return [name for name, key in keys.items() if key.type == "password"]


def has_reference(value: str) -> bool:
    """True if `value` holds a `${provider:…}` reference."""
    return REFERENCE.search(value) is not None


def redact(config: Mapping[str, str], password_keys: Iterable[str]) -> dict[str, str]:
    """`config` fit to show: each password key's value masked unless it is a reference (which
    says where the secret is, not what it is)."""
    out = dict(config)
    for key in password_keys:
        value = out.get(key)
        if value and not has_reference(value):
            out[key] = PASSWORD_MASK
    return out


def keep_masked(
    new: Mapping[str, str], old: Mapping[str, str] | None, password_keys: Iterable[str]
) -> dict[str, str]:
    """A config PUT back as it was shown (`********` in a password key) keeps the stored secret."""
    out = dict(new)
    if old is None:
        return out
    for key in password_keys:
        if out.get(key) == PASSWORD_MASK and key in old:
            out[key] = old[key]
    return out


def restore_references(
    written: Mapping[str, str], resolved: Mapping[str, str], derived: Mapping[str, str]
) -> dict[str, str]:
    """A config `derived` from the resolved one (a task config) with every resolved value put
    back as the reference the user wrote, and any other known secret masked, so it can be
    stored and shown."""
    out: dict[str, str] = {}
    for key, value in derived.items():
        if key in written and written[key] != resolved.get(key) and value == resolved.get(key):
            out[key] = written[key]
        else:
            out[key] = scrub(value) if isinstance(value, str) else value
    return out


class _SecretSet:
    """The secrets this process has resolved or been given (longest first when scrubbing)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: tuple[str, ...] = ()

    def add(self, value: str) -> None:
        # one- and two-character values would mask half of every log line: not worth it
        if len(value) < 3 or value == PASSWORD_MASK or value in self._values:
            return
        with self._lock:
            self._values = tuple(sorted({*self._values, value}, key=len, reverse=True))

    def scrub(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, PASSWORD_MASK)
        return text


_SECRETS = _SecretSet()


def scrub(text: str) -> str:
    """`text` with every secret this process knows replaced by `PASSWORD_MASK`."""
    return _SECRETS.scrub(text)


class ScrubFilter(logging.Filter):
    """A handler filter that masks known secrets in the message and the traceback of a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
        return True


_FILTER = ScrubFilter()


def install_log_scrubber() -> None:
    """Put `ScrubFilter` on every handler of the root logger and of the loggers configured so
    far (uvicorn's have their own); calling it again adds it to new handlers only."""
    loggers: list[logging.Logger] = [logging.getLogger()]
    loggers += [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    for logger in loggers:
        for handler in logger.handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)

"""Secrets in connector configs: config providers (Kafka's KIP-297) and masking.

A connector config may hold references instead of secrets::

    connection.password=${env:SLUICE_SECRET_PG_PASSWORD}
    connection.password=${file:/etc/sluice/secrets/db.properties:password}

The worker config names the providers it enables (Kafka's keys) and what each may read (Kafka's
KIP-993 `allowed.paths`; the env provider's `allowlist.pattern`)::

    config.providers=env,file
    config.providers.file.class=FileConfigProvider    # optional (Kafka's full name works too)
    config.providers.file.param.allowed.paths=/etc/sluice/secrets
    config.providers.env.param.allowlist.pattern=SLUICE_SECRET_.*

Unlike Kafka (whose providers read any file and any variable unless told otherwise), a built-in
provider reads nothing its parameter does not allow: a REST client that may create connectors
must not read `/etc/shadow` or the worker's environment. A reference outside is refused when a
config is created, updated or validated (`ConfigProviders.check`: a 400 naming the key that
holds it, with one message whether the file or variable exists or not) and, for configs stored
before, when the query is built.

The stores keep the references; they are resolved only when the connector's query is built
(`ConfigProviders.resolve`), and what was resolved is never shown: REST answers keep each
reference as written, show every other value of a key declared `type="password"` as
`PASSWORD_MASK`, and mask the password of every URL in any value
(`postgresql://u:********@db`, `redact`); log lines and failure traces have every resolved
secret and every literal password replaced by the mask (`scrub`, `install_log_scrubber`).
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any, Protocol
from urllib.parse import unquote

from sluice.runtime.properties_file import parse_properties
from sluice.sdk import PASSWORD_MASK, ConfigException

log = logging.getLogger(__name__)

#: `${provider:[path:]key}`, as Kafka's ConfigTransformer reads it
REFERENCE = re.compile(r"\$\{([^}:]*?):(?:([^}]*?):)?([^}]*?)\}")


class ConfigProvider(Protocol):
    """Gives the values of `keys` found at `path` (`path` is "" when the reference has none)."""

    def get(self, path: str, keys: set[str]) -> dict[str, str]: ...


class EnvProvider:
    """`${env:NAME}`: the worker process's environment variable NAME, when NAME matches the
    `allowlist.pattern` parameter (a regular expression, whole name; none set: no variable)."""

    #: the parameter (`config.providers.<name>.param.<it>`) that says what may be read
    allow_param = "allowlist.pattern"

    def __init__(self, params: Mapping[str, str] | None = None) -> None:
        self.params = dict(params or {})
        pattern = self.params.get(self.allow_param, "").strip()
        try:
            self.allowlist = re.compile(pattern) if pattern else None
        except re.error as exc:
            raise ConfigException(self.allow_param, f"not a regular expression: {exc}") from None

    def allows(self, path: str, key: str) -> bool:
        """Whether `${env:key}` may be read (decided on the name alone, never on the value)."""
        return self.allowlist is not None and self.allowlist.fullmatch(key) is not None

    def get(self, path: str, keys: set[str]) -> dict[str, str]:
        refused = sorted(k for k in keys if not self.allows(path, k))
        if refused:
            raise LookupError(f"environment variable {refused[0]} is not allowed")
        missing = sorted(k for k in keys if k not in os.environ)
        if missing:
            raise LookupError(f"environment variable {missing[0]} is not set on this worker")
        return {k: os.environ[k] for k in keys}


class FileProvider:
    """`${file:/path/to/file.properties:key}`: the `key=value` line of a properties file under
    one of the `allowed.paths` (comma-separated absolute files or folders, symlinks resolved;
    none set: no file)."""

    allow_param = "allowed.paths"

    def __init__(self, params: Mapping[str, str] | None = None) -> None:
        self.params = dict(params or {})
        allowed = []
        for raw in self.params.get(self.allow_param, "").split(","):
            path = raw.strip()
            if not path:
                continue
            if not os.path.isabs(path):
                raise ConfigException(
                    self.allow_param, f"{path!r} is not an absolute path"
                ) from None
            allowed.append(os.path.realpath(path))
        self.allowed = tuple(allowed)
        #: files never read whatever `allowed.paths` says (the worker's own credentials)
        self.denied: frozenset[str] = frozenset()

    def allows(self, path: str, key: str) -> bool:
        """Whether `path` lies in an allowed file or folder once symlinks and `..` are resolved.
        Decided on the path alone: whether the file exists never changes the answer."""
        if not path or not os.path.isabs(path):
            return False
        real = os.path.realpath(path)
        if real in self.denied:
            return False
        return any(real == a or real.startswith(a.rstrip(os.sep) + os.sep) for a in self.allowed)

    def get(self, path: str, keys: set[str]) -> dict[str, str]:
        if not path:
            raise LookupError("a file reference needs a path: ${file:/path/to/file:key}")
        if not self.allows(path, ""):
            raise LookupError(f"{path} is not in an allowed path")
        real = os.path.realpath(path)  # what was checked is what is opened
        try:
            with open(real, encoding="utf-8") as f:
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


#: worker keys naming files no provider may read, whatever its allowed paths say
WORKER_PRIVATE_FILES = ("rest.auth.file", "rest.tls.key")


class ConfigProviders:
    """The providers a worker enabled; resolves the references of a connector config."""

    def __init__(self, providers: Mapping[str, ConfigProvider] | None = None) -> None:
        self.providers = dict(providers or {})

    @classmethod
    def from_worker(cls, props: Mapping[str, str]) -> ConfigProviders:
        """From the worker config's `config.providers=a,b` and `config.providers.a.class=…`
        (`.param.<k>=v` keys are given to the provider's constructor as a dict; a bad one is a
        `ConfigException` naming the worker key)."""
        names = [n.strip() for n in props.get(PROVIDERS_KEY, "").split(",") if n.strip()]
        private = frozenset(
            os.path.realpath(props[k]) for k in WORKER_PRIVATE_FILES if props.get(k, "").strip()
        )
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
            try:
                provider = _load_class(class_name, key)(params)
            except ConfigException as exc:  # a built-in's parameter: name the worker key
                if exc.key.startswith(PROVIDERS_KEY):
                    raise
                raise ConfigException(
                    prefix + exc.key, exc.message.split(": ", 1)[-1], suggestion=exc.suggestion
                ) from None
            if isinstance(provider, FileProvider):
                provider.denied = private
            providers[name] = provider
        return cls(providers)

    def refusal(self, provider: str, path: str, name: str) -> str | None:
        """Why `${provider:path:name}` may not be read (None: it may, or the provider has no
        rule of its own). The text names the worker key to change, never what exists."""
        found = self.providers.get(provider)
        allows = getattr(found, "allows", None)
        if allows is None or allows(path, name):
            return None
        param = getattr(found, "allow_param", "")
        where = f"{PROVIDERS_KEY}.{provider}.param.{param}"
        if isinstance(found, EnvProvider):
            target = f"variable {name}"
        else:
            target = f"path {path or '(none)'}"
        return f"the worker does not allow this {target} ({where})"

    def check(self, config: Mapping[str, str]) -> None:
        """Refuse (`ConfigException` naming the key) a reference that an enabled provider may
        not read. Nothing is read: this is what create, update and validate run first, so the
        answer is the same whether the file or variable exists or not."""
        for key, value in config.items():
            if not isinstance(value, str) or "${" not in value:
                continue
            for match in REFERENCE.finditer(value):
                provider, path, name = match.group(1), match.group(2) or "", match.group(3)
                why = self.refusal(provider, path, name)
                if why is not None:
                    raise ConfigException(
                        key,
                        f"{match.group(0)} is refused: {why}",
                        suggestion="use a secret the operator put where the worker allows "
                        "(docs/operations.md, Secrets)",
                    )

    def resolve(
        self, config: Mapping[str, str], password_keys: Iterable[str] = ()
    ) -> dict[str, str]:
        """`config` with every reference to an enabled provider replaced by its value.

        A reference to a provider the worker did not enable stays as written (as in Kafka); one
        that cannot be resolved, or that the provider may not read (`check`), is a
        `ConfigException` naming the key (never the value). Every resolved value, every literal
        value of a password key and every password inside a URL is remembered so that logs and
        traces never show it (`scrub`).
        """
        self.check(config)
        out: dict[str, str] = {}
        for key, value in config.items():
            out[key] = self._resolve_value(key, value)
            if out[key] != value:
                _SECRETS.add(out[key])
            for secret in url_passwords(out[key]):
                _SECRETS.add(secret)
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


#: The credentials of a URL anywhere in a value (`postgresql://u:pw@db`, `redis://:pw@h`,
#: `jdbc:mysql://u:pw@h`, each URL of `nats://a:b@h1,nats://c:d@h2`): scheme, user, password.
_URL_CREDENTIALS = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://(?P<user>[^\s/@:?#,;]*))"
    r"(?::(?P<pw>[^\s/@?#]*))?@"
)
#: A password given as a URL parameter (`?password=…`, `;password=…`, `&pwd=…`).
_URL_PARAM = re.compile(r"(?i)(?P<head>[?&;](?:password|passwd|pwd)=)(?P<pw>[^&;#\s,]*)")
#: Schemes whose user part alone is a secret (NATS' `nats://TOKEN@host`).
_TOKEN_SCHEMES = ("nats://", "tls://", "nats+tls://")


def url_passwords(value: str) -> list[str]:
    """The literal passwords (and NATS tokens) of the URLs in `value`; references excluded."""
    found = []
    for match in _URL_CREDENTIALS.finditer(value):
        secret = match.group("pw")
        if secret is None and match.group("head").lower().startswith(_TOKEN_SCHEMES):
            secret = match.group("user")
        if secret and "${" not in secret:
            found += [secret, unquote(secret)]
    found += [m.group("pw") for m in _URL_PARAM.finditer(value) if "${" not in m.group("pw")]
    return [s for s in found if s]


def mask_url_credentials(value: str) -> str:
    """`value` with the password of each URL in it masked (a reference is kept as written)."""
    if "@" not in value and "=" not in value:
        return value

    def authority(match: re.Match[str]) -> str:
        pw = match.group("pw")
        if pw is None:
            token = match.group("head").lower().startswith(_TOKEN_SCHEMES)
            user = match.group("user")
            if token and user and "${" not in user:
                return match.group("head")[: -len(user)] + PASSWORD_MASK + "@"
            return match.group(0)
        if not pw or "${" in pw:
            return match.group(0)
        return f"{match.group('head')}:{PASSWORD_MASK}@"

    def param(match: re.Match[str]) -> str:
        pw = match.group("pw")
        if not pw or "${" in pw:
            return match.group(0)
        return match.group("head") + PASSWORD_MASK

    return _URL_PARAM.sub(param, _URL_CREDENTIALS.sub(authority, value))


def _shown(value: str, is_password: bool) -> str:
    if is_password:
        return PASSWORD_MASK if value and not has_reference(value) else value
    return mask_url_credentials(value)


def redact(config: Mapping[str, str], password_keys: Iterable[str]) -> dict[str, str]:
    """`config` fit to show: each password key's value masked unless it is a reference (which
    says where the secret is, not what it is), and the password of every URL in any other
    value masked. The one place configs are masked: every REST route, and so the CLI and the
    console, shows configs through it."""
    secret_keys = set(password_keys)
    return {k: _shown(v, k in secret_keys) if isinstance(v, str) else v for k, v in config.items()}


def keep_masked(
    new: Mapping[str, str], old: Mapping[str, str] | None, password_keys: Iterable[str]
) -> dict[str, str]:
    """A config PUT back as it was shown (`********` in a password key or in a URL) keeps the
    stored secret."""
    out = dict(new)
    if old is None:
        return out
    secret_keys = set(password_keys)
    for key, value in new.items():
        before = old.get(key)
        if (
            isinstance(value, str)
            and isinstance(before, str)
            and value != before
            and PASSWORD_MASK in value
            and (
                (value == PASSWORD_MASK and key in secret_keys)
                or _shown(before, key in secret_keys) == value
            )
        ):
            out[key] = before
    return out


def restore_references(
    written: Mapping[str, str], resolved: Mapping[str, str], derived: Mapping[str, str]
) -> dict[str, str]:
    """A config `derived` from the resolved one (a task config) with every resolved value put
    back as the reference the user wrote and any other known secret masked, so it can be
    stored (what is shown of it goes through `redact`). A value the user wrote as it is stays
    as it is: a task started from the stored config (a lag probe) gets the same literal."""
    out: dict[str, str] = {}
    for key, value in derived.items():
        if key in written and value == written[key]:
            out[key] = value
        elif key in written and written[key] != resolved.get(key) and value == resolved.get(key):
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


def scrub_data(data: Any) -> Any:
    """`data` (JSON-like: dicts, lists, strings) with `scrub` applied to every string in it,
    keys included: a push sink's target names are URLs, secrets in their paths too."""
    if isinstance(data, str):
        return scrub(data)
    if isinstance(data, dict):
        return {scrub_data(k): scrub_data(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [scrub_data(v) for v in data]
    return data


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

"""Every password-like key of every connector class is declared `type="password"`, so that the
REST faces, the console and the CLI mask its value (`sluice.runtime.secrets.redact`)."""

from __future__ import annotations

import re

from sluice.runtime.plugins import default_registry

#: what names a secret: a password, a secret, a token, credentials, an API key's value
SECRET = re.compile(r"(password|passwd|secret|token|credential|apikey\.value)", re.IGNORECASE)
#: what names something about a secret, not the secret (an API key's header name)
NOT_SECRET = re.compile(r"(header|file|path|enable)$", re.IGNORECASE)


def test_every_password_like_key_is_declared_a_password() -> None:
    registry = default_registry()
    classes = [
        registry.connector(p.class_name) for p in registry.plugins() if p.type in ("source", "sink")
    ]
    assert len(classes) > 20  # the built-ins were found
    clear = [
        f"{cls.__name__}: {name}"
        for cls in classes
        for name, key in getattr(getattr(cls, "config_def", None), "keys", {}).items()
        if SECRET.search(name) and not NOT_SECRET.search(name) and key.type != "password"
    ]
    assert clear == [], clear


def test_the_cdc_password_keys_are_masked_in_a_shown_config() -> None:
    from sluice.connectors.cdc import MySqlCdcSourceConnector, PostgresCdcSourceConnector
    from sluice.runtime.secrets import password_keys, redact

    for cls in (MySqlCdcSourceConnector, PostgresCdcSourceConnector):
        config = {"connection.password": "s3cret", "database.password": "hunter2", "x": "y"}
        shown = redact(config, password_keys(cls))
        assert shown["connection.password"] != "s3cret" and shown["database.password"] != "hunter2"
        assert shown["x"] == "y"

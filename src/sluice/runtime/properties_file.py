"""The worker's `.properties` files: the worker config and the files a `${file:…}` reference
names, read by java.util.Properties' rules (`sluice._properties`), with errors that name the
file and the line as the user typed them."""

from __future__ import annotations

from sluice import _properties
from sluice.sdk import ConfigException


def parse_properties(text: str, source: str = "config") -> dict[str, str]:
    """The entries of a ``.properties`` text; an error names ``source`` and the line
    (``w.conf:2: …``)."""
    try:
        return _properties.parse_properties(text)
    except _properties.PropertiesError as exc:
        raise ConfigException(f"{source}:{exc.line}", exc.reason) from None


def read_properties(path: str) -> dict[str, str]:
    """The keys of the worker config file at `path` (for the parts of a worker above the
    runtime that read keys of their own, as the REST layer reads `rest.*`)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigException("-c", f"cannot read worker config {path!r}: {exc}") from None
    return parse_properties(text, path)

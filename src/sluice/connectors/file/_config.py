"""The file connectors' configuration: the keys of the source (`SOURCE_CONFIG`: `filename`, the
file to follow, and `connect.topicname`) and of the sink (`SINK_CONFIG`: `filename`, the file to
append to, and `connect.topicnames`). Each `filename` is checked when the connector is created:
readable for the source, writable for the sink.
"""

from __future__ import annotations

from sluice.connectors.file import _lines
from sluice.sdk import ConfigDef, ConfigKey

SOURCE_CONFIG = ConfigDef(
    ConfigKey("filename", type="path", check=_lines.unreadable, doc="path of the file to read"),
    ConfigKey("connect.topicname", doc="topic the lines are written to"),
)

SINK_CONFIG = ConfigDef(
    ConfigKey(
        "filename", type="path", check=_lines.unwritable, doc="path of the file to append to"
    ),
    ConfigKey("connect.topicnames", type="list", doc="topics to read, separated by , or ;"),
)

"""File source and sink: the RocketMQ Connect sample connectors, exactly-once, and the SDK's
reference connector (keys in `_config.py`; `source.py`, `sink.py`; the fast paths are private
in `_lines.py`).

Source keys: `filename` (the file to follow), `connect.topicname` (the topic to write).
Sink keys: `filename` (the file to append to), `connect.topicnames` (topics to read, `,` or `;`).

Example (library level; over REST the same maps are the request bodies, see docs/sdk.md)::

    runner = ConnectorRunner(build_session(), "/var/lib/sluice")
    runner.start("file-source", {
        "connector.class": "FileSourceConnector",
        "filename": "/tmp/in.txt", "connect.topicname": "lines"})
    runner.start("file-sink", {
        "connector.class": "FileSinkConnector",
        "filename": "/tmp/out.txt", "connect.topicnames": "lines"})

Every line of the source (up to and excluding its `\\n`) becomes one STRING record, in order; the
sink writes each record's value followed by `\\n`, so a single source file arrives byte-identical.
"""

from sluice.connectors.file.sink import FileSinkConnector, FileSinkTask
from sluice.connectors.file.source import FileSourceConnector, FileSourceTask

__all__ = ["FileSinkConnector", "FileSinkTask", "FileSourceConnector", "FileSourceTask"]

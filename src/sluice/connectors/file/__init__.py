"""File source and sink: the RocketMQ Connect sample connectors, exactly-once.

Source keys: `filename` (the file to follow), `connect.topicname` (the topic to write).
Sink keys: `filename` (the file to append to), `connect.topicnames` (topics to read, `,` or `;`).

Example (library level)::

    runner.start_connector("file-source", {
        "connector.class": "FileSourceConnector",
        "filename": "/tmp/in.txt", "connect.topicname": "lines"})
    runner.start_connector("file-sink", {
        "connector.class": "FileSinkConnector",
        "filename": "/tmp/out.txt", "connect.topicnames": "lines"})

Every line of the source (up to and excluding its `\\n`) becomes one STRING record, in order; the
sink writes each record's value followed by `\\n`, so a single source file arrives byte-identical.
"""

from sluice.connectors.file.sink import FileSinkConnector, FileSinkTask
from sluice.connectors.file.source import FileSourceConnector, FileSourceTask

__all__ = ["FileSinkConnector", "FileSinkTask", "FileSourceConnector", "FileSourceTask"]

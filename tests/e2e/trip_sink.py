"""A plugin for worker processes (written into their `pluginPaths`): `TrippingFileSink`, the file
sink whose next micro-batch fails once, with a `RetriableException`, each time the file named by
its `trip.file` key appears (it renames it `<name>.tripped`): a query that dies when a test says
so, as when a connection drops."""

from __future__ import annotations

PLUGIN = '''
from pathlib import Path

from sluice.connectors.file.sink import FileSinkConnector, FileSinkTask
from sluice.sdk import RetriableException


class _TrippingTask(FileSinkTask):
    def start(self, config):
        super().start(config)
        self.trip = Path(config["trip.file"])

    def _trip(self):
        try:  # each time the file appears, one batch fails (a connection that dropped)
            self.trip.rename(self.trip.with_name(self.trip.name + ".tripped"))
        except FileNotFoundError:
            return
        raise RetriableException(f"{self.trip.name}: the connection dropped (a trip wire)")

    def put(self, records):
        self._trip()
        super().put(records)

    def put_batch(self, batch):
        self._trip()
        super().put_batch(batch)


class TrippingFileSink(FileSinkConnector):
    """The file sink, whose next batch fails once each time its `trip.file` appears."""

    task_class = _TrippingTask
'''

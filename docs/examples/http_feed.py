"""HttpFeedSource: a JSON feed (`GET <feed.url>?after=<id>&limit=<n>` lists the first n items
with an integer `id` above id, in order) into a topic. Re-readable, so exactly-once; one task."""

import json
import urllib.parse
import urllib.request

from sluice.sdk import (
    ConfigDef,
    ConfigKey,
    ConnectException,
    ConnectRecord,
    ReplayableSourceTask,
    RetriableException,
    SourceConnector,
)

CONFIG = ConfigDef(
    ConfigKey("feed.url", doc="URL of the feed"),
    ConfigKey("connect.topicname", doc="topic the items are written to"),
)
PAGE = 500  # items per request


class HttpFeedTask(ReplayableSourceTask):
    def start(self, config):  # where the task runs: driver and executors
        self.url = CONFIG.parse(config)["feed.url"]

    def partitions(self):
        return [{"feed": self.url}]

    def latest(self, partition, start, limit):  # driver: where the next micro-batch ends
        items = self._items(start["id"] if start else 0, min(PAGE, limit.max_rows or PAGE))
        return {"id": items[-1]["id"]} if items else start

    def read(self, partition, start, end):  # executor: exactly the items in (start, end]
        after = start["id"] if start else 0
        while after < end["id"]:
            items = [i for i in self._items(after, PAGE) if i["id"] <= end["id"]]
            if not items:
                raise ConnectException(f"feed {self.url}: items up to {end['id']} are gone")
            yield from (ConnectRecord(json.dumps(i), offset={"id": i["id"]}) for i in items)
            after = items[-1]["id"]

    def _items(self, after, limit):
        query = urllib.parse.urlencode({"after": after, "limit": limit})
        try:
            with urllib.request.urlopen(f"{self.url}?{query}", timeout=10) as response:
                return json.load(response)
        except OSError as exc:  # refused, unreachable, timed out: the runtime retries
            raise RetriableException(f"feed {self.url}: {exc}") from exc


class HttpFeedSource(SourceConnector):
    config_def = CONFIG
    task_class = HttpFeedTask

    def task_configs(self, max_tasks):
        return [dict(self.config)]

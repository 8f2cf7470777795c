"""A small connector written against `sluice.sdk` only, kept runnable (tests import it)."""

from sluice.sdk import ConfigDef, ConfigKey, ConnectRecord, ReplayableSourceTask, SourceConnector

CONFIG = ConfigDef(ConfigKey("count", type="int", default=100), ConfigKey("connect.topicname"))


class CounterTask(ReplayableSourceTask):  # replayable ⇒ exactly-once
    def start(self, config):
        self.count = CONFIG.parse(config)["count"]

    def partitions(self):
        return [{"counter": "main"}]

    def latest(self, partition, start, limit):  # driver: where does the data end now?
        done = start["next"] if start else 0
        return {"next": min(self.count, done + (limit.max_rows or self.count))}

    def read(self, partition, start, end):  # executor: records in (start, end]
        for i in range(start["next"] if start else 0, end["next"]):
            yield ConnectRecord(value=str(i), offset={"next": i + 1})


class CounterSource(SourceConnector):
    config_def = CONFIG
    task_class = CounterTask

    def task_configs(self, max_tasks):
        return [dict(self.config)]

"""Lake sinks: partitioned Parquet / JSON lines files, Delta Lake and Apache Iceberg tables, each
exactly-once per micro-batch. See docs/lake.md.

Every lake sink writes the same rows (`_rows`): the record's value spread into columns plus its
metadata columns (`_topic`, `_queue_id`, `_queue_offset`, `_key`, `_timestamp`, `_headers`), and
partitions them by `partition.fields` and/or a time column (`partition.time.format`). Each
commits what arrived in one micro-batch; `roll.interval.ms` makes that the sink's own interval.

Example (library level)::

    runner.start_connector("orders-lake", {
        "connector.class": "DeltaSinkConnector", "connect.topicnames": "orders",
        "delta.table.path": "/lake/orders", "partition.fields": "region"})
"""

from sluice.connectors.lake.delta import DeltaSinkConnector, DeltaSinkTask
from sluice.connectors.lake.files import ParquetSinkConnector, ParquetSinkTask
from sluice.connectors.lake.iceberg import IcebergSinkConnector, IcebergSinkTask

__all__ = [
    "DeltaSinkConnector",
    "DeltaSinkTask",
    "IcebergSinkConnector",
    "IcebergSinkTask",
    "ParquetSinkConnector",
    "ParquetSinkTask",
]

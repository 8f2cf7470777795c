"""The sluice connector SDK: everything a connector author needs, and nothing heavy.

A source connector plans (`SourceConnector.task_configs`) and its tasks run: extend
`ReplayableSourceTask` when the source can re-read a range between two positions (exactly-once),
or `SourceTask` when it can only be polled (at-least-once). A sink connector's tasks receive each
micro-batch (`SinkTask.put` / `put_batch`) and `flush` it with the batch id; the connector commits
it. See `sluice.connectors.file` for a complete example.
"""

from sluice.sdk._append import AppendSinkConnector, AppendSinkTask, StagedAppend, StagedPart
from sluice.sdk._arrow import (
    HEADERS_TYPE,
    TIMESTAMP_TYPE,
)
from sluice.sdk._client_families import (
    KAFKA_CLIENT,
    MYSQL_CLIENT,
    POSTGRESQL_CLIENT,
    RABBITMQ_CLIENT,
    REDIS_CLIENT,
    SQLITE_CLIENT,
)
from sluice.sdk._client_options import (
    ClientFamily,
    ClientOption,
    ClientPolicy,
    prefixed_options,
    refuse_unsafe,
    url_options,
)
from sluice.sdk._config import PASSWORD_MASK, ConfigDef, ConfigKey, redact_url
from sluice.sdk._connector import (
    BatchId,
    Connector,
    ConnectorContext,
    DeadLetterRequest,
    Delivery,
    OffsetStorageReader,
    ProduceRequest,
    ReadLimit,
    ReplayableSourceTask,
    SinkConnector,
    SinkTask,
    SinkTaskContext,
    SourceConnector,
    SourceTask,
    SourceTaskContext,
    count_problem,
)
from sluice.sdk._converter import (
    Converter,
    Decoded,
    Decoder,
    DecodeSql,
    Encoder,
    RecordError,
    SchemaRegistry,
)
from sluice.sdk._errors import (
    ConfigException,
    ConnectException,
    InvalidConfig,
    RestartRequested,
    RetriableException,
)
from sluice.sdk._record import ConnectRecord, RecordOffset, RecordPartition, partition_key
from sluice.sdk._schema import Field, FieldType, Logical, Schema
from sluice.sdk._transform import (
    Predicate,
    SqlStep,
    Transform,
    column_type,
    literal,
    quote,
    struct_fields,
)

__all__ = [
    "HEADERS_TYPE",
    "KAFKA_CLIENT",
    "MYSQL_CLIENT",
    "PASSWORD_MASK",
    "POSTGRESQL_CLIENT",
    "RABBITMQ_CLIENT",
    "REDIS_CLIENT",
    "SQLITE_CLIENT",
    "TIMESTAMP_TYPE",
    "AppendSinkConnector",
    "AppendSinkTask",
    "BatchId",
    "ClientFamily",
    "ClientOption",
    "ClientPolicy",
    "ConfigDef",
    "ConfigException",
    "ConfigKey",
    "ConnectException",
    "ConnectRecord",
    "Connector",
    "ConnectorContext",
    "Converter",
    "DeadLetterRequest",
    "DecodeSql",
    "Decoded",
    "Decoder",
    "Delivery",
    "Encoder",
    "Field",
    "FieldType",
    "InvalidConfig",
    "Logical",
    "OffsetStorageReader",
    "Predicate",
    "ProduceRequest",
    "ReadLimit",
    "RecordError",
    "RecordOffset",
    "RecordPartition",
    "ReplayableSourceTask",
    "RestartRequested",
    "RetriableException",
    "Schema",
    "SchemaRegistry",
    "SinkConnector",
    "SinkTask",
    "SinkTaskContext",
    "SourceConnector",
    "SourceTask",
    "SourceTaskContext",
    "SqlStep",
    "StagedAppend",
    "StagedPart",
    "Transform",
    "column_type",
    "count_problem",
    "literal",
    "partition_key",
    "prefixed_options",
    "quote",
    "redact_url",
    "refuse_unsafe",
    "struct_fields",
    "url_options",
]

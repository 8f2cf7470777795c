"""Change data capture: database logs → one topic per table, in Debezium's envelope.

`MySqlCdcSourceConnector` reads the MySQL/MariaDB row binlog over the replication protocol,
exactly once into the topic (positions are binlog file + position, re-read on replay).
`PostgresCdcSourceConnector` reads PostgreSQL's logical replication (`pgoutput`) from a slot it
owns, exactly once into the topic (positions are LSNs; the slot is advanced only after the
micro-batch committed). The JDBC sink applies the change events it emits (creates and updates
upserted, deletes deleted; see `sluice.connectors.jdbc.sink`). Both first snapshot the tables'
existing rows, lock-free and chunked, handing over to the log exactly (`_snapshot`). Full
reference: docs/cdc.md.
"""

from sluice.connectors.cdc.mysql import MySqlCdcSourceConnector, MySqlCdcSourceTask
from sluice.connectors.cdc.postgres import PostgresCdcSourceConnector, PostgresCdcSourceTask

__all__ = [
    "MySqlCdcSourceConnector",
    "MySqlCdcSourceTask",
    "PostgresCdcSourceConnector",
    "PostgresCdcSourceTask",
]

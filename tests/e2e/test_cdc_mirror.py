"""One round of the CDC mirror (`tests/e2e/cdc_mirror.py`) in the suite: MariaDB → topic →
PostgreSQL through a worker process, a writer running throughout, `ADD COLUMN … NULL` and
`ADD COLUMN … NOT NULL DEFAULT` once while the source runs and once while the worker is down
after a kill -9; the target ends equal to the source row for row and the topic holds each change
event once. `make crash-cdc` runs many rounds, both directions (`crash_cdc_mirror.py`)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.e2e.cdc_mirror import Round
from tests.integration import jdbc_db
from tests.integration.jdbc_db import Db

pytestmark = pytest.mark.slow
my, pg = jdbc_db.my, jdbc_db.pg  # fixtures


def test_mariadb_to_postgresql_mirror_through_schema_changes_and_a_kill(
    tmp_path: Path, my: Db, pg: Db
) -> None:
    seed = int(os.environ.get("SLUICE_CRASH_SEED", time.time_ns() % 1_000_000))
    mirror = Round(tmp_path, my, pg, seed=seed)
    print(f"seed {seed}")
    mirror.run()
    print(mirror.log)

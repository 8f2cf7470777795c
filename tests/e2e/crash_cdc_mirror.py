"""Many rounds of the CDC mirror (`tests/e2e/cdc_mirror.py`), both directions: each round picks
which `ADD COLUMN`s land while the worker runs and which while it is down, how many kill -9s
(1 or 2) and where among the changes they land. Not in the suite (its file name is not
`test_*.py`; the suite runs one round, `test_cdc_mirror.py`): `make crash-cdc` runs it.
`SLUICE_CDC_ROUNDS` rounds per direction (default 2), `SLUICE_CRASH_SEED` fixes the choices."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from tests.e2e.cdc_mirror import DDL, Round
from tests.integration import jdbc_db
from tests.integration.jdbc_db import Db

pytestmark = pytest.mark.slow
my, pg = jdbc_db.my, jdbc_db.pg  # fixtures

ROUNDS = int(os.environ.get("SLUICE_CDC_ROUNDS", "2"))
SEED = int(os.environ.get("SLUICE_CRASH_SEED", time.time_ns() % 1_000_000))


@pytest.mark.parametrize("number", range(ROUNDS))
@pytest.mark.parametrize("direction", ["mariadb-to-postgresql", "postgresql-to-mariadb"])
def test_mirror_round(direction: str, number: int, tmp_path: Path, my: Db, pg: Db) -> None:
    seed = SEED + number * 7 + (direction == "postgresql-to-mariadb")
    rng = random.Random(seed)
    down = frozenset(name for name, *_ in DDL if rng.random() < 0.5)
    source, target = (my, pg) if direction.startswith("mariadb") else (pg, my)
    mirror = Round(
        tmp_path, source, target, down=down, seed=seed, kills=rng.choice((1, 2)), shuffle=True
    )
    print(f"{direction} round {number}: seed {seed}, down {sorted(down)}, {mirror.kills} kill(s)")
    mirror.run()
    print(mirror.log)

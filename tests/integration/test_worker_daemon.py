"""Spark's Python workers come from sluice's preloading daemon (`sluice.engine.worker_daemon`),
and every Python process Spark starts imports pyspark from site-packages, not from pyspark.zip
(`sluice.engine.session.spark_python`)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from sluice.engine import worker_daemon
from sluice.engine.session import spark_python


def _worker_state(rows: Any) -> Any:
    import sys

    import pyarrow as pa

    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    for _ in rows:
        pass
    yield pa.RecordBatch.from_pydict(
        {
            "daemon": [spec.name if spec else ""],
            "preloaded": ["sluice.engine.direct" in sys.modules],
        }
    )


def test_workers_are_forked_from_the_preloading_daemon(spark: Any) -> None:
    out = (
        spark.range(1, numPartitions=1)
        .mapInArrow(_worker_state, "daemon string, preloaded boolean")
        .collect()
    )
    assert out[0]["daemon"] == "sluice.engine.worker_daemon"
    assert out[0]["preloaded"] is True


def test_preload_reports_what_it_could_not_import(monkeypatch: Any) -> None:
    monkeypatch.setattr(sys, "argv", ["daemon", "json"])
    assert worker_daemon.preload(("sluice.no_such_module", "csv")) == ["sluice.no_such_module"]
    assert "json" in sys.modules and "csv" in sys.modules


def test_every_preloaded_module_imports_and_starts_no_thread() -> None:
    # a fresh interpreter, as the zygote is: a name that fails would silently leave the import
    # (and its private memory) to every forked worker; a thread would not survive the fork
    script = (
        "import sys, threading; sys.argv[1:] = []\n"
        "from sluice.engine import worker_daemon\n"
        "print(worker_daemon.preload(), threading.active_count())"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split("\n")[-2] == "[] 1", out.stdout + out.stderr


def _imports() -> dict[str, str]:
    """Where this process imports pyspark from, and the zips and jars of pyspark on its path."""
    import os
    import sys

    import pyspark

    zips = [p for p in sys.path if p.endswith((".zip", ".jar")) and f"{os.sep}pyspark{os.sep}" in p]
    return {"pyspark": pyspark.__file__ or "", "zips": ",".join(zips)}


class _WhereReader(DataSourceStreamReader):
    """Reports, as its offset, where the driver-side streaming reader process imports from."""

    def initialOffset(self) -> dict:
        return {}

    def latestOffset(self) -> dict:
        return _imports()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Any:
        where = _imports()
        yield (where["pyspark"], where["zips"])


class _WhereSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sluice-test-where"

    def schema(self) -> str:
        return "pyspark string, zips string"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _WhereReader()


def test_spark_python_processes_import_pyspark_from_site_packages(spark: Any) -> None:
    import os

    launcher = spark_python()
    assert os.environ["PYSPARK_PYTHON"] == launcher
    spark.dataSource.register(_WhereSource)
    query = (
        spark.readStream.format("sluice-test-where")
        .load()
        .writeStream.format("memory")
        .queryName("where_imports")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    (row,) = spark.sql("SELECT * FROM where_imports").collect()
    # (from the zip, pyspark.__file__ is …/pyspark/python/lib/pyspark.zip/pyspark/__init__.py)
    assert ".zip" not in row["pyspark"] and row["zips"] == "", row  # an executor's worker
    driver_side = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert ".zip" not in driver_side["pyspark"] and driver_side["zips"] == "", driver_side


def test_the_launcher_drops_only_this_pyspark_zips_and_jars(tmp_path: Any) -> None:
    import os
    import subprocess

    import pyspark

    lib = os.path.join(os.path.dirname(pyspark.__file__), "python", "lib")
    zips = [os.path.join(lib, n) for n in sorted(os.listdir(lib)) if n.endswith(".zip")]
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    jar = os.path.join(jars, next(n for n in sorted(os.listdir(jars)) if n.endswith(".jar")))
    other = str(tmp_path / "other spark" / "pyspark.zip")  # another Spark's zip stays
    path = os.pathsep.join([*zips, jar, other, "/some/dir*", ""])
    out = subprocess.run(
        [spark_python(), "-c", "import os; print(os.environ['PYTHONPATH'])"],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert out.stdout.strip() == os.pathsep.join([other, "/some/dir*"])

"""A worker's graceful shutdown as Spark logs it: a micro-batch cut short is not an error.

`StreamingQuery.stop` interrupts the micro-batch in progress. The runner first waits a few seconds
for it to end (`sluice.runtime.runner.TRIGGER_GRACE_S`), but a batch that takes longer (a loaded
machine) is cancelled in its write job, and Spark reports the cancellation at ERROR level with a
stack trace: "Data source write support … is aborting", "… aborted" or "… failed to abort"
(the Python writer's abort interrupted as well), "Aborting task", "Aborting commit for partition
…", and at times "Error in TaskCompletionListener" (the killed task releasing a broadcast block
the stop has removed already). Nothing is wrong: the batch was not committed, and the next start
reads it again from the checkpoint (exactly once, as after a kill -9). So while the worker shuts
down, those loggers are silenced; at any other time (a connector stopped or updated over REST)
they still speak.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

#: The Spark loggers that report a micro-batch interrupted by a stop (in local mode the executors
#: log into the worker's log too; on a cluster their lines go to the executors' logs).
BATCH_INTERRUPT_LOGGERS = (
    # "Data source write support … is aborting." / "… aborted." / "… failed to abort."
    "org.apache.spark.sql.execution.datasources.v2.WriteToDataSourceV2Exec",
    # "Aborting commit for partition 0 (task 7, attempt 0, stage 7.0)" / "Aborted commit …"
    "org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask",
    # "Aborting task" with the TaskKilledException ("Job 7 cancelled … was stopped")
    "org.apache.spark.util.Utils",
    # "Error in TaskCompletionListener … Block broadcast_N does not exist": the killed task's
    # completion listener releases a broadcast the stopped query has already removed
    "org.apache.spark.TaskContextImpl",
)


def quiet_batch_interrupts(spark: SparkSession) -> None:
    """Turn off `BATCH_INTERRUPT_LOGGERS` in this driver's JVM (log4j 2): call it when the worker
    starts shutting down, before its queries are stopped."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None, "a classic (not Spark Connect) session"
    off = jvm.org.apache.logging.log4j.Level.OFF
    for name in BATCH_INTERRUPT_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, off)

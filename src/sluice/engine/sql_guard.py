"""What SQL given in a connector config may do: read the records, nothing else.

A connector config comes over REST, so the Spark SQL in it (a `sql` transform's query, the
expressions other transforms and predicates compile to) is as trusted as the REST client. Spark
SQL can do more than transform rows, and each of these is refused when the connector is planned
(at create), with a `ConfigException` naming the key:

* a statement that is not a query (`SET`, `ADD JAR`, `CREATE FUNCTION … USING JAR`, `INSERT`,
  `EXECUTE IMMEDIATE` …): `SparkSession.sql` runs those at once, before any check of its result
  could, so the query text is parsed first;
* `SELECT TRANSFORM(…) USING 'command'`: runs a shell command on every executor;
* `reflect` / `java_method` / `try_reflect`: call any static Java method (`System.exit`,
  `System.getenv` of a secret the config providers read).

Reading files by path in SQL (`SELECT … FROM text.\\`/etc/shadow\\``), which would step around
`file.allowed.dirs`, is off for the whole session (`spark.sql.runSQLOnFiles=false`, see
`sluice.engine.session.REQUIRED`): such a query names a table that does not exist.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from sluice.sdk import ConfigException

#: Plan nodes of a parsed statement that make it more than a query over the records.
_STATEMENT_NODES = {
    "InsertIntoStatement": "INSERT",
    "ScriptTransformation": "TRANSFORM … USING (a shell command)",
    "UnresolvedExecuteImmediate": "EXECUTE IMMEDIATE",
}
#: Classes in an analysed plan (its expressions and subqueries included) that reach outside it.
_ANALYSED_CLASSES = {
    "org.apache.spark.sql.catalyst.expressions.CallMethodViaReflection": (
        "reflect / java_method (a call of any static Java method)"
    ),
    "org.apache.spark.sql.catalyst.plans.logical.ScriptTransformation": (
        "TRANSFORM … USING (a shell command)"
    ),
}
_COMMAND = "org.apache.spark.sql.catalyst.plans.logical.Command"


def check_statement(spark: SparkSession, text: str, key: str) -> None:
    """ConfigException naming `key` unless `text` parses as a query (nothing is run)."""
    jvm = spark._jvm  # type: ignore[attr-defined]
    parser = spark._jsparkSession.sessionState().sqlParser()  # type: ignore[attr-defined]
    try:
        plan = parser.parsePlan(text)
    except Exception:  # a syntax error: Spark's own message comes with spark.sql
        return
    if jvm.java.lang.Class.forName(_COMMAND).isInstance(plan):
        kind = plan.getClass().getSimpleName()
        raise ConfigException(key, f"must be a query (SELECT … FROM records), not a {kind}")
    tree = plan.treeString()
    for node, what in _STATEMENT_NODES.items():
        if node in tree:
            raise ConfigException(key, f"must be a query over the records; {what} is not allowed")


def check_frame(df: DataFrame, key: str) -> None:
    """ConfigException naming `key` when `df`'s analysed plan calls Java or runs a command."""
    plan = df._jdf.queryExecution().analyzed().toJSON()  # type: ignore[operator]
    for cls, what in _ANALYSED_CLASSES.items():
        if f'"{cls}"' in plan:
            raise ConfigException(key, f"{what} is not allowed in a connector's SQL")

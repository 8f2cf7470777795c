"""Human-readable views of REST response bodies, as Rich renderables.

Each function takes a parsed body exactly as the worker sends it and returns something a Rich
``Console`` prints; none of them does I/O, so tests render them into a string. Text coming from
the worker (names, configs, traces) is always wrapped in ``Text`` so a ``[`` in a value is never
read as Rich markup. Missing fields render as ``-``: a newer or older worker may add or omit some.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

__all__ = [
    "config_table",
    "connectors_table",
    "offsets_table",
    "plugins_table",
    "render_text",
    "state_text",
    "status_view",
    "topics_table",
    "validation_view",
    "workers_table",
]

_STATE_STYLES = {
    "RUNNING": "green",
    "PAUSED": "yellow",
    "STOPPED": "dim",
    "FAILED": "bold red",
    "UNASSIGNED": "cyan",
    "RESTARTING": "cyan",
    "DESTROYED": "dim",
}


def _text(value: object) -> Text:
    return Text("-" if value is None or value == "" else str(value))


def _compact_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))


def _first_line(trace: object, limit: int = 100) -> str:
    # Cut by hand rather than with a no-wrap column: Rich squeezes the other columns to nothing
    # to make room for a long unwrappable cell.
    lines = [line for line in str(trace or "").splitlines() if line.strip()]
    line = lines[0].strip() if lines else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _table(*columns: str) -> Table:
    table = Table(*columns, box=box.SIMPLE_HEAD, pad_edge=False)
    # The first column names the row (connector, key, class…): fold it, never elide it.
    table.columns[0].overflow = "fold"
    return table


def state_text(state: object) -> Text:
    """A connector or task state, coloured when the terminal can show colour."""
    name = str(state or "UNKNOWN")
    return Text(name, style=_STATE_STYLES.get(name, ""))


def _retrying(task: Mapping[str, Any]) -> str:
    """A task's retry note (`"retrying": {"since", "attempts", "error"}`) in words, or ""."""
    note = task.get("retrying")
    if not isinstance(note, Mapping):
        return ""
    try:
        since = datetime.fromtimestamp(float(note["since"]) / 1000, UTC).strftime("%H:%M:%S UTC")
    except (KeyError, TypeError, ValueError, OverflowError):
        since = "?"
    return f"since {since}, {note.get('attempts', '?')} retries: {note.get('error') or '-'}"


def _tasks_cell(tasks: Sequence[Mapping[str, Any]]) -> Text:
    if not tasks:
        return Text("-")
    cell = Text()
    for index, task in enumerate(tasks):
        if index:
            cell.append("\n")
        cell.append(f"task {task.get('id', '?')}: ")
        cell.append_text(state_text(task.get("state")))
        if _retrying(task):
            cell.append(" (retrying)", style="yellow")
    return cell


def _failure_summary(status: Mapping[str, Any]) -> Text:
    """First line of each failure's trace: the connector's, then each FAILED task's."""
    lines: list[str] = []
    connector = status.get("connector") or {}
    if connector.get("trace"):
        lines.append(f"connector: {_first_line(connector['trace'])}")
    for task in status.get("tasks") or []:
        if task.get("trace"):
            lines.append(f"task {task.get('id', '?')}: {_first_line(task['trace'])}")
    return Text("\n".join(lines)) if lines else Text("")


def connectors_table(expanded: Mapping[str, Any]) -> RenderableType:
    """``GET /v1/connectors?expand=status`` as one row per connector (tasks and trace heads)."""
    if not expanded:
        return Text("No connectors.")
    rows = []
    for name in sorted(expanded):
        status = (expanded[name] or {}).get("status") or {}
        connector = status.get("connector") or {}
        rows.append(
            [
                Text(name),
                _text(status.get("type")),
                state_text(connector.get("state")),
                _tasks_cell(status.get("tasks") or []),
                _failure_summary(status),
            ]
        )
    # A trace can be long; its first line is enough here (`connectors status` shows all of it),
    # and the column only appears when something failed.
    with_trace = any(row[-1].plain for row in rows)
    table = _table("NAME", "TYPE", "STATE", "TASKS", *(["TRACE"] if with_trace else []))
    for row in rows:
        table.add_row(*(row if with_trace else row[:-1]))
    return table


def status_view(status: Mapping[str, Any]) -> RenderableType:
    """``GET …/status``: the connector's state, a table of its tasks, then every trace in full."""
    connector = status.get("connector") or {}
    head = Text()
    head.append("Connector ", style="bold")
    head.append(str(status.get("name", "?")))
    head.append(f"  type {status.get('type') or '-'}  state ")
    head.append_text(state_text(connector.get("state")))
    head.append(f"  worker {connector.get('workerId') or '-'}")
    parts: list[RenderableType] = [head]

    tasks = status.get("tasks") or []
    if tasks:
        with_trace = any(task.get("trace") for task in tasks)
        with_retrying = any(_retrying(task) for task in tasks)
        table = _table(
            "TASK",
            "STATE",
            "WORKER",
            *(["TRACE"] if with_trace else []),
            *(["RETRYING"] if with_retrying else []),
        )
        for task in tasks:
            cells = [
                _text(task.get("id")),
                state_text(task.get("state")),
                _text(task.get("workerId")),
            ]
            if with_trace:
                cells.append(Text(_first_line(task.get("trace"))))
            if with_retrying:
                cells.append(Text(_first_line(_retrying(task), 160)))
            table.add_row(*cells)
        parts.append(table)
    else:
        parts.append(Text("No tasks."))

    # Whole traces last, unwrapped by any table, so they can be copied as they are.
    if connector.get("trace"):
        parts.append(Text("\nConnector trace:", style="bold red"))
        parts.append(Text(str(connector["trace"]).rstrip()))
    for task in tasks:
        if task.get("trace"):
            parts.append(Text(f"\nTask {task.get('id', '?')} trace:", style="bold red"))
            parts.append(Text(str(task["trace"]).rstrip()))
    return Group(*parts)


def config_table(config: Mapping[str, Any]) -> RenderableType:
    """A connector's config map, one key per row, sorted."""
    if not config:
        return Text("No config.")
    table = _table("KEY", "VALUE")
    for key in sorted(config):
        table.add_row(Text(str(key)), _text(config[key]))
    return table


def offsets_table(body: Mapping[str, Any]) -> RenderableType:
    """``{"offsets": [{"partition", "offset"}]}`` as one row per partition (compact JSON)."""
    entries = body.get("offsets") or []
    if not entries:
        return Text("No offsets stored.")
    table = _table("PARTITION", "OFFSET")
    rows = sorted(
        (_compact_json(e.get("partition")), _compact_json(e.get("offset"))) for e in entries
    )
    for partition, offset in rows:
        table.add_row(Text(partition), Text(offset))
    return table


def push_table(body: Any) -> RenderableType:
    """A push sink's progress: totals, settings, then one row per task (the live snapshot)."""
    if not isinstance(body, Mapping):
        return Text(str(body))
    totals = body.get("totals") or {}
    if totals:
        counted = ", ".join(f"{k}={v}" for k, v in sorted(totals.items()))
    elif body.get("tasks"):
        counted = "none yet (its tasks have not settled a request)"
    else:
        counted = "none yet (no task has started: the sink's first micro-batch is still to come)"
    lines = [
        "totals: " + counted,
        "settings: " + (_compact_json(body.get("settings") or {})),
    ]
    table = _table("TASK", "ACTIVE", "CORE/MAX", "QUEUED", "LIMIT", "RETRY Q", "P50 MS", "P99 MS")
    for task in body.get("tasks") or []:
        latency = task.get("latency_ms") or {}
        table.add_row(
            str(task.get("task")),
            str(task.get("active")),
            f"{task.get('core_pool_size')}/{task.get('max_pool_size')}",
            str(task.get("queue_size")),
            str(task.get("queue_limit")),
            str(task.get("retry_queue_size")),
            str(latency.get("p50", "")),
            str(latency.get("p99", "")),
        )
    return Group(Text("\n".join(lines)), table)


_TYPE_ORDER = {"source": 0, "sink": 1, "transform": 2, "converter": 3}


def _short_aliases(aliases: Sequence[object]) -> str:
    # Dotted aliases (other projects' class names, kept for compatibility) would drown the table;
    # show the short names and how many more there are (`--json` lists them all).
    short = sorted({str(a) for a in aliases if "." not in str(a)})
    dotted = len({str(a) for a in aliases if "." in str(a)})
    return ", ".join(short) + (f" (+{dotted} more)" if dotted else "")


def plugins_table(plugins: Sequence[Mapping[str, Any]]) -> RenderableType:
    """Installed plugins, connectors first, then transforms and converters, by class."""
    if not plugins:
        return Text("No plugins.")
    table = _table("CLASS", "TYPE", "VERSION", "ALIASES")
    ordered = sorted(
        plugins,
        key=lambda p: (_TYPE_ORDER.get(str(p.get("type")), 9), str(p.get("class"))),
    )
    for plugin in ordered:
        table.add_row(
            Text(str(plugin.get("class", "?"))),
            _text(plugin.get("type")),
            _text(plugin.get("version")),
            Text(_short_aliases(plugin.get("aliases") or [])),
        )
    return table


def validation_view(result: Mapping[str, Any], *, show_all: bool = False) -> RenderableType:
    """``…/config/validate``: a count line and the keys with errors or warnings (every key if
    ``show_all``). Warnings are unknown keys, with the declared key they are close to."""
    count = int(result.get("error_count") or 0)
    warned = int(result.get("warning_count") or 0)
    head = Text(f"{result.get('name', '?')}: ")
    if count:
        head.append(f"{count} error{'s' if count != 1 else ''}", style="bold red")
    else:
        head.append("config is valid", style="green")
    if warned:
        head.append(f", {warned} warning{'s' if warned != 1 else ''}", style="yellow")
    rows = []
    for entry in result.get("configs") or []:
        definition = entry.get("definition") or {}
        value = entry.get("value") or {}
        problems = [str(e) for e in value.get("errors") or []]
        problems += [f"warning: {w}" for w in value.get("warnings") or []]
        if show_all or problems:
            rows.append((definition, value, problems))
    if not rows:
        return head
    table = _table("KEY", "VALUE", "TYPE", "REQUIRED", "DEFAULT", "PROBLEMS")
    for definition, value, problems in sorted(rows, key=lambda r: str(r[0].get("name"))):
        required = definition.get("required")
        cell = Text()
        for index, problem in enumerate(problems):
            style = "yellow" if problem.startswith("warning: ") else "red"
            cell.append(("\n" if index else "") + problem, style=style)
        table.add_row(
            Text(str(definition.get("name") or value.get("name") or "?")),
            _text(value.get("value")),
            _text(definition.get("type")),
            Text("yes" if required else "no" if required is not None else "-"),
            _text(definition.get("default_value")),
            cell,
        )
    return Group(head, table)


def topics_table(topics: Sequence[Mapping[str, Any]]) -> RenderableType:
    """Topics with one row per queue: min/max offset and how many messages lie between."""
    if not topics:
        return Text("No topics.")
    table = _table("TOPIC", "QUEUE", "MIN", "MAX", "MESSAGES")
    for column in table.columns[1:]:
        column.justify = "right"
    ordered = sorted(topics, key=lambda t: str(t.get("name")))
    for index, topic in enumerate(ordered):
        queues = sorted(topic.get("queues") or [], key=lambda q: q.get("queue_id", 0))
        if not queues:
            table.add_row(Text(str(topic.get("name"))), "-", "-", "-", "-")
        for row, queue in enumerate(queues):
            low, high = queue.get("min_offset"), queue.get("max_offset")
            count = high - low if isinstance(low, int) and isinstance(high, int) else None
            table.add_row(
                Text(str(topic.get("name")) if row == 0 else ""),
                _text(queue.get("queue_id")),
                _text(low),
                _text(high),
                _text(count),
                end_section=row == len(queues) - 1 and index < len(ordered) - 1,
            )
    return table


def workers_table(workers: Sequence[Any], *, url: str) -> RenderableType:
    """``/getClusterInfo``: the live workers' ids, as seen by the worker at ``url``."""
    if not workers:
        return Text(f"No live workers reported by {url}.")
    table = _table("WORKER")
    for worker in sorted(str(w) for w in workers):
        table.add_row(Text(worker))
    return Group(Text(f"Live workers, as seen by {url}:"), table)


def spark_cluster_view(body: Mapping[str, Any]) -> RenderableType:
    """``sluice spark-cluster status``: the master and each worker as the master lists it."""
    master = "answering" if body.get("answering") else "not answering"
    pid = body.get("master_pid")
    head = Text(
        f"master {body.get('master')} ({master}, pid {pid or '-'}), web UI {body.get('master_ui')}"
    )
    workers = body.get("workers") or []
    if not workers:
        return Group(head, Text("No workers registered."))
    table = _table("WORKER", "ADDRESS", "STATE", "CORES", "MEMORY MB", "WEB UI")
    for w in workers:
        table.add_row(
            _text(w.get("id")),
            _text(w.get("address")),
            state_text(w.get("state")),
            _text(w.get("cores")),
            _text(w.get("memory_mb")),
            _text(w.get("web_ui")),
        )
    return Group(head, table)


def render_text(renderable: RenderableType, *, width: int = 160) -> str:
    """Render to plain text (no colour), e.g. for tests or logs."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, force_terminal=False).print(renderable)
    return buffer.getvalue()


def records_text(records: Sequence[Mapping[str, Any]]) -> RenderableType:
    """One block per record: where it is, when, its key, value and headers (one per line)."""
    if not records:
        return Text("No records.")
    out = Text()
    for record in records:
        out.append(f"queue {record.get('queue')} offset {record.get('offset')}", style="bold")
        out.append(f"  {record.get('timestamp') or '-'}\n")
        for field in ("key", "value"):
            value = record.get(field)
            shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            out.append(f"  {field}: {shown}\n")
        for name, value in sorted((record.get("headers") or {}).items()):
            out.append(f"  {name}: {value}\n")
    return out

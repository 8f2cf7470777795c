"""The ``sluice`` command tree (Typer) and ``main``, the one place failures become exit codes.

Every command but ``worker`` is a thin client of the worker's REST API: it makes one call through
``Client``, then prints the body as JSON (``--json``) or as a Rich table. ``worker`` imports the
runtime lazily, inside the command, so the client commands start fast and run where PySpark is
not even installed (DESIGN §7: the CLI depends on the REST API only).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console, RenderableType
from rich.text import Text

from . import _render
from ._client import DEFAULT_TIMEOUT, DEFAULT_URL, Client, Json
from ._errors import EXIT_SERVER, BadResponse, CliError, UsageProblem, one_line
from ._inputs import merge_config, parse_offsets

#: The width a piped table may take (it takes its natural width, up to this).
_PIPED_WIDTH = 400

__all__ = ["app", "main"]

app = typer.Typer(
    name="sluice",
    help="Run a sluice worker, or manage one through its REST API.",
    no_args_is_help=True,
    add_completion=False,
    # `main` turns every failure into one stderr line; Typer's rich tracebacks never show.
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
connectors_app = typer.Typer(help="Create, inspect and control connectors.", no_args_is_help=True)
offsets_app = typer.Typer(
    help="Read, reset or set a connector's source/sink positions (connector must be STOPPED "
    "to change them).",
    no_args_is_help=True,
)
plugins_app = typer.Typer(
    help="Installed connector, transform and converter plugins.", no_args_is_help=True
)
cluster_app = typer.Typer(help="The workers of the cluster.", no_args_is_help=True)
topics_app = typer.Typer(help="Topics on the worker's bus.", no_args_is_help=True)
app.add_typer(connectors_app, name="connectors")
connectors_app.add_typer(offsets_app, name="offsets")
app.add_typer(plugins_app, name="plugins")
app.add_typer(cluster_app, name="cluster")
app.add_typer(topics_app, name="topics")
users_app = typer.Typer(
    help="Credentials files of rest.auth=basic|token workers (run where the file is).",
    no_args_is_help=True,
)
app.add_typer(users_app, name="users")
spark_cluster_app = typer.Typer(
    help="A Spark standalone cluster on this machine (loopback) from the installed pyspark.",
    no_args_is_help=True,
)
app.add_typer(spark_cluster_app, name="spark-cluster")


# -- shared options and plumbing ----------------------------------------------------------------


@dataclass
class Settings:
    """What the global options chose; stored on the root Typer context as ``ctx.obj``."""

    url: str = DEFAULT_URL
    json: bool = False
    timeout: float = DEFAULT_TIMEOUT
    user: str | None = None
    password: str | None = None
    token: str | None = None
    cacert: str | None = None


# `--json` is accepted after the subcommand too (`sluice connectors list --json`): that is where
# people type it, and refusing it there would only produce a usage error.
JsonFlag = Annotated[
    bool, typer.Option("--json", help="Print the response body as JSON (for scripts).")
]
NameArg = Annotated[str, typer.Argument(metavar="NAME", help="Connector name.", show_default=False)]
ConfigFileOpt = Annotated[
    str | None,
    typer.Option(
        "--config-file",
        "-f",
        metavar="FILE",
        help="Connector config: a .json object or a key=value properties file ('-' = stdin).",
        show_default=False,
    ),
]
AssignOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--config",
        "-c",
        metavar="KEY=VALUE",
        help="One config entry; repeatable; wins over --config-file.",
        show_default=False,
    ),
]


@app.callback()
def _root(
    ctx: typer.Context,
    url: Annotated[
        str,
        typer.Option("--url", envvar="SLUICE_URL", help="The worker's REST API base URL."),
    ] = DEFAULT_URL,
    json_out: Annotated[
        bool, typer.Option("--json", help="Print response bodies as JSON (for scripts).")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, help="Seconds to wait for the worker.")
    ] = DEFAULT_TIMEOUT,
    user: Annotated[
        str | None,
        typer.Option("--user", envvar="SLUICE_USER", help="User for rest.auth=basic workers."),
    ] = None,
    password: Annotated[
        str | None,
        typer.Option(
            "--password",
            envvar="SLUICE_PASSWORD",
            help="Password of --user (asked for when --user is given without it).",
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option("--token", envvar="SLUICE_TOKEN", help="Bearer token (rest.auth=token)."),
    ] = None,
    cacert: Annotated[
        str | None,
        typer.Option(
            "--cacert", envvar="SLUICE_CACERT", help="CA/certificate file to trust for https."
        ),
    ] = None,
) -> None:
    if user and password is None and ctx.invoked_subcommand not in (None, "worker", "users"):
        import getpass

        password = getpass.getpass(f"password of {user}: ")
    ctx.obj = Settings(
        url=url,
        json=json_out,
        timeout=timeout,
        user=user,
        password=password,
        token=token,
        cacert=cacert,
    )


def _settings(ctx: typer.Context) -> Settings:
    root = ctx.find_root()
    return root.obj if isinstance(root.obj, Settings) else Settings()


@contextmanager
def _client(ctx: typer.Context) -> Iterator[Client]:
    settings = _settings(ctx)
    with Client(
        url=settings.url,
        timeout=settings.timeout,
        user=settings.user,
        password=settings.password,
        token=settings.token,
        cacert=settings.cacert,
    ) as client:
        yield client


def _emit(
    ctx: typer.Context,
    json_flag: bool,
    body: Json,
    human: Callable[[Json], RenderableType | str | None],
) -> None:
    """Print ``body`` as JSON when asked, else what ``human`` makes of it."""
    if json_flag or _settings(ctx).json:
        if body is not None:
            sys.stdout.write(json.dumps(body, indent=2, ensure_ascii=False) + "\n")
        return
    shown = human(body)
    if shown is None:
        return
    # A console per call: it then writes to whatever sys.stdout is now (pytest swaps it).
    # Piped, Rich would assume 80 columns and fold names mid-word: give tables room instead
    # (they take their natural width, no padding), unless COLUMNS says otherwise.
    piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    console = Console(highlight=False, width=_PIPED_WIDTH if piped else None)
    console.print(Text(shown) if isinstance(shown, str) else shown)


def _expect(body: Json, kind: type, what: str) -> Any:
    # Guards the renderers against a worker of another version (or not a worker at all).
    if not isinstance(body, kind):
        shown = one_line(repr(body))
        shown = shown if len(shown) <= 120 else shown[:119] + "…"
        raise BadResponse(f"the worker sent {what} of an unexpected shape: {shown}")
    return body


def _state_of(status: Json) -> str:
    if isinstance(status, dict):
        return str((status.get("connector") or {}).get("state") or "UNKNOWN")
    return "UNKNOWN"


# -- worker -------------------------------------------------------------------------------------


@app.command()
def worker(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            exists=True,
            dir_okay=False,
            readable=True,
            metavar="FILE",
            help="Worker config (key=value), e.g. conf/connect-standalone.conf.",
            show_default=False,
        ),
    ] = None,
    config_file: Annotated[
        Path | None,
        typer.Argument(
            exists=True,
            dir_okay=False,
            readable=True,
            metavar="[FILE]",
            help="The worker config given without -c, as connect-standalone.sh takes it.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run a worker in this process: REST API, stores, connectors on Spark. Ctrl-C stops it."""
    if config is not None and config_file is not None and config != config_file:
        raise UsageProblem(f"two worker configs given ({config} and {config_file}); give one")
    config = config or config_file
    if config is None:
        raise UsageProblem("no worker config: sluice worker -c FILE (or sluice worker FILE)")
    try:
        # Imported here, not at module level: only this command needs Spark and the runtime.
        from sluice.worker_main import run_worker
    except ImportError as exc:
        raise CliError(f"the worker runtime cannot be loaded: {exc}") from exc
    raise typer.Exit(run_worker(str(config)))


# -- connectors ---------------------------------------------------------------------------------


@connectors_app.command("list")
def connectors_list(ctx: typer.Context, json_flag: JsonFlag = False) -> None:
    """List connectors with their type, state, tasks and the first line of any failure."""
    with _client(ctx) as client:
        body = client.connectors()
    _emit(
        ctx,
        json_flag,
        body,
        lambda b: _render.connectors_table(_expect(b, dict, "a connector list")),
    )


@connectors_app.command()
def create(
    ctx: typer.Context,
    name: NameArg,
    config_file: ConfigFileOpt = None,
    config: AssignOpt = None,
    update: Annotated[
        bool,
        typer.Option(
            "--update",
            help="Create or replace the config (PUT) instead of failing if the connector exists.",
        ),
    ] = False,
    json_flag: JsonFlag = False,
) -> None:
    """Create connector NAME from --config-file and/or -c key=value entries."""
    body = merge_config(config_file, config or [])
    if not body:
        raise UsageProblem("no config given: use --config-file FILE and/or -c key=value")
    with _client(ctx) as client:
        if update:
            created, info = client.put_config(name, body)
        else:
            created, info = True, client.create(name, body)
    verb = "Created" if created else "Updated"
    kind = info.get("type") if isinstance(info, dict) else None
    for warning in (info.get("warnings") or []) if isinstance(info, dict) else []:
        hint = f" ({warning.get('suggestion')})" if warning.get("suggestion") else ""
        sys.stderr.write(f"warning: {warning.get('key')}: {warning.get('message')}{hint}\n")
    _emit(
        ctx,
        json_flag,
        info,
        lambda _: f"{verb} connector '{name}'" + (f" ({kind})." if kind else "."),
    )


@connectors_app.command("config")
def connectors_config(ctx: typer.Context, name: NameArg, json_flag: JsonFlag = False) -> None:
    """Show connector NAME's config."""
    with _client(ctx) as client:
        body = client.config(name)
    _emit(ctx, json_flag, body, lambda b: _render.config_table(_expect(b, dict, "a config")))


@connectors_app.command()
def status(ctx: typer.Context, name: NameArg, json_flag: JsonFlag = False) -> None:
    """Show connector NAME's state, its tasks' states and any failure trace in full."""
    with _client(ctx) as client:
        body = client.status(name)
    _emit(ctx, json_flag, body, lambda b: _render.status_view(_expect(b, dict, "a status")))


def _lifecycle(ctx: typer.Context, name: str, verb: str, json_flag: bool) -> None:
    with _client(ctx) as client:
        body = client.action(name, verb)
    _emit(
        ctx,
        json_flag,
        body,
        lambda b: f"Requested {verb} of connector '{name}' (state now {_state_of(b)}).",
    )


@connectors_app.command()
def pause(ctx: typer.Context, name: NameArg, json_flag: JsonFlag = False) -> None:
    """Pause connector NAME: its query stops, its config and positions stay."""
    _lifecycle(ctx, name, "pause", json_flag)


@connectors_app.command()
def resume(ctx: typer.Context, name: NameArg, json_flag: JsonFlag = False) -> None:
    """Resume a paused or stopped connector NAME from its positions."""
    _lifecycle(ctx, name, "resume", json_flag)


@connectors_app.command()
def stop(ctx: typer.Context, name: NameArg, json_flag: JsonFlag = False) -> None:
    """Stop connector NAME (its offsets can then be changed); resume starts it again."""
    _lifecycle(ctx, name, "stop", json_flag)


@connectors_app.command()
def restart(
    ctx: typer.Context,
    name: NameArg,
    task: Annotated[
        int | None,
        typer.Option("--task", "-t", min=0, help="Restart only this task.", show_default=False),
    ] = None,
    json_flag: JsonFlag = False,
) -> None:
    """Restart connector NAME, or only one of its tasks."""
    with _client(ctx) as client:
        body = client.restart(name, task)
    what = f"task {task} of connector '{name}'" if task is not None else f"connector '{name}'"
    _emit(
        ctx, json_flag, body, lambda b: f"Requested restart of {what} (state now {_state_of(b)})."
    )


@connectors_app.command()
def delete(ctx: typer.Context, name: NameArg, json_flag: JsonFlag = False) -> None:
    """Delete connector NAME."""
    with _client(ctx) as client:
        body = client.delete(name)
    _emit(ctx, json_flag, body, lambda _: f"Deleted connector '{name}'.")


@connectors_app.command()
def push(
    ctx: typer.Context,
    name: NameArg,
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Change a limit while it runs: concurrency, core_concurrency, "
            "per_target_concurrency, queue_limit, rate_limit (repeatable, KEY=VALUE).",
            show_default=False,
        ),
    ] = None,
    json_flag: JsonFlag = False,
) -> None:
    """Show push sink NAME's limits and progress; with --set, change its limits live."""
    changes: dict[str, str] = {}
    for item in settings or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--set")
        changes[key.strip()] = value.strip()
    with _client(ctx) as client:
        body = client.tune_push(name, changes) if changes else client.push(name)
    _emit(ctx, json_flag, body, _render.push_table)


# -- connectors offsets -------------------------------------------------------------------------


@offsets_app.command("get")
def offsets_get(ctx: typer.Context, name: NameArg, json_flag: JsonFlag = False) -> None:
    """Show connector NAME's stored positions, one row per partition."""
    with _client(ctx) as client:
        body = client.offsets(name)
    _emit(ctx, json_flag, body, lambda b: _render.offsets_table(_expect(b, dict, "offsets")))


@offsets_app.command("reset")
def offsets_reset(ctx: typer.Context, name: NameArg, json_flag: JsonFlag = False) -> None:
    """Forget every position of stopped connector NAME: it starts from the beginning."""
    with _client(ctx) as client:
        body = client.reset_offsets(name)
    _emit(ctx, json_flag, body, _message_of)


@offsets_app.command("set")
def offsets_set(
    ctx: typer.Context,
    name: NameArg,
    offsets: Annotated[
        str,
        typer.Argument(
            metavar="OFFSETS",
            help="Inline JSON, a JSON file, or - for stdin: "
            '{"offsets": [{"partition": {...}, "offset": {...} or null}, ...]}',
            show_default=False,
        ),
    ],
    json_flag: JsonFlag = False,
) -> None:
    """Set positions of stopped connector NAME; an offset of null removes that partition's."""
    body = parse_offsets(offsets)
    with _client(ctx) as client:
        answer = client.set_offsets(name, body)
    _emit(ctx, json_flag, answer, _message_of)


def _message_of(body: Json) -> str:
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return "Done."


# -- plugins, cluster, topics -------------------------------------------------------------------


@plugins_app.command("list")
def plugins_list(
    ctx: typer.Context,
    kind: Annotated[
        str | None,
        typer.Option(
            "--type",
            help="Only this type: source, sink, transform, converter, predicate.",
            show_default=False,
        ),
    ] = None,
    json_flag: JsonFlag = False,
) -> None:
    """List installed plugins: class, type, version and aliases."""
    with _client(ctx) as client:
        body = client.plugins()
    plugins = _expect(body, list, "a plugin list")
    if kind:
        plugins = [p for p in plugins if isinstance(p, dict) and p.get("type") == kind]
    _emit(ctx, json_flag, plugins, _render.plugins_table)


@plugins_app.command("reload")
def plugins_reload(ctx: typer.Context, json_flag: JsonFlag = False) -> None:
    """Rescan plugin paths and entry points, picking up new plugins without a restart."""
    with _client(ctx) as client:
        body = client.reload_plugins()
    _emit(ctx, json_flag, body, lambda b: str(b) if b else "Plugins reloaded.")


@plugins_app.command("validate")
def plugins_validate(
    ctx: typer.Context,
    plugin: Annotated[
        str, typer.Argument(metavar="CLASS", help="Plugin class or alias.", show_default=False)
    ],
    config_file: ConfigFileOpt = None,
    config: AssignOpt = None,
    show_all: Annotated[
        bool, typer.Option("--all", help="Show every key, not only those with errors.")
    ] = False,
    json_flag: JsonFlag = False,
) -> None:
    """Check a config against plugin CLASS without creating anything; exit 1 if it has errors."""
    body = merge_config(config_file, config or [])
    # The worker resolves the class from the path, but connectors also read connector.class.
    body.setdefault("connector.class", plugin)
    with _client(ctx) as client:
        result = client.validate(plugin, body)
    result = _expect(result, dict, "a validation result")
    _emit(ctx, json_flag, result, lambda r: _render.validation_view(r, show_all=show_all))
    count = result.get("error_count") or 0
    if count:
        raise CliError(f"{count} config error{'s' if count != 1 else ''} for {plugin}")


@cluster_app.command("info")
def cluster_info(ctx: typer.Context, json_flag: JsonFlag = False) -> None:
    """List the live workers of the cluster."""
    with _client(ctx) as client:
        body = client.cluster()
    url = _settings(ctx).url
    _emit(
        ctx, json_flag, body, lambda b: _render.workers_table(_expect(b, list, "workers"), url=url)
    )


@topics_app.command("list")
def topics_list(ctx: typer.Context, json_flag: JsonFlag = False) -> None:
    """List topics with each queue's min/max offset."""
    with _client(ctx) as client:
        body = client.topics()
    _emit(ctx, json_flag, body, lambda b: _render.topics_table(_expect(b, list, "topics")))


QueueOpt = Annotated[int | None, typer.Option("--queue", "-q", help="Only this queue.")]
TopicArg = Annotated[str, typer.Argument(metavar="TOPIC", help="Topic name.")]


@topics_app.command("peek")
def topics_peek(
    ctx: typer.Context,
    name: TopicArg,
    queue: QueueOpt = None,
    offset: Annotated[
        int | None, typer.Option("--offset", help="First offset (default: the last records).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=1000)] = 20,
    json_flag: JsonFlag = False,
) -> None:
    """Show records of a topic, decoded, with key, headers (dead letters' __connect.errors.*
    included), timestamp and position."""
    with _client(ctx) as client:
        body = client.topic_records(name, queue=queue, offset=offset, limit=limit)
    _emit(
        ctx, json_flag, body, lambda b: _render.records_text(_expect(b, dict, "records")["records"])
    )


@topics_app.command("tail")
def topics_tail(
    ctx: typer.Context,
    name: TopicArg,
    queue: QueueOpt = None,
    interval: Annotated[
        float, typer.Option("--interval", min=0.1, help="Seconds between polls.")
    ] = 1.0,
    max_records: Annotated[
        int | None, typer.Option("--max", min=1, help="Stop after this many records.")
    ] = None,
    json_flag: JsonFlag = False,
) -> None:
    """Print records as they arrive (from the end of the topic), until Ctrl-C or --max."""
    import time

    settings = _settings(ctx)
    seen = 0
    with _client(ctx) as client:
        body = _expect(client.topic_records(name, queue=queue, limit=1), dict, "records")
        following: dict[str, int] = dict(body.get("next") or {})
        try:
            while max_records is None or seen < max_records:
                fresh = []
                for q, start in sorted(following.items(), key=lambda kv: int(kv[0])):
                    part = client.topic_records(name, queue=int(q), offset=start, limit=100)
                    following[q] = part["next"].get(q, start)
                    fresh += part["records"]
                fresh.sort(key=lambda r: (str(r.get("timestamp")), r.get("queue"), r.get("offset")))
                if max_records is not None:
                    fresh = fresh[: max_records - seen]
                seen += len(fresh)
                for record in fresh:
                    if settings.json or json_flag:
                        print(json.dumps(record, sort_keys=True), flush=True)
                    else:
                        Console(highlight=False).print(_render.records_text([record]))
                if not fresh:
                    time.sleep(interval)
        except KeyboardInterrupt:
            pass


@topics_app.command("delete")
def topics_delete(ctx: typer.Context, name: TopicArg, json_flag: JsonFlag = False) -> None:
    """Delete a topic and its data (refused while a connector uses it)."""
    with _client(ctx) as client:
        client.delete_topic(name)
    _emit(ctx, json_flag, {"deleted": name}, lambda b: Text(f"topic {name} deleted"))


# -- entry point --------------------------------------------------------------------------------


# -- users (credentials files; no worker needed) ------------------------------------------------

RoleOpt = Annotated[
    str, typer.Option("--role", help="admin (everything) or read-only (no mutations).")
]
FileArg = Annotated[str, typer.Argument(metavar="FILE", help="The worker's rest.auth.file.")]


@users_app.command("add")
def users_add(
    file: FileArg,
    name: Annotated[str, typer.Argument(metavar="NAME", help="User name (no ':').")],
    role: RoleOpt = "admin",
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from stdin.")
    ] = False,
) -> None:
    """Add or replace a user of a rest.auth=basic worker (its password is stored scrypt-hashed)."""
    from sluice.rest._auth import add_credential

    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        import getpass

        password = getpass.getpass(f"password of {name}: ")
    if not password:
        raise UsageProblem("the password must not be empty")
    try:
        add_credential(file, name, role, password)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from None
    print(f"user {name} ({role}) written to {file}")


@users_app.command("token")
def users_token(
    file: FileArg, name: Annotated[str, typer.Argument(metavar="NAME")], role: RoleOpt = "admin"
) -> None:
    """Create a bearer token for a rest.auth=token worker; printed once, stored hashed."""
    from sluice.rest._auth import add_credential, new_token

    token = new_token()
    try:
        add_credential(file, name, role, token)
    except ValueError as exc:
        raise UsageProblem(str(exc)) from None
    print(token)


# -- spark-cluster (local processes; no worker needed) ------------------------------------------

StateDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--state-dir",
        metavar="DIR",
        help="Pid files (run/), logs (log/) and work dirs (data/) "
        "[default: $XDG_STATE_HOME/sluice/spark-cluster].",
        show_default=False,
    ),
]
UiPortOpt = Annotated[int, typer.Option("--ui-port", help="The master's web UI (JSON at /json/).")]
MasterPortOpt = Annotated[int, typer.Option("--master-port", help="The master's RPC port.")]


def _spark_spec(state_dir: Path | None, **values: Any) -> Any:
    from . import _spark_cluster as sc

    if state_dir is not None:
        values["state_dir"] = state_dir
    if values.get("spark_home") is None:
        values.pop("spark_home", None)
    return sc.ClusterSpec(**values)


@spark_cluster_app.command("up")
def spark_cluster_up(
    state_dir: StateDirOpt = None,
    workers: Annotated[int, typer.Option("--workers", "-n", help="Spark workers to run.")] = 2,
    master_port: Annotated[
        int, typer.Option("--master-port", help="The master's RPC port.")
    ] = 7077,
    ui_port: UiPortOpt = 8080,
    worker_ui_port: Annotated[
        int, typer.Option("--worker-ui-port", help="Web UI of worker 1 (worker i: this + i - 1).")
    ] = 8091,
    cores: Annotated[int, typer.Option("--cores", help="Task slots each worker offers.")] = 2,
    memory: Annotated[str, typer.Option("--memory", help="Memory each worker offers.")] = "2g",
    spark_home: Annotated[
        Path | None,
        typer.Option(
            "--spark-home",
            metavar="DIR",
            help="Folder with bin/spark-class [default: the pip-installed pyspark's].",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait for the workers to register.")
    ] = 120.0,
) -> None:
    """Start a master and N workers (what is not running yet); wait until all are ALIVE."""
    from . import _spark_cluster as sc

    spec = _spark_spec(
        state_dir,
        workers=workers,
        master_port=master_port,
        ui_port=ui_port,
        worker_ui_port=worker_ui_port,
        cores=cores,
        memory=memory,
        spark_home=spark_home,
        timeout=timeout,
    )
    # the line of scripts/servers.sh: NAME up ADDRESS started|already running
    print(f"spark-cluster up {spec.url} {'started' if sc.up(spec) else 'already running'}")


@spark_cluster_app.command("down")
def spark_cluster_down(state_dir: StateDirOpt = None) -> None:
    """Stop the workers (and their executors), then the master; fine when nothing runs."""
    from . import _spark_cluster as sc

    sc.down(_spark_spec(state_dir))
    print("spark-cluster down")


@spark_cluster_app.command("status")
def spark_cluster_status(
    ctx: typer.Context,
    state_dir: StateDirOpt = None,
    ui_port: UiPortOpt = 8080,
    master_port: Annotated[
        int, typer.Option("--master-port", help="The master's RPC port.")
    ] = 7077,
    json_flag: JsonFlag = False,
) -> None:
    """The master and its workers as the master sees them; exit 1 when the cluster is not up."""
    from . import _spark_cluster as sc

    body = sc.status(_spark_spec(state_dir, ui_port=ui_port, master_port=master_port))
    _emit(ctx, json_flag, body, _render.spark_cluster_view)
    started = sum(1 for pid in body["worker_pids"].values() if pid)
    if body["master_pid"] is None or not started or body["alive_workers"] < started:
        raise CliError(
            f"spark-cluster down ({body['alive_workers']} ALIVE workers of {started} started)"
        )


def _error(message: str) -> None:
    # Plain print, not Rich: Rich would wrap a long message over several lines.
    print(f"error: {one_line(message)}", file=sys.stderr, flush=True)


def _usage_message(exc: typer.TyperException) -> str:
    message = exc.format_message().rstrip(".")
    ctx = getattr(exc, "ctx", None)  # usage errors know the command that was being parsed
    if ctx is not None:
        message += f" (see '{ctx.command_path} --help')"
    return message


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sluice`` with ``argv`` (default: ``sys.argv[1:]``) and return the exit code.

    0 success; 1 the worker answered with an error (or the command failed, e.g. an invalid
    config for ``plugins validate``); 2 usage error; 3 the worker cannot be reached; ``worker``
    returns the worker's own exit code. A failure prints exactly one ``error: …`` line on stderr.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    command = typer.main.get_command(app)
    try:
        result = command.main(args=args, prog_name="sluice", standalone_mode=False)
    except CliError as exc:
        _error(exc.message)
        return exc.exit_code
    except typer.TyperException as exc:
        # The parser's errors (usage errors exit 2, unreadable files 1). A group called without a
        # subcommand raises one carrying its help: with Rich the help is already printed.
        if type(exc).__name__ == "NoArgsIsHelpError":
            if exc.format_message().strip():
                print(exc.format_message(), file=sys.stderr)
            return exc.exit_code
        _error(_usage_message(exc))
        return exc.exit_code
    except (typer.Abort, KeyboardInterrupt):
        _error("interrupted")
        return 130
    except Exception as exc:
        if os.environ.get("SLUICE_DEBUG"):
            raise
        _error(f"unexpected {type(exc).__name__}: {exc} (set SLUICE_DEBUG=1 for the traceback)")
        return EXIT_SERVER
    return result if isinstance(result, int) else 0

"""The ``sluice`` command line: run a worker, or manage one through its REST API.

``main`` is the console-script entry point (``sluice = "sluice.cli:main"``); ``app`` is the Typer
application, for embedding or documentation. See ``docs/cli.md`` for the command tree.

Nothing here imports the runtime or Spark at import time: client commands need only httpx, Typer
and Rich, and ``sluice worker`` imports ``sluice.worker_main`` when it runs.
"""

from ._app import app, main

__all__ = ["app", "main"]

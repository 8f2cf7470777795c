"""DESIGN §7's layers, enforced: what `import sluice.sdk` loads, and which package imports which."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "sluice"

#: What each package may import of sluice besides itself (DESIGN §7). The differences from the
#: drawing, each for a reason: `push` is the push runtime of DESIGN §5a (itself on `sdk` only), used
#: by push sinks and tuned by the runtime; `runtime` lists the built-in connectors, converters and
#: transforms in its plugin registry; `bus` and `store` share the SQLite opener `_sqlite` and the
#: PostgreSQL one `_pg` (the commit journal and the stores of distributed mode), and with `push`
#: (whose board is a SQLite file) the creation of files private to the worker's user
#: (`_private`: mode 0600, folders 0700); the CLI
#: runs a worker (`worker_main`, for `sluice worker`) and writes the REST credential file
#: (`rest._auth`), and is otherwise a client of the REST API over HTTP.
ALLOWED = {
    "sdk": set(),
    "clients": {"sdk"},
    "connectors": {"sdk", "clients", "push"},
    "transforms": {"sdk"},
    "converters": {"sdk"},
    "push": {"sdk", "_sqlite", "_private"},
    "testing": {"sdk"},
    "engine": {"sdk", "converters", "transforms"},
    "bus": {"sdk", "clients", "_sqlite", "_pg", "_private"},
    "store": {"sdk", "_sqlite", "_pg", "_private"},
    "runtime": {"sdk", "engine", "bus", "store", "converters", "transforms", "connectors", "push"},
    "rest": {"sdk", "runtime"},
    "cli": {"rest", "worker_main"},
}

HEAVY = ("pyspark", "fastapi", "starlette", "uvicorn", "sqlalchemy", "psycopg", "pymysql")


def _imports(path: Path) -> set[str]:
    """The sluice packages a module imports (anywhere in it: lazy imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        found |= {n.split(".")[1] for n in names if n.startswith("sluice.")}
    return found


def test_every_package_imports_only_what_design_7_allows() -> None:
    wrong = []
    for package, allowed in ALLOWED.items():
        for path in sorted((SRC / package).rglob("*.py")):
            for target in _imports(path) - allowed - {package}:
                wrong.append(f"{path.relative_to(SRC)} imports sluice.{target}")
    assert wrong == []
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    assert packages <= set(ALLOWED), "a new package needs its rule"


def test_lazy_and_from_imports_are_seen(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os\nfrom sluice.engine.session import build_session\n"
        "def f():\n    import sluice.runtime.runner\n    from . import x\n"
    )
    assert _imports(module) == {"engine", "runtime"}


def test_the_sdk_and_what_authors_use_load_nothing_heavy() -> None:
    """In a fresh interpreter: the SDK, the test harness and a connector built on them import no
    Spark, web framework or database driver."""
    code = (
        "import json, sys\n"
        "import sluice.sdk, sluice.testing, sluice.connectors.file\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout) == []


def test_the_check_sees_a_heavy_import() -> None:
    """The subprocess check above can fail: importing the engine does load Spark."""
    code = "import sys, sluice.engine.session; print('pyspark' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "True"

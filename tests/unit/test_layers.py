"""DESIGN §7's layers, enforced: what `import sluice.sdk` loads, and which package imports which."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "sluice"

#: What each package, and each module at the top of `src/sluice`, may import of sluice besides
#: itself (DESIGN §7). `import sluice` alone (the root package: `__version__`, nothing else) is
#: allowed everywhere. The differences from the drawing, each for a reason: `push` is the push
#: runtime of DESIGN §5a (itself on `sdk` only), used by push sinks and tuned by the runtime;
#: `runtime` lists the built-in connectors, converters and transforms in its plugin registry;
#: `bus` and `store` share the SQLite opener `_sqlite` and the PostgreSQL one `_pg` (the commit
#: journal and the stores of distributed mode), and with `push` (whose board is a SQLite file) the
#: creation of files private to the worker's user (`_private`: mode 0600, folders 0700);
#: `_properties` (the `.properties` reader, a leaf: it imports nothing of sluice) is shared by
#: the worker config in `runtime` and the CLI, so both read those files by the same rules; the
#: CLI runs a worker (`worker_main`, for `sluice worker`) and writes the REST credential file
#: (`rest._auth`), and is otherwise a client of the REST API over HTTP. `worker_main` is the
#: entry point that wires `rest` to `runtime` (which is why it is not inside either); `demo`
#: drives a worker through its REST API over HTTP only.
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
    "runtime": {
        "sdk",
        "engine",
        "bus",
        "store",
        "converters",
        "transforms",
        "connectors",
        "push",
        "_properties",
    },
    "rest": {"sdk", "runtime"},
    "cli": {"rest", "worker_main", "_properties"},
    # the modules at the top of src/sluice
    "__init__": set(),
    "worker_main": {"sdk", "runtime", "rest"},
    "demo": set(),
    "_properties": set(),
    "_private": set(),
    "_sqlite": {"_private"},
    "_pg": set(),
}

HEAVY = ("pyspark", "fastapi", "starlette", "uvicorn", "sqlalchemy", "psycopg", "pymysql")


def _imports(path: Path, root: Path = SRC) -> set[str]:
    """The sluice packages or top-level modules a module imports (anywhere in it: lazy imports
    count too), whatever the spelling: `import sluice.x.y`, `from sluice.x import y`,
    `from sluice import x` and relative imports (`from .. import x`)."""
    package = ["sluice", *path.relative_to(root).parts[:-1]]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            reached = [a.name.split(".") for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            # relative: climb from the module's own package
            base = package[: len(package) - node.level + 1] if node.level else []
            module = [*base, *(node.module.split(".") if node.module else [])]
            # `from sluice import x`, `from . import x`: each x is what is reached
            reached = [[*module, a.name] for a in node.names] if len(module) == 1 else [module]
        else:
            continue
        found |= {r[1] for r in reached if r[0] == "sluice" and len(r) > 1}
    return found


def _rule_of(path: Path) -> str:
    """Whose rule a module follows: its top-level package's, or its own at the top."""
    parts = path.relative_to(SRC).with_suffix("").parts
    return parts[0]


def test_every_package_imports_only_what_design_7_allows() -> None:
    wrong = []
    for path in sorted(SRC.rglob("*.py")):
        rule = _rule_of(path)
        assert rule in ALLOWED, f"{path.relative_to(SRC)}: a new package or module needs its rule"
        for target in _imports(path) - ALLOWED[rule] - {rule}:
            wrong.append(f"{path.relative_to(SRC)} imports sluice.{target}")
    assert wrong == []


def test_every_rule_names_something_that_exists() -> None:
    """A rule for a package or module that was removed or renamed would check nothing."""
    present = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    present |= {p.stem for p in SRC.glob("*.py")}
    assert sorted(set(ALLOWED) - present) == []
    for allowed in ALLOWED.values():
        assert allowed <= present


def test_lazy_and_from_imports_are_seen(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os\nimport sluice\nfrom sluice.engine.session import build_session\n"
        "def f():\n    import sluice.runtime.runner\n"
    )
    assert _imports(module, tmp_path) == {"engine", "runtime"}


def test_imports_of_the_root_package_and_relative_ones_are_seen(tmp_path: Path) -> None:
    """`from sluice import x` and relative imports name the package they reach, so neither
    spelling slips past the rules."""
    (tmp_path / "bus").mkdir()
    module = tmp_path / "bus" / "m.py"
    module.write_text(
        "from sluice import _properties, converters\n"
        "from . import base\nfrom .. import store\nfrom ..engine.session import x\n"
        "from ._local import y\n"
    )
    assert _imports(module, tmp_path) == {"_properties", "converters", "bus", "store", "engine"}
    top = tmp_path / "t.py"
    top.write_text("from . import _private\nfrom .rest import app\n")
    assert _imports(top, tmp_path) == {"_private", "rest"}


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


#: The runtime and the engine are read function by function (issue 28): none is longer than this
LONGEST_FUNCTION = 80


def _long_functions(root: Path, most: int) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > most:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines})")
    return found


def test_no_function_of_the_runtime_or_the_engine_is_longer_than_80_lines() -> None:
    long = [f for d in ("runtime", "engine") for f in _long_functions(SRC / d, LONGEST_FUNCTION)]
    assert not long, long


def test_the_length_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LONGEST_FUNCTION))
    (tmp_path / "m.py").write_text(f"def long():\n{body}\n\n\ndef short():\n    pass\n")
    found = _long_functions(tmp_path, LONGEST_FUNCTION)
    assert len(found) == 1 and "long (81)" in found[0], found

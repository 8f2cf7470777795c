"""docs/architecture.md names only what exists: every repository path and every `sluice.…`
module (or name in one) it shows in backticks.

Names are resolved from the source files, without importing anything: a module is
`src/sluice/a/b.py` or `src/sluice/a/b/__init__.py`, and a name after it must be defined or
imported at the top of that module (one level more inside a class defined there).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"

_SPAN = re.compile(r"`([^`\n]+)`")
_PATH = re.compile(r"(?<![\w/.-])((?:src|tests|docs|bench|conf|scripts)/[\w./-]*[\w/])")
_DOTTED = re.compile(r"(?<![\w.])(sluice(?:\.\w+)+)")


def _spans(text: str) -> list[str]:
    return _SPAN.findall(text)


def named_paths(text: str) -> list[str]:
    """Repository paths inside backticks, also inside a command (`sluice worker -c conf/…`)."""
    return sorted({p for span in _spans(text) for p in _PATH.findall(span)})


def named_modules(text: str) -> list[str]:
    return sorted({d for span in _spans(text) for d in _DOTTED.findall(span)})


def _module_file(src: Path, parts: list[str]) -> Path | None:
    base = src.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _defined(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """The names a module or class body binds at its top level."""
    names: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
    return names


def missing_name(src: Path, dotted: str) -> str | None:
    """Why `dotted` (`sluice.x.y[.Name[.attr]]`) names nothing under `src` (the folder that holds
    the `sluice` package), or None when it resolves."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        module = _module_file(src, parts[:split])
        if module is not None:
            break
    else:
        return f"{dotted}: no such module"
    rest = parts[split:]
    if not rest:
        return None
    body = ast.parse(module.read_text(), str(module)).body
    node = _defined(body).get(rest[0])
    if node is None:
        return f"{dotted}: {'.'.join(parts[:split])} defines no {rest[0]!r}"
    if len(rest) == 1:
        return None
    if len(rest) == 2 and isinstance(node, ast.ClassDef) and rest[1] in _defined(node.body):
        return None
    return f"{dotted}: {'.'.join(parts[: split + 1])} has no {'.'.join(rest[1:])!r}"


def test_every_path_the_doc_names_exists() -> None:
    paths = named_paths(DOC.read_text())
    assert len(paths) >= 5  # the check looks at something
    assert [p for p in paths if not (REPO / p).exists()] == []


def test_every_sluice_module_the_doc_names_exists() -> None:
    names = named_modules(DOC.read_text())
    assert len(names) >= 20
    problems = [m for name in names if (m := missing_name(REPO / "src", name)) is not None]
    assert problems == []


def test_the_checks_see_what_does_not_exist(tmp_path: Path) -> None:
    pkg = tmp_path / "sluice" / "a"
    pkg.mkdir(parents=True)
    (tmp_path / "sluice" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from sluice.a.b import Thing\n")
    (pkg / "b.py").write_text("class Thing:\n    def go(self): ...\n\nLIMIT = 3\n")
    text = (
        "See `sluice.a`, `sluice.a.b.Thing.go`, `sluice.a.Thing`, `sluice.a.b.LIMIT` and\n"
        "`sluice.a.c`, `sluice.a.b.Other`, `sluice.a.b.Thing.stop`; run `x -c conf/y.conf`,\n"
        "open `src/sluice/runtime/` and `tests/unit/nothing_here.py`; `not/a/path` is prose."
    )
    assert named_paths(text) == ["conf/y.conf", "src/sluice/runtime/", "tests/unit/nothing_here.py"]
    found = {name: missing_name(tmp_path, name) for name in named_modules(text)}
    assert sorted(n for n, why in found.items() if why is None) == [
        "sluice.a",
        "sluice.a.Thing",
        "sluice.a.b.LIMIT",
        "sluice.a.b.Thing.go",
    ]
    assert found["sluice.a.c"] == "sluice.a.c: sluice.a defines no 'c'"
    assert found["sluice.a.b.Other"] == "sluice.a.b.Other: sluice.a.b defines no 'Other'"
    assert found["sluice.a.b.Thing.stop"] == "sluice.a.b.Thing.stop: sluice.a.b.Thing has no 'stop'"

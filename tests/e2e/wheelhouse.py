"""A wheelhouse of sluice's core dependencies, packed from the venv the tests run in: pip can then
install the core into a fresh venv with ``--no-index`` (no network, no cache, the exact versions
the suite runs with).

An installed distribution is its files under site-packages plus its ``.dist-info`` (METADATA with
its requirements, WHEEL with its tags): zipped back with a new RECORD they form a wheel pip
installs like the one it came from. Files installed outside site-packages (scripts in ``bin/``)
are left out; pip writes console scripts again from ``entry_points.txt``.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

#: what pip writes into a dist-info when it installs (not part of the wheel)
_INSTALLER_FILES = {"INSTALLER", "REQUESTED", "RECORD", "direct_url.json"}


def closure(requirements: Iterable[str]) -> dict[str, md.Distribution]:
    """The installed distributions `requirements` need, transitively (markers evaluated for this
    interpreter and the extras asked for), by canonical name."""
    found: dict[str, md.Distribution] = {}
    extras_of: dict[str, set[str]] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        asked = set(requirement.extras)
        if name in found and asked <= extras_of[name]:
            continue
        found[name] = found.get(name) or md.distribution(requirement.name)
        extras_of[name] = extras_of.get(name, set()) | asked
        for spec in found[name].requires or []:
            needed = Requirement(spec)
            if needed.marker is None or any(
                needed.marker.evaluate({"extra": extra}) for extra in {"", *extras_of[name]}
            ):
                todo.append(needed)
    return found


def _wheel_name(dist: md.Distribution) -> str:
    tags = [
        line.split(":", 1)[1].strip()
        for line in (dist.read_text("WHEEL") or "").splitlines()
        if line.startswith("Tag:")
    ]
    parts = [sorted({tag.split("-")[i] for tag in tags}) for i in range(3)]
    name = canonicalize_name(dist.metadata["Name"]).replace("-", "_")
    return f"{name}-{dist.version}-{'-'.join('.'.join(p) for p in parts)}.whl"


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def pack(dist: md.Distribution, folder: Path) -> Path:
    """`dist` as a wheel in `folder` (stored, not compressed: it is unpacked once, nearby)."""
    target = folder / _wheel_name(dist)
    records = []
    dist_info = ""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as wheel:
        for file in dist.files or []:
            arcname = file.as_posix()
            parts = file.parts
            if parts[0] == ".." or "__pycache__" in parts:
                continue
            if parts[0].endswith(".dist-info"):
                dist_info = parts[0]
                if parts[-1] in _INSTALLER_FILES:
                    continue
            path = Path(str(dist.locate_file(file)))
            if not path.is_file():
                continue
            wheel.write(path, arcname)  # keeps the mode: pyspark's bin/ scripts stay executable
            records.append(_record_line(arcname, path.read_bytes()))
        assert dist_info, f"{dist.metadata['Name']} has no .dist-info among its files"
        records.append(f"{dist_info}/RECORD,,")
        wheel.writestr(f"{dist_info}/RECORD", "\n".join(records) + "\n")
    return target


def build(requirements: Iterable[str], folder: Path) -> list[str]:
    """Pack every distribution `requirements` need into `folder`; their canonical names."""
    folder.mkdir(parents=True, exist_ok=True)
    dists = closure(requirements)
    for dist in dists.values():
        pack(dist, folder)
    return sorted(dists)

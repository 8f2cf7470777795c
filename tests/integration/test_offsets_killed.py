"""An offsets reset or change killed half-way (kill -9 of the worker during `DELETE` or `PATCH
/v1/connectors/{name}/offsets`) leaves a state the next boot resumes consistently: either the old
checkpoint beside the old positions, or a fresh run beside whatever the position store holds (a
fresh run starts from it). Never the old checkpoint beside changed positions: the offsets API would
show the reset while the connector resumes from where it was (found by bench/chaos_worker.py's
reading of the herder; the kill window is a few milliseconds wide, so the kill is injected here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sluice.sdk import partition_key
from tests.e2e.outage import status_herder


class Killed(BaseException):
    """The worker died here (not an Exception: nothing may catch it on the way out)."""


def _die(*_args: Any, **_kwargs: Any) -> None:
    raise Killed


@pytest.mark.parametrize("verb", ["reset", "alter"])
@pytest.mark.parametrize("dies_in", ["reset_run", "positions"])
def test_offsets_change_killed_half_way_is_all_or_nothing(
    runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verb: str, dies_in: str
) -> None:
    herder = status_herder(runner, tmp_path)
    data = tmp_path / "in.txt"
    data.write_text("a\nb\n")
    conf = {"connector.class": "FileSourceConnector", "filename": str(data)}
    herder.configs.put("src", {**conf, "connect.topicname": "t"}, "STOPPED")
    key = partition_key({"filename": str(data)})
    runner.positions.save("src", {key: {"position": 4}})
    run = runner.current_run("src")

    if dies_in == "reset_run":
        monkeypatch.setattr(runner, "reset_run", _die)
    else:
        for step in ("delete", "save"):
            monkeypatch.setattr(runner.positions, step, _die)
    with pytest.raises(Killed):
        if verb == "reset":
            herder.reset_offsets("src")
        else:
            offsets = [{"partition": {"filename": str(data)}, "offset": {"position": 2}}]
            herder.alter_offsets("src", offsets)
    monkeypatch.undo()

    # what the next boot finds: changed positions only with a fresh run (the old checkpoint
    # would resume from byte 4 while GET …/offsets shows the change)
    unchanged = runner.positions.load("src") == {key: {"position": 4}}
    assert unchanged or runner.current_run("src") != run, (runner.positions.load("src"), run)

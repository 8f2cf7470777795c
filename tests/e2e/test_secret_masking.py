"""No REST answer shows a password: every key a built-in connector declares `type="password"`,
through both REST faces and every route the web console calls, is masked (`PASSWORD_MASK`).

The keys come from the plugin registry, so a connector that gains a password key is checked
without a change here. One worker of this module holds, for every connector class with such keys,
a PAUSED connector whose every password key has a secret of its own (written to the worker's config
store before it boots: no connector needs its server to be up, and none starts). Each key is then
looked for in each answer that carries a config, and each secret in the whole text of every answer
about its connector, validation answers included (the secret sent in the request).

That every key named like a secret is declared a password is checked over the registry by
tests/unit/test_password_keys.py.
"""

from __future__ import annotations

import json
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from sluice.runtime.plugins import PluginRegistry
from sluice.runtime.secrets import password_keys
from sluice.sdk import PASSWORD_MASK
from sluice.store.configs import SqliteConfigStore
from tests.e2e.worker_process import WorkerProcess

pytestmark = pytest.mark.slow

_REGISTRY = PluginRegistry(())
#: connector class name → its password keys, for every built-in source and sink that has some
PASSWORDS = {
    info.class_name: password_keys(_REGISTRY.connector(info.class_name))
    for info in _REGISTRY.plugins()
    if info.type in ("source", "sink")
}
PASSWORDS = {name: keys for name, keys in PASSWORDS.items() if keys}
CASES = [(cls, key) for cls, keys in sorted(PASSWORDS.items()) for key in keys]
IDS = [f"{cls.rsplit('.', 1)[-1]}:{key}" for cls, key in CASES]


def _name(cls: str) -> str:
    return "mask-" + cls.rsplit(".", 1)[-1]


def _secret(cls: str, key: str) -> str:
    return f"S3cr3t-{cls.rsplit('.', 1)[-1]}-{key}-{uuid.uuid4().hex[:8]}"


class Masked:
    """The module's worker and the secret each (class, key) was given."""

    def __init__(self, worker: WorkerProcess, secrets: dict[tuple[str, str], str]) -> None:
        self.worker = worker
        self.secrets = secrets

    def get(self, path: str) -> httpx.Response:
        response = self.worker.get(path)
        assert response.status_code == 200, f"{path}: {response.text}"
        return response


def _config(cls: str, secrets: dict[tuple[str, str], str]) -> dict[str, str]:
    """A config of `cls` with each of its password keys set to its own secret; every address
    points at a closed port, so that a validation refuses it at once."""
    config = {
        "connector.class": cls,
        "connect.topicname": "masked",
        "connect.topicnames": "masked",
    }
    for key in PASSWORDS[cls]:
        config[key] = secrets[(cls, key)]
    return config


@pytest.fixture(scope="module")
def masked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Masked]:
    tmp = tmp_path_factory.mktemp("masking")
    secrets = {(cls, key): _secret(cls, key) for cls, key in CASES}
    (tmp / "store").mkdir()
    store = SqliteConfigStore(str(tmp / "store" / "configs.sqlite"))
    for cls in PASSWORDS:
        config = _config(cls, secrets)
        store.put(_name(cls), config, target_state="PAUSED")
        store.set_task_configs(_name(cls), [dict(config)])
    worker = WorkerProcess(tmp).start()
    try:
        yield Masked(worker, secrets)
    finally:
        code = worker.terminate()
    log = worker.log.read_text(errors="replace")
    assert code == 0, log[-3000:]
    leaked = [s for s in secrets.values() if s in log]
    assert not leaked, f"the worker's log shows {leaked}"


def test_the_registry_has_password_keys() -> None:
    # the parametrization below is not empty by accident (12 keys when this was written)
    assert len(CASES) >= 12, CASES


@pytest.mark.parametrize(("cls", "key"), CASES, ids=IDS)
def test_a_password_key_is_masked_on_every_face(masked: Masked, cls: str, key: str) -> None:
    name, secret = _name(cls), masked.secrets[(cls, key)]
    answers: list[str] = []

    def config_of(path: str, pick: Callable[[Any], Any]) -> Any:
        response = masked.get(path)
        answers.append(f"{path}: {response.text}")
        return pick(response.json())

    # the /v1 face (Kafka Connect's), which the console also calls
    assert config_of(f"/v1/connectors/{name}/config", lambda b: b)[key] == PASSWORD_MASK
    assert config_of(f"/v1/connectors/{name}", lambda b: b["config"])[key] == PASSWORD_MASK
    expanded = config_of("/v1/connectors?expand=info&expand=status", lambda b: b[name])
    assert expanded["info"]["config"][key] == PASSWORD_MASK
    [task] = config_of(f"/v1/connectors/{name}/tasks", lambda b: b)
    assert task["config"][key] == PASSWORD_MASK
    for path in (
        f"/v1/connectors/{name}/status",
        f"/v1/connectors/{name}/offsets",
        "/v1/connectors",
    ):
        answers.append(f"{path}: {masked.get(path).text}")
    # the RocketMQ Connect face
    body = config_of(f"/connectors/{name}/config", lambda b: b["body"])
    assert body["config"][key] == PASSWORD_MASK
    [task] = config_of(f"/connectors/{name}/tasks", lambda b: b["body"])
    assert task["config"][key] == PASSWORD_MASK
    for path in (f"/connectors/{name}/status", "/connectors/list", "/allocated/tasks"):
        answers.append(f"{path}: {masked.get(path).text}")
    # validation echoes the values it was sent (the console's create form, both faces)
    config = _config(cls, masked.secrets)
    short = cls.rsplit(".", 1)[-1]
    validated = masked.worker.request(
        "PUT", f"/v1/connector-plugins/{short}/config/validate", json=config
    )
    answers.append(f"validate: {validated.text}")
    values = {c["value"]["name"]: c["value"]["value"] for c in validated.json()["configs"]}
    assert values[key] == PASSWORD_MASK, values[key]
    query = urllib.parse.quote(json.dumps(config))
    rocket = masked.worker.get(f"/plugin/config/validate?config={query}")
    answers.append(f"rocketmq validate: {rocket.text}")
    rocket_values = {
        c["value"]["name"]: c["value"]["value"] for c in rocket.json()["body"]["configs"]
    }
    assert rocket_values[key] == PASSWORD_MASK, rocket_values[key]
    # the console's plugin form lists the key as a password (it renders a password field)
    definitions = {
        d["name"]: d for d in masked.get(f"/plugin/config?plugin={short}").json()["body"]
    }
    assert definitions[key]["type"] == "password"
    shown = [a for a in answers if secret in a]
    assert not shown, f"the secret of {key} is shown: {shown[0][:500]}"

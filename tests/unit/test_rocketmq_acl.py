"""RocketMQ ACL on the client side: the request signature (known answers derived from the
documented algorithm: base64(HMAC-SHA1(secret, values of the extension fields sorted by name,
without Signature, then the body)), signed frames, the messages of broker refusals, and the
config keys of the bus and the replicator connectors. No broker needed."""

from __future__ import annotations

import json
import pickle
import struct

import pytest

from sluice.clients import rocketmq as rm
from sluice.connectors.rocketmq import RocketMQSinkConnector, RocketMQSourceConnector
from sluice.sdk import ConfigException

# openssl dgst -sha1 -hmac secret -binary <<< 'ak0thi' (no newline) | base64
KNOWN_PLAIN = "nzWmRPnksE4yy5aac+9at3RMngQ="
# key "sécret" (UTF-8), data "AK1" "token" "Xét" (UTF-8) then the body b"\x00\x01body"
KNOWN_UTF8 = "JORVPRZMmezeONB3A201fWTEuxM="


def test_signature_known_answer() -> None:
    # field-name order: AccessKey, queueId, topic -> "ak" "0" "t", then the body "hi"
    fields = {"topic": "t", "queueId": "0", "AccessKey": "ak"}
    assert rm.signature(fields, b"hi", "secret") == KNOWN_PLAIN


def test_signature_ignores_an_existing_signature_field_and_uses_utf8() -> None:
    fields = {"topic": "Xét", "Signature": "stale", "SecurityToken": "token", "AccessKey": "AK1"}
    assert rm.signature(fields, b"\x00\x01body", "sécret") == KNOWN_UTF8


def test_sign_ext_adds_access_key_token_and_signature() -> None:
    ext = {"topic": "t", "queueId": "0"}
    signed = rm.sign_ext(ext, b"hi", rm.Credentials("ak", "secret"))
    assert signed == {**ext, "AccessKey": "ak", "Signature": KNOWN_PLAIN}
    assert "SecurityToken" not in signed  # only when given
    with_token = rm.sign_ext(
        {"topic": "Xét"}, b"\x00\x01body", rm.Credentials("AK1", "sécret", "token")
    )
    assert with_token["SecurityToken"] == "token"
    assert with_token["Signature"] == KNOWN_UTF8
    assert ext == {"topic": "t", "queueId": "0"}  # not modified


def _frame_ext(frame: bytes) -> tuple[dict[str, str], bytes]:
    length, header_len = struct.unpack(">ii", frame[:8])
    assert length == len(frame) - 4
    header = json.loads(frame[8 : 8 + header_len])
    return header["extFields"], frame[8 + header_len :]


def test_requests_are_signed_over_what_is_sent() -> None:
    # values go out as strings (an int queue id as "0"); None fields are left out, unsigned
    ext = {"topic": "t", "queueId": 0, "AccessKey": None}
    creds = rm.Credentials("ak", "secret")
    fields, body = _frame_ext(rm._Request(rm.PULL_MESSAGE, ext, b"hi", creds).encode())
    assert body == b"hi"
    assert fields == {"topic": "t", "queueId": "0", "AccessKey": "ak", "Signature": KNOWN_PLAIN}
    unsigned, _ = _frame_ext(rm._Request(rm.PULL_MESSAGE, ext, b"hi").encode())
    assert unsigned == {"topic": "t", "queueId": "0"}


def test_credentials_never_show_the_secret() -> None:
    creds = rm.Credentials("ak", "top-secret", "tok-secret")
    assert "secret" not in repr(creds)
    client = rm.RocketMQClient("h:9876", credentials=creds)
    assert "secret" not in repr(client)
    assert pickle.loads(pickle.dumps(client)).credentials == creds  # travels to executors


# Remarks as a RocketMQ 4.9.4 broker sends them (code 1, SYSTEM_ERROR).
_AT = (
    ", org.apache.rocketmq.acl.plain.PlainPermissionManager.validate(PlainPermissionManager.java:6)"
)
_EXC = "org.apache.rocketmq.acl.common.AclException: "


def _refused(text: str) -> rm.Response:
    return rm.Response(1, _EXC + text + _AT, {}, b"")


@pytest.mark.parametrize(
    ("text", "credentials", "key", "says"),
    [
        ("No accessKey is configured", None, "aclEnable", "requires ACL credentials and none"),
        ("No acl config for nobody", rm.Credentials("nobody", "x"), "accessKey", "no account"),
        (
            "Check signature failed for accessKey=ak",
            rm.Credentials("ak", "wrong-secret"),
            "secretKey",
            "refused the request signature of accessKey 'ak': wrong secret key",
        ),
        (
            "Need admin permission for request code=17, but accessKey=ak is not",
            rm.Credentials("ak", "x"),
            "accessKey",
            "accessKey 'ak' is not an admin account, which creating a topic needs",
        ),
        (
            "No default permission for topic:orders",
            rm.Credentials("ak", "x"),
            "accessKey",
            "accessKey 'ak' has no permission on topic 'orders'",
        ),
        (
            "No default permission for group:readers",
            rm.Credentials("ak", "x"),
            "accessKey",
            "accessKey 'ak' has no permission on consumer group 'readers'",
        ),
        (
            "No permission for %RETRY%readers",
            rm.Credentials("ak", "x"),
            "accessKey",
            "accessKey 'ak' has no permission on consumer group 'readers'",
        ),
    ],
)
def test_acl_refusals_name_the_key_and_the_resource(
    text: str, credentials: rm.Credentials | None, key: str, says: str
) -> None:
    refusal = rm.acl_refusal(_refused(text), credentials)
    assert refusal is not None
    assert refusal.key == key
    assert says in refusal.message, refusal.message
    assert "AclException" not in refusal.message and "java:" not in refusal.message
    assert text in refusal.message  # the broker's own words, without the Java noise
    if credentials is not None:
        assert credentials.secret_key not in refusal.message + refusal.suggestion


def test_acl_refusal_uses_the_connectors_key_names() -> None:
    keys = rm.AclKeys("source.acl.enable", "source.access.key", "source.secret.key")
    bad = rm.acl_refusal(
        _refused("Check signature failed for accessKey=ak"), rm.Credentials("ak", "s"), keys
    )
    assert bad is not None and bad.key == "source.secret.key"
    assert "source.secret.key" in bad.suggestion
    none = rm.acl_refusal(_refused("No accessKey is configured"), None, keys)
    assert none is not None
    assert none.suggestion == "set source.acl.enable=true, source.access.key and source.secret.key"


# Remarks as a RocketMQ 5.3.3 broker (ACL 2.0) sends them: code 16, no exception class, and no
# request code, so the response carries the request it answers.
@pytest.mark.parametrize(
    ("text", "code", "credentials", "key", "says"),
    [
        ("username cannot be null.", 11, None, "aclEnable", "requires ACL credentials and none"),
        ("User:nobody is not found.", 11, rm.Credentials("nobody", "x"), "accessKey", "no account"),
        (
            "check signature failed.",
            11,
            rm.Credentials("ak", "wrong-secret"),
            "secretKey",
            "refused the request signature of accessKey 'ak': wrong secret key",
        ),
        (
            "User:ak has no permission to access Topic:orders from 127.0.0.1, the decision is deny",
            11,
            rm.Credentials("ak", "x"),
            "accessKey",
            "accessKey 'ak' has no permission on topic 'orders'",
        ),
        (
            "User:ak has no permission to access Group:readers from 127.0.0.1, decision deny",
            14,
            rm.Credentials("ak", "x"),
            "accessKey",
            "accessKey 'ak' has no permission on consumer group 'readers'",
        ),
        (
            "User:ak has no permission to access Topic:new from 127.0.0.1, the decision is deny.",
            rm.UPDATE_AND_CREATE_TOPIC,
            rm.Credentials("ak", "x"),
            "accessKey",
            "accessKey 'ak' is not an admin account, which creating a topic needs",
        ),
    ],
)
def test_acl_2_refusals_of_a_5x_broker(
    text: str, code: int, credentials: rm.Credentials | None, key: str, says: str
) -> None:
    refusal = rm.acl_refusal(rm.Response(16, text, {}, b"", code), credentials)
    assert refusal is not None
    assert refusal.key == key
    assert says in refusal.message, refusal.message
    assert text in refusal.message
    if credentials is not None:
        assert credentials.secret_key not in refusal.message + refusal.suggestion


def test_other_errors_are_not_acl_refusals() -> None:
    assert rm.acl_refusal(rm.Response(17, "topic[x] not exist", {}, b""), None) is None
    assert rm.acl_refusal(rm.Response(0, "No accessKey is configured", {}, b""), None) is None


def test_client_failure_is_an_access_denied_error_that_pickles() -> None:
    client = rm.RocketMQClient(
        "h:9876", key="source.namesrv", credentials=rm.Credentials("ak", "s3cr3t")
    )
    error = client.failed("pull of t/0 at 0", _refused("No default permission for topic:t"))
    assert isinstance(error, rm.RocketMQAccessDenied)
    assert str(error).startswith(
        "source.namesrv=h:9876: pull of t/0 at 0: accessKey 'ak' has no permission on topic 't'"
    )
    again = pickle.loads(pickle.dumps(error))
    assert (str(again), again.key) == (str(error), error.key)


@pytest.mark.parametrize(
    ("connector", "config", "message"),
    [
        (
            RocketMQSourceConnector,
            {"source.namesrv": "h:9876", "source.topics": "t", "source.acl.enable": "true"},
            "source.access.key: required key is missing (source.acl.enable=true)",
        ),
        (
            RocketMQSourceConnector,
            {
                "source.namesrv": "h:9876",
                "source.topics": "t",
                "source.acl.enable": "true",
                "source.access.key": "ak",
            },
            "source.secret.key: required key is missing (source.acl.enable=true)",
        ),
        (
            RocketMQSinkConnector,
            {"target.namesrv": "h:9876", "connect.topicnames": "t", "target.acl.enable": "true"},
            "target.access.key: required key is missing (target.acl.enable=true)",
        ),
        (
            RocketMQSinkConnector,
            {
                "target.namesrv": "h:9876",
                "connect.topicnames": "t",
                "target.acl.enable": "true",
                "target.access.key": "ak",
                "target.secret.key": " ",
            },
            "target.secret.key: required key is missing (target.acl.enable=true)",
        ),
    ],
)
def test_connectors_need_both_keys_when_acl_is_enabled(
    connector: type, config: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigException) as info:
        connector().validate(config)
    assert str(info.value).startswith(message), str(info.value)

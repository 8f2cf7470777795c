"""HTTP sink: pushes records to HTTP endpoints on the push runtime (`sluice.push`).

Keys (RocketMQ Connect's `rocketmq-connect-http` names are accepted as aliases: `urlPattern`,
`timeout`, `authType` = BASIC_AUTH | API_KEY_AUTH, `basicUser`, `basicPassword`, `apiKeyName`,
`apiKeyValue`, `headerParameters`)::

    url=http://host/path/{topic}     fixed, or a template: {topic} {key} {queue} {offset}
                                     {header.NAME} {value.FIELD} (values URL-quoted)
    method=POST                      POST | PUT | PATCH
    headers={"X-Env": "prod"}        static headers (a JSON object)
    headers.forward=*                record headers sent as request headers (names or *)
    auth.type=none                   none | basic | bearer | apikey (+ auth.basic.user/password,
                                     auth.bearer.token, auth.apikey.header/value)
    body.format=raw                  raw (the value as is) | json | cloudevents
    cloudevents.mode=structured      structured | binary (CloudEvents 1.0)
    batch.max.records=1              >1: a JSON array of up to N values per request
    batch.max.bytes=1048576          …and of at most B bytes
    timeout.ms=5000                  per request; a late request is cancelled and retried
    tls.verify=true                  (tls.ca.file for a private CA)
    rate.limit.per.second=0          per target (0: none)
    idempotency.header=Idempotency-Key
    push.concurrency=16              requests in flight per task (live-tunable)
    push.target.concurrency=8        per target (live-tunable)
    push.queue.limit=1000            queued records per target before the reader blocks
    push.flush.max.ms=10000          longest a micro-batch waits before parking the rest
    retry.max.attempts=5, retry.max.age.ms=3600000, retry.backoff=exponential|linear,
    retry.backoff.initial.ms=500, retry.backoff.max.ms=30000, retry.jitter=0.2,
    retry.never.statuses=400,401,403,413, retry.topic.name=<connector>-push-retry

Example::

    runner.start_connector("hook", {
        "connector.class": "HttpSinkConnector", "connect.topicnames": "orders",
        "url": "https://example.com/orders/{key}", "body.format": "json",
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": "orders-dlq"})
"""

from sluice.connectors.http._config import HttpConfig, UrlTemplate, parse
from sluice.connectors.http.sink import DeliveryFailed, HttpSinkConnector, HttpSinkTask

__all__ = [
    "DeliveryFailed",
    "HttpConfig",
    "HttpSinkConnector",
    "HttpSinkTask",
    "UrlTemplate",
    "parse",
]

"""The client libraries sluice's connectors pass options to, as `ClientFamily` tables.

Sources: librdkafka's CONFIGURATION.md (confluent-kafka 2.x), PostgreSQL's libpq connection
parameters (psycopg 3), PyMySQL's `Connection` arguments (as SQLAlchemy's ``mysql+pymysql``
dialect hands a URL's query to it), SQLAlchemy's pysqlite URL arguments, redis-py's `parse_url`
and connection classes, pika's `URLParameters`. An option missing from a table is refused
under the default ``allowlist`` policy; an operator widens it with
`connector.client.config.override.allowlist`.
"""

from __future__ import annotations

import re

from sluice.sdk._client_options import ClientFamily


def _names(text: str) -> frozenset[str]:
    """The option names of a whitespace-separated list."""
    return frozenset(text.split())


_SHELL_SAFE = re.compile(r"[A-Za-z0-9._/@+=:,-]*")


def _shell_safe(value: str) -> str | None:
    """librdkafka substitutes it into the ``sasl.kerberos.kinit.cmd`` shell command line."""
    if _SHELL_SAFE.fullmatch(value):
        return None
    return (
        "librdkafka puts this value into the kinit shell command; only letters, digits and "
        "._/@+=:,- are allowed"
    )


def _http_url(value: str) -> str | None:
    if value.strip().lower().startswith(("https://", "http://")):
        return None
    return "the token endpoint must be an http:// or https:// URL"


_CODE = "it makes the library load native code into the worker"

KAFKA_CLIENT = ClientFamily(
    name="kafka",
    library="librdkafka",
    allowed=_names(
        """
        client.id client.rack
        message.max.bytes message.copy.max.bytes receive.message.max.bytes
        max.in.flight.requests.per.connection max.in.flight
        metadata.recovery.strategy metadata.recovery.rebootstrap.trigger.ms
        topic.metadata.refresh.interval.ms metadata.max.age.ms
        topic.metadata.refresh.fast.interval.ms topic.metadata.refresh.sparse
        topic.metadata.propagation.max.ms
        socket.timeout.ms socket.send.buffer.bytes socket.receive.buffer.bytes
        socket.keepalive.enable socket.nagle.disable socket.max.fails
        socket.connection.setup.timeout.ms broker.address.ttl broker.address.family
        connections.max.idle.ms reconnect.backoff.ms reconnect.backoff.max.ms
        retry.backoff.ms retry.backoff.max.ms
        api.version.request api.version.request.timeout.ms api.version.fallback.ms
        broker.version.fallback client.dns.lookup enable.metrics.push
        security.protocol
        ssl.cipher.suites ssl.curves.list ssl.sigalgs.list
        ssl.key.password ssl.key.pem ssl.certificate.pem ssl.ca.pem ssl.keystore.password
        https.ca.pem
        enable.ssl.certificate.verification ssl.endpoint.identification.algorithm
        sasl.mechanisms sasl.mechanism sasl.username sasl.password
        sasl.kerberos.service.name sasl.kerberos.principal
        sasl.kerberos.min.time.before.relogin
        sasl.oauthbearer.config sasl.oauthbearer.method
        sasl.oauthbearer.client.id sasl.oauthbearer.client.credentials.client.id
        sasl.oauthbearer.client.secret sasl.oauthbearer.client.credentials.client.secret
        sasl.oauthbearer.scope sasl.oauthbearer.extensions sasl.oauthbearer.token.endpoint.url
        sasl.oauthbearer.grant.type sasl.oauthbearer.assertion.algorithm
        sasl.oauthbearer.assertion.private.key.passphrase
        sasl.oauthbearer.assertion.private.key.pem
        sasl.oauthbearer.assertion.claim.aud sasl.oauthbearer.assertion.claim.exp.seconds
        sasl.oauthbearer.assertion.claim.iss sasl.oauthbearer.assertion.claim.jti.include
        sasl.oauthbearer.assertion.claim.nbf.seconds sasl.oauthbearer.assertion.claim.sub
        queued.min.messages queued.max.messages.kbytes fetch.wait.max.ms fetch.queue.backoff.ms
        fetch.message.max.bytes max.partition.fetch.bytes fetch.max.bytes fetch.min.bytes
        fetch.error.backoff.ms check.crcs
        transaction.timeout.ms queue.buffering.max.messages queue.buffering.max.kbytes
        queue.buffering.max.ms linger.ms message.send.max.retries retries
        queue.buffering.backpressure.threshold compression.codec compression.type
        compression.level batch.num.messages batch.size sticky.partitioning.linger.ms
        request.required.acks acks request.timeout.ms message.timeout.ms delivery.timeout.ms
        """
    ),
    files=_names(
        """
        ssl.key.location ssl.certificate.location ssl.ca.location ssl.crl.location
        ssl.keystore.location https.ca.location sasl.kerberos.keytab
        sasl.oauthbearer.assertion.private.key.file sasl.oauthbearer.assertion.file
        sasl.oauthbearer.assertion.jwt.template.file
        """
    ),
    never={
        "plugin.library.paths": f"{_CODE} (it dlopen()s the libraries it names)",
        "interceptors": f"{_CODE} (plugin interceptors)",
        "ssl.engine.location": f"{_CODE} (the OpenSSL engine library at that path)",
        "ssl.engine.id": f"{_CODE} (an OpenSSL engine, loaded by name)",
        "ssl_engine_callback_data": "native data for an OpenSSL engine",
        "ssl.providers": f"{_CODE} (OpenSSL 3 provider modules)",
        "sasl.kerberos.kinit.cmd": "it is a shell command librdkafka runs",
        "offset.store.path": "it makes librdkafka write offset files on the worker",
        "offset.store.method": "file offset storage writes files on the worker",
        "offset.store.sync.interval.ms": "file offset storage writes files on the worker",
        "internal.termination.signal": "it installs a signal handler in the worker process",
        "opaque": "a pointer of the client's API, not an option a config can set",
        "default_topic_conf": "an object of the client's API, not an option a config can set",
        "msg_order_cmp": "a callback of the client's API, not an option a config can set",
        "logger": "a Python object of confluent-kafka's API (sluice sets its own)",
        "on_delivery": "a callback of confluent-kafka's API, not an option a config can set",
        "on_commit": "a callback of confluent-kafka's API, not an option a config can set",
        "ssl_key": "set through the client's API, not a config (use ssl.key.pem)",
        "ssl_certificate": "set through the client's API, not a config (use ssl.certificate.pem)",
        "ssl_ca": "set through the client's API, not a config (use ssl.ca.pem)",
    },
    checks={
        "sasl.kerberos.service.name": _shell_safe,
        "sasl.kerberos.principal": _shell_safe,
        "sasl.kerberos.keytab": _shell_safe,
        "sasl.oauthbearer.token.endpoint.url": _http_url,
    },
    not_files={"ssl.ca.location": frozenset({"probe"})},
    file_suffixes=(".location", ".file", ".keytab", ".path", ".paths"),
    never_suffixes=("_cb", "_callback"),
)


def _no_engine(value: str) -> str | None:
    if ":" in value:
        return "libpq reads engine:key as an OpenSSL engine to load (native code); give a file"
    return None


POSTGRESQL_CLIENT = ClientFamily(
    name="postgresql",
    library="libpq (psycopg)",
    allowed=_names(
        """
        application_name fallback_application_name connect_timeout options
        keepalives keepalives_idle keepalives_interval keepalives_count tcp_user_timeout
        sslmode requiressl sslnegotiation sslcompression sslpassword sslsni sslcertmode
        ssl_min_protocol_version ssl_max_protocol_version channel_binding require_auth
        gssencmode krbsrvname gsslib target_session_attrs load_balance_hosts requirepeer
        """
    ),
    files=_names("sslcert sslkey sslrootcert sslcrl sslcrldir passfile"),
    never={
        "sslkeylogfile": "it makes libpq write the TLS session keys to a file",
        "service": "it reads connection settings (hosts, users, key and certificate files) "
        "from a service file, past this policy",
        "servicefile": "it reads connection settings (hosts, users, key and certificate files) "
        "from the file it names, past this policy",
        "plugin": "it makes SQLAlchemy load a plugin",
    },
    reserved={
        name: "give it in the URL's address (or connection.user / connection.password)"
        for name in ("host", "hostaddr", "port", "dbname", "user", "password")
    },
    checks={"sslkey": _no_engine},
    not_files={"sslrootcert": frozenset({"system"})},
)

MYSQL_CLIENT = ClientFamily(
    name="mysql",
    library="PyMySQL",
    allowed=_names(
        """
        connect_timeout read_timeout write_timeout program_name max_allowed_packet
        ssl_cipher ssl_check_hostname ssl_verify_cert ssl_verify_identity ssl_disabled
        ssl_key_password server_public_key
        """
    ),
    files=_names("ssl_ca ssl_cert ssl_key ssl_capath unix_socket"),
    never={
        "local_infile": "it lets the server read any file of the worker (LOAD DATA LOCAL INFILE)",
        "client_flag": "it sets protocol capabilities such as LOCAL INFILE",
        "read_default_file": "it reads an option file that can redirect the connection and name "
        "key and certificate files past this policy",
        "read_default_group": "it selects settings of an option file (read_default_file)",
        "plugin": "it makes SQLAlchemy load a plugin",
        "conv": "a Python object of PyMySQL's API, not an option a config can set",
        "cursorclass": "a Python object of PyMySQL's API, not an option a config can set",
        "auth_plugin_map": "a Python object of PyMySQL's API, not an option a config can set",
    },
    reserved={
        "init_command": "sluice sets up each session itself (UTC, strict SQL mode)",
        "sql_mode": "sluice sets up each session itself (UTC, strict SQL mode)",
        "autocommit": "sluice manages transactions itself",
        "charset": "sluice uses utf8mb4",
        "defer_connect": "sluice connects when it needs to",
        **{
            name: "give it in the URL's address (or connection.user / connection.password)"
            for name in ("host", "port", "user", "password", "passwd", "db", "database")
        },
    },
)

SQLITE_CLIENT = ClientFamily(
    name="sqlite",
    library="sqlite3 (SQLAlchemy)",
    allowed=_names("timeout check_same_thread cached_statements detect_types"),
    never={
        "uri": "it makes the path a SQLite file: URI, whose target and parameters "
        "file.allowed.dirs cannot judge",
        "plugin": "it makes SQLAlchemy load a plugin",
    },
    reserved={"isolation_level": "the catalog manages its transactions itself"},
)

REDIS_CLIENT = ClientFamily(
    name="redis",
    library="redis-py",
    allowed=_names(
        """
        db socket_keepalive retry_on_timeout max_connections health_check_interval
        client_name protocol socket_read_size
        ssl_cert_reqs ssl_check_hostname ssl_min_version ssl_password ssl_ciphers ssl_ca_data
        ssl_include_verify_flags ssl_exclude_verify_flags
        """
    ),
    files=_names("ssl_keyfile ssl_certfile ssl_ca_certs ssl_ca_path path"),
    never={
        name: "a Python object of redis-py's API, not an option a config can set"
        for name in (
            "connection_class",
            "connection_pool",
            "redis_connect_func",
            "credential_provider",
            "retry",
            "event_dispatcher",
            "cache",
            "cache_config",
            "parser_class",
        )
    },
    reserved={
        "socket_timeout": "set redis.timeout.ms",
        "socket_connect_timeout": "set redis.timeout.ms",
        "timeout": "set redis.timeout.ms",
        "username": "give it in the URL's user part or redis.username",
        "password": "give it in the URL's user part or redis.password",
    },
)

RABBITMQ_CLIENT = ClientFamily(
    name="rabbitmq",
    library="pika",
    allowed=_names(
        """
        channel_max frame_max locale retry_delay client_properties tcp_options
        ssl_options.ciphers ssl_options.server_hostname ssl_options.password
        ssl_options.ca_data ssl_options.cadata
        """
    ),
    files=_names(
        """
        ssl_options.ca_certs ssl_options.cafile ssl_options.ca_path ssl_options.capath
        ssl_options.certfile ssl_options.keyfile
        """
    ),
    reserved={
        "socket_timeout": "set rabbitmq.timeout.ms",
        "stack_timeout": "set rabbitmq.timeout.ms",
        "blocked_connection_timeout": "set rabbitmq.timeout.ms",
        "connection_attempts": "sluice retries connections itself (errors.retry.*)",
        "heartbeat": "set rabbitmq.heartbeat.s",
    },
)

__all__ = [
    "KAFKA_CLIENT",
    "MYSQL_CLIENT",
    "POSTGRESQL_CLIENT",
    "RABBITMQ_CLIENT",
    "REDIS_CLIENT",
    "SQLITE_CLIENT",
]

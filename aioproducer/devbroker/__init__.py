"""A local Apache Kafka (KRaft) cluster for development, demos and the test suite.

Everything runs on 127.0.0.1. The Kafka jars come from Maven Central through ``mvn``
(``dependency:copy-dependencies``) into a cache directory, once; each node is one JVM that
is both broker and controller, with its own free ports, its own directory
(``<state_dir>/node-<id>/``: ``server.properties``, ``data/``, ``server.log``,
``stdout.log``, ``pid``) and the cluster's state in ``<state_dir>/cluster.json`` so that
another process can ask for its status or stop it.

Node ids are ``0 .. nodes-1`` and are also the indexes taken by the ``*_node`` methods.

``LocalKafka(..., secure=True)`` (``start --secure``) is the secured mode: TLS listeners
(with certificates made by ``openssl`` at start), SASL listeners (PLAIN, SCRAM-SHA-256/512,
OAUTHBEARER with unsigned JWTs) and ``StandardAuthorizer`` ACLs; see ``LocalKafka``.

Used as a library (``LocalKafka``) by the tests, and as a command::

    python -m aioproducer.devbroker start [--nodes N] [--dir DIR] [--secure]
    python -m aioproducer.devbroker status | stop | logs [I]
    python -m aioproducer.devbroker kill-node I | stop-node I | start-node I

The package has one module per concern; every public name is re-exported here:

- ``jars``: the Kafka jars (Maven fetch into the cache), ``java`` command lines, ``run_java``;
- ``admin``: blocking ApiVersions, Metadata and ACL requests (``kio`` over a socket);
- ``process``: pids, spawning, stopping, free ports, the watchdog;
- ``tls``: the secured mode's certificates (``openssl``);
- ``security``: the secured mode's listeners, users, JAAS/SCRAM config, unsigned JWTs;
- ``cluster``: ``LocalKafka``, its status and its nodes' configuration;
- ``cli``: the ``aioproducer broker`` command; ``common``: what they share.

This package imports nothing from the rest of ``aioproducer`` (only the stdlib and ``kio``),
so it works before the compiled core is built.
"""

from __future__ import annotations

from .admin import (
    CLUSTER_RESOURCE,
    AclBinding,
    AclError,
    api_versions,
    create_acls,
    delete_acls,
    describe_acls,
    fetch_metadata,
)
from .cli import main
from .cluster import ClusterStatus, LocalKafka, NodeStatus, default_state_dir, running_bootstrap
from .common import BrokerStartError
from .jars import (
    KAFKA_VERSION,
    KAFKA_VERSIONS,
    KafkaLibsError,
    cache_dir,
    ensure_kafka_libs,
    java_classpath,
    java_executable,
    run_java,
)
from .process import _pid_alive as _pid_alive
from .security import (
    REAUTH_MS,
    SASL_MECHANISMS,
    SECURE_LISTENERS,
    SECURE_USERS,
    SUPER_USERS,
    unsecured_jwt,
)
from .tls import BADHOST_NAME, CLIENT_KEY_PASSWORD, TlsFiles, make_tls_files

__all__ = [
    "BADHOST_NAME",
    "CLIENT_KEY_PASSWORD",
    "CLUSTER_RESOURCE",
    "KAFKA_VERSION",
    "KAFKA_VERSIONS",
    "REAUTH_MS",
    "SASL_MECHANISMS",
    "SECURE_LISTENERS",
    "SECURE_USERS",
    "SUPER_USERS",
    "AclBinding",
    "AclError",
    "BrokerStartError",
    "ClusterStatus",
    "KafkaLibsError",
    "LocalKafka",
    "NodeStatus",
    "TlsFiles",
    "api_versions",
    "cache_dir",
    "create_acls",
    "default_state_dir",
    "delete_acls",
    "describe_acls",
    "ensure_kafka_libs",
    "fetch_metadata",
    "java_classpath",
    "java_executable",
    "main",
    "make_tls_files",
    "run_java",
    "running_bootstrap",
    "unsecured_jwt",
]

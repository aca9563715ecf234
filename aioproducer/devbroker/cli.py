"""The broker's command line, ``aioproducer broker ...`` (also
``python -m aioproducer.devbroker ...``): start, stop, status, logs, kill-node,
stop-node, start-node."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from .cluster import LocalKafka, default_state_dir
from .common import BrokerStartError
from .jars import KAFKA_VERSION, KafkaLibsError
from .security import SECURE_USERS


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", default=argparse.SUPPRESS,
                        help="the cluster's state directory (default: $AIOPRODUCER_BROKER_DIR "
                             f"or {default_state_dir()})")
    parser = argparse.ArgumentParser(
        prog="aioproducer broker",
        description=f"A local Apache Kafka {KAFKA_VERSION} (KRaft) cluster on 127.0.0.1.",
        parents=[common])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", parents=[common],
                           help="start (if not running) and print the bootstrap address")
    start.add_argument("--nodes", type=int, default=None,
                       help="number of nodes (default 1, or as many as already run)")
    start.add_argument("--timeout", type=float, default=120.0)
    start.add_argument("--ttl", type=float, default=None,
                       help="stop the cluster by itself after this many seconds")
    start.add_argument("--kafka-version", default=None, metavar="VERSION",
                       help=f"the Apache Kafka release to run (default {KAFKA_VERSION}; "
                            "3.x and 4.x, fetched from Maven Central once)")
    start.add_argument("--secure", action="store_true",
                       help="the secured mode: TLS and SASL listeners, users, ACLs (see "
                            "LocalKafka)")
    stop = sub.add_parser("stop", parents=[common], help="stop every node")
    stop.add_argument("--timeout", type=float, default=30.0)
    sub.add_parser("status", parents=[common],
                   help="exit 0 if every node is up, 1 if only some, 3 if none")
    logs = sub.add_parser("logs", parents=[common], help="the end of the nodes' logs")
    logs.add_argument("node", type=int, nargs="?", default=None)
    logs.add_argument("--lines", type=int, default=60)
    for name, what in (("kill-node", "SIGKILL a node"), ("stop-node", "stop a node cleanly"),
                       ("start-node", "restart a node with its data")):
        p = sub.add_parser(name, parents=[common], help=what)
        p.add_argument("node", type=int)
        p.add_argument("--timeout", type=float, default=60.0)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    state_dir = Path(args.dir) if getattr(args, "dir", None) else default_state_dir()
    cluster = LocalKafka(state_dir, stop_with_owner=False)
    try:
        if args.command == "start":
            status = cluster.status()
            if status.running and args.nodes in (None, len(status.nodes)) and (
                    not args.secure or any(n.listeners for n in status.nodes)) and (
                    args.kafka_version in (None, status.kafka_version)):
                print(status.bootstrap)
                return 0
            nodes = args.nodes or (len(status.nodes) if status.nodes else 1)
            cluster = LocalKafka(state_dir, nodes, stop_with_owner=False, ttl=args.ttl,
                                 secure=args.secure, kafka_version=args.kafka_version)
            started = time.monotonic()
            bootstrap = cluster.start(timeout=args.timeout)
            print(f"Kafka {cluster.kafka_version}: {nodes} node(s) up in "
                  f"{time.monotonic() - started:.1f} s; logs in {state_dir}/node-*/server.log")
            if args.secure:
                print(cluster.status().describe())
                print(f"certificates in {cluster.tls.directory}; users "
                      + ", ".join(f"{u}/{p}" for u, p in SECURE_USERS.items()))
            print(bootstrap)
            return 0
        if args.command == "stop":
            if cluster.status().nodes:
                cluster.stop(timeout=args.timeout)
                print(f"stopped the Kafka cluster in {state_dir}")
            else:
                print(f"no Kafka cluster in {state_dir}")
            return 0
        if args.command == "status":
            status = cluster.status()
            print(status.describe())
            if status.running:
                print(status.bootstrap)
                return 0
            return 1 if status.degraded else 3
        if args.command == "logs":
            nodes = [args.node] if args.node is not None else list(range(cluster.node_count()))
            print("\n".join(cluster.log_tail(i, args.lines) for i in nodes))
            return 0
        if args.command == "kill-node":
            cluster.kill_node(args.node)
        elif args.command == "stop-node":
            cluster.stop_node(args.node, timeout=args.timeout)
        elif args.command == "start-node":
            cluster.start_node(args.node, timeout=args.timeout)
        print(cluster.status().describe())
        return 0
    except (BrokerStartError, KafkaLibsError, RuntimeError, IndexError, ValueError) as exc:
        print(f"aioproducer broker: error: {exc}", file=sys.stderr)
        return 1

"""``swarmlog dev up | down | status | env``: the command line of the local dev cluster."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..errors import SwarmlogError

__all__ = ["EXIT_NOT_RUNNING", "add_parser", "run"]

# `status` exits with 3 when the cluster is not running, like `pg_ctl status` and LSB init scripts.
EXIT_NOT_RUNNING = 3


def add_parser(sub: Any, name: str, *, parents: list[argparse.ArgumentParser]) -> None:
    """List ``swarmlog dev`` among ``swarmlog``'s subcommands; :func:`run` parses its own arguments."""
    sub.add_parser("dev", help="local Kafka (1 or 3 brokers) + Postgres: up | down | status | env", add_help=False)


def run(argv: list[str]) -> int:
    """Run ``swarmlog dev`` with ``argv`` (the words after ``dev``); return the exit code."""
    from . import cluster  # psycopg and the cluster's tools: not for `swarmlog --help`

    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error (argparse has printed it)
        return exc.code if isinstance(exc.code, int) else 2
    ports = {
        "kafka_port": args.kafka_port,
        "controller_port": args.controller_port,
        "postgres_port": args.postgres_port,
        "brokers": args.brokers,
        "sasl_listener": args.sasl,
        "sasl_port": args.sasl_port,
    }
    try:
        if args.action == "up":
            info = cluster.up(home=args.home, **ports)
            for i, (pid, log) in enumerate(zip(info.kafka_pids, info.kafka_logs, strict=True)):
                address = info.bootstrap_servers.split(",")[i]
                label = "Kafka:" if len(info.kafka_pids) == 1 else f"Kafka {i + 1}:"
                print(f"{label:<11} {address} (pid {pid}, log {log})", file=sys.stderr)
            if info.sasl is not None:
                print(f"SASL:       {info.sasl_bootstrap_servers} (SASL_PLAINTEXT, SCRAM-SHA-512, user "
                      f"{info.sasl.username}; the password is in `swarmlog dev env`)", file=sys.stderr)
            print(f"PostgreSQL: {info.database_url} (pid {info.postgres_pid}, log {info.postgres_log})",
                  file=sys.stderr)
            return 0
        if args.action == "down":
            cluster.down(home=args.home, purge=args.purge)
            return 0
        if args.action == "status":
            found = cluster.status(home=args.home, **ports)
            print(f"home: {found.home}")
            for service in (*found.brokers, found.postgres):
                state = ("running" if service.healthy
                         else "not answering" if service.running else "stopped")
                shown = f"pid {service.pid}" if service.pid is not None else "no pid"
                print(f"{service.name:<9} {state:<14} {service.address:<16} {shown:<12} log {service.log}")
            return 0 if found.running else EXIT_NOT_RUNNING
        # env
        found = cluster.status(home=args.home, **ports)
        if not found.running:
            print("# the swarmlog dev cluster is not running; start it with `swarmlog dev up`",
                  file=sys.stderr)
        print(cluster.env_lines(found.info))
        return 0
    except SwarmlogError as exc:
        print(f"swarmlog dev {args.action}: error: {exc}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home", type=Path, default=None,
                        help="where the cluster keeps its files (env SWARMLOG_DEV_HOME; default "
                             "/var/tmp/swarmlog-dev as root, else ~/.cache/swarmlog/dev)")
    common.add_argument("--kafka-port", default=None, metavar="PORT[,PORT...]",
                        help="Kafka's client port on 127.0.0.1 (env SWARMLOG_DEV_KAFKA_PORT; default 19092); "
                             "with --brokers N, node n listens on it + 10*(n-1), or give one port per node")
    common.add_argument("--controller-port", default=None, metavar="PORT[,PORT...]",
                        help="Kafka's KRaft controller port "
                             "(env SWARMLOG_DEV_CONTROLLER_PORT; default 19093)")
    common.add_argument("--brokers", type=int, default=None,
                        help="how many Kafka nodes (env SWARMLOG_DEV_BROKERS; default 1): 3 gives every topic "
                             "3 replicas with min.insync.replicas=2")
    common.add_argument("--sasl", action=argparse.BooleanOptionalAction, default=None,
                        help="also listen for SASL_PLAINTEXT (SCRAM-SHA-512) clients as a user `up` creates; "
                             "`env` then points clients there (env SWARMLOG_DEV_SASL=1)")
    common.add_argument("--sasl-port", default=None, metavar="PORT[,PORT...]",
                        help="the SASL listener's port (env SWARMLOG_DEV_SASL_PORT; default 19094)")
    common.add_argument("--postgres-port", type=int, default=None,
                        help="PostgreSQL's port on 127.0.0.1 (env SWARMLOG_DEV_POSTGRES_PORT; default 15432)")
    parser = argparse.ArgumentParser(
        prog="swarmlog dev",
        description="A local Kafka (one node, or --brokers 3) and PostgreSQL for development, without Docker.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="{up,down,status,env}")
    actions.add_parser("up", parents=[common], help="start the cluster, or reuse the running one")
    down = actions.add_parser("down", parents=[common], help="stop the cluster (data is kept)")
    down.add_argument("--purge", action="store_true", help="also delete its topics and databases")
    actions.add_parser("status", parents=[common],
                       help="show whether it runs (exit 3 if not)")
    actions.add_parser("env", parents=[common],
                       help='print the variables that point swarmlog at it: eval "$(swarmlog dev env)"')
    return parser

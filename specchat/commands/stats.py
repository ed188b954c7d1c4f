"""`specchat stats`: speedup statistics from the chat database (stats_report.py: SQLite only, no torch)."""

from __future__ import annotations

from pathlib import Path


def add_parser(subparsers) -> None:
    stats = subparsers.add_parser("stats", help="speedup statistics from the chat database, per session and model pair")
    stats.add_argument("--json", action="store_true", help="print JSON instead of tables")
    stats.add_argument("--db", type=Path, help="database file (default: the app's)")
    stats.set_defaults(handler=run)


def run(args) -> int:
    from .stats_report import print_stats  # SQLAlchemy loads only when the command runs: --help stays fast

    return print_stats(args.db, args.json)

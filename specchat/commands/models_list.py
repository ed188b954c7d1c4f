"""`specchat models list`: the models available offline (catalog_report.py)."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    listing = subparsers.add_parser("list", help="models available offline")
    listing.set_defaults(handler=run)


def run(args) -> int:
    """Unfinished downloads are set apart, not listed as models."""
    # the engine (torch) and huggingface_hub load only when the command runs: --help stays fast and torch-free
    from .catalog_report import print_local_models

    return print_local_models()

"""`specchat models catalog`: curated targets and their drafts, what fits here, predicted speedups
(catalog_report.py)."""

from __future__ import annotations

from pathlib import Path

from .options import unit_interval


def add_parser(subparsers) -> None:
    catalog = subparsers.add_parser("catalog", help="curated targets and their drafts: licence, size, memory, "
                                                    "whether each fits here, predicted speedup")
    catalog.add_argument("--search", metavar="TEXT", help="only models whose id, family, licence or tokenizer has TEXT")
    catalog.add_argument("--alpha", type=unit_interval, default=0.7, help="acceptance rate to predict at (0.7)")
    catalog.add_argument("--dtype", metavar="FORMAT",
                         help="weight format of the fits-here verdict: fp32, bf16, fp16, q8_0, q4 or a GGUF type such "
                              "as Q4_K_M (default: each model's format here, as the app would use it)")
    catalog.add_argument("--costs", type=Path, help="cost table to predict from (default: the shipped one; "
                                                    "docs/measure/catalog_costs.sh writes one for this machine)")
    catalog.add_argument("--json", action="store_true", help="print JSON instead of a table")
    catalog.set_defaults(handler=run)


def run(args) -> int:
    # the engine's catalog (and torch) loads only when the command runs: --help stays fast and torch-free
    from .catalog_report import print_catalog

    return print_catalog(args.search, args.json, args.alpha, args.dtype, args.costs)

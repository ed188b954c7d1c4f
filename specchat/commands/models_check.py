"""`specchat models check TARGET DRAFT`: can DRAFT draft for TARGET?"""

from __future__ import annotations

from .options import EXIT_USAGE


def add_parser(subparsers) -> None:
    check = subparsers.add_parser("check", help="can DRAFT draft for TARGET?")
    check.add_argument("target")
    check.add_argument("draft")
    check.add_argument("--trust-remote-code", action="store_true")
    check.set_defaults(handler=run)


def run(args) -> int:
    # torch and the models load only when the command runs: --help stays fast and torch-free
    from ..engine.loading.load import LoadOptions
    from ..engine.loading.pair import check_sources
    from ..models.sources import ModelSource

    report = check_sources(ModelSource.parse(args.target), ModelSource.parse(args.draft),
                           LoadOptions(trust_remote_code=args.trust_remote_code))
    print(report.summary())
    return 0 if report.compatible else EXIT_USAGE

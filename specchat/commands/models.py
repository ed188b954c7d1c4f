"""`specchat models ACTION`: list, check, download, install-pair and catalog, one module each."""

from __future__ import annotations

from . import install_pair, models_catalog, models_check, models_download, models_list

ACTIONS = (models_list, models_check, models_download, install_pair, models_catalog)  # in `--help`'s order


def add_parser(subparsers) -> None:
    models = subparsers.add_parser("models", help="list, check and download models")
    actions = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    for action in ACTIONS:
        action.add_parser(actions)

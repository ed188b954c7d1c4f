"""A bare `specchat`: the desktop window (the terminal chat when there is no display), or `--self-test`."""

from __future__ import annotations

import argparse
import os
import sys

from . import chat


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `specchat` itself (no subcommand); it runs `run`."""
    parser.add_argument("--self-test", action="store_true",
                        help="load the default models headless, check that speculative and plain decoding agree, "
                             "print a one-line verdict and exit 0 (pass) or 1 (fail)")
    parser.set_defaults(handler=run, command=None)


def run(args) -> int:
    """The desktop window (the terminal chat when there is no display to open it on), or the self-test."""
    # Qt, torch and the models load only when the command runs: --help stays fast and torch-free
    if args.self_test:
        from .selftest import run_self_test

        return run_self_test()
    if sys.platform.startswith("linux") and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
                                                 or os.environ.get("QT_QPA_PLATFORM")):
        print("specchat: no display found; starting the terminal chat instead (specchat chat)", file=sys.stderr)
        return chat.run(chat.default_args())
    from ..ui.app import run_gui

    return run_gui()

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
    return run_window()


def run_window() -> int:
    """The desktop window, its modules imported first in the order and with the collector setting that make a
    launch quickest (docs/performance.md, "Launch"): the window is ready 0.6 s sooner (2.95-3.01 s before, 2.33 s
    after, alternated, nothing else running).
    - The layers without Qt (storage, chats, the engine and torch) are imported before PySide6: once loaded, PySide6
      wraps Python's import function (its `__feature_import__`), which cost every import after it 0.28 s in all.
    - The cycle collector is off while importing (imports make many objects and no garbage, yet the collector
      walked them over and over: 0.31 s). What the imports made is then set aside for good (gc.freeze), and the
      window's collector (ui/gc_guard.py) takes over."""
    import gc

    gc.disable()
    try:
        import specchat.chats  # noqa: F401
        import specchat.engine.loading.pair  # noqa: F401
        import specchat.storage  # noqa: F401

        from ..ui.app import run_gui
    finally:
        gc.freeze()
        gc.enable()
    return run_gui()

"""Command-line interface: `specchat [chat|generate|serve|bench|costs|models|stats|...]`."""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__
# torch-free: `--help` stays fast
from .commands import (app, bench, chat, costs, generate, gpu_check, manifest, models, prefill, serve, stats,
                       train_draft, train_head)
from .commands.options import EXIT_USAGE

COMMANDS = (chat, generate, bench, prefill, costs, gpu_check, train_draft, train_head, manifest, serve, stats,
            models)  # --help's order


def gui_main() -> int:
    """The GUI entry point (`specchat-gui`, no console window on Windows): always the desktop window."""
    _quiet_libraries(allow_network=False, progress_bars=False)
    return app.run_window()  # Qt and torch load here, not for the command line


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "stats":  # stats reads SQLite only: no torch, no transformers, instant
        downloading = args.command == "models" and getattr(args, "models_command", "") == "download"
        _quiet_libraries(allow_network=downloading, progress_bars=downloading or args.command in ("train-draft", "train-head"))
    try:
        return args.handler(args)
    except _user_errors(args.command) as error:
        print(f"specchat: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("\nspecchat: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (e.g. `| head`): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:  # a bug, not bad input: one line, with a way to see the details
        if os.environ.get("SPECCHAT_DEBUG"):
            raise
        print(f"specchat: unexpected error: {type(error).__name__}: {error} (set SPECCHAT_DEBUG=1 for details)",
              file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    """`specchat`'s parser: its own options (commands/app.py), then each command adds itself."""
    parser = argparse.ArgumentParser(prog="specchat", description=__doc__)
    parser.add_argument("--version", action="version", version=f"specchat {__version__}")
    app.add_arguments(parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def _user_errors(command: str | None) -> tuple[type[Exception], ...]:
    """Errors that are the user's to fix (one line, exit code 2): every SpecchatError, the storage layer's
    included (core/errors.py, which imports nothing: the engine and SQLAlchemy load only when a command runs)."""
    from .core.errors import SpecchatError

    return (SpecchatError,)


def _quiet_libraries(allow_network: bool, progress_bars: bool) -> None:
    """No network unless the user asked for a download; progress bars only where the command is long and shows
    its own (downloads, training); no library chatter.

    All through environment variables, read by huggingface_hub and transformers when they are first imported (none
    is yet: see the imports above), so that a launch which never needs transformers (a GGUF model on llama.cpp:
    engine/loading/light_tokenizer.py) does not import it (a second or two) only to quiet it."""
    if not allow_network:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # huggingface_hub reads it once, at import
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"  # hub's and transformers' bars (utils/logging: _tqdm_active)
    if not progress_bars:
        os.environ.setdefault("TQDM_DISABLE", "1")  # e.g. transformers' GGUF conversion bar; we print one line
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"  # transformers' default level, set at its import
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import warnings

    warnings.filterwarnings("ignore")

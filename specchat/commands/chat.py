"""`specchat chat`: an interactive chat in the terminal (terminal.py)."""

from __future__ import annotations

import argparse
import sys

from .options import attach_option, decoding_options, model_options


def add_parser(subparsers) -> None:
    chat = subparsers.add_parser("chat", help="interactive chat in the terminal")
    model_options(chat)
    decoding_options(chat)
    chat.add_argument("--system", help="system prompt")
    attach_option(chat)
    chat.set_defaults(handler=run)


def default_args() -> argparse.Namespace:
    """`specchat chat` with every option at its default (what a bare `specchat` runs without a display)."""
    parser = argparse.ArgumentParser(prog="specchat")
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["chat"])


def run(args) -> int:
    # torch and the models load only when the command runs: --help stays fast and torch-free
    from ..core.errors import PromptError
    from ..core.text import not_utf8
    from .attachments import read_attachments
    from .loading import load_for, run_options
    from .terminal import TerminalChat

    if (problem := not_utf8(args.system or "", "the system prompt")) is not None:
        raise PromptError(problem)
    options = run_options(args)  # the command line read once: nothing below takes args
    documents = read_attachments(args.attach)  # with the first message; before the model loads: said at once
    print("Loading the model…", file=sys.stderr, flush=True)
    pair = load_for(options)
    TerminalChat(pair, options.drafter, options.generation, system=args.system, documents=documents).loop()
    return 0

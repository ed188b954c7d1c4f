"""`specchat generate`: one reply, streamed (accepted draft tokens coloured on a terminal) or as a JSON record."""

from __future__ import annotations

import json
import sys
import threading

from .options import attach_option, decoding_options, model_options


def add_parser(subparsers) -> None:
    generate = subparsers.add_parser("generate", help="generate one reply and print it")
    generate.add_argument("--prompt", required=True, help="the user message")
    generate.add_argument("--system", help="system prompt")
    attach_option(generate)
    model_options(generate)
    decoding_options(generate)
    generate.add_argument("--stop", action="append", default=[], metavar="TEXT", help="stop string (repeatable)")
    generate.add_argument("--show-rejected", action="store_true", help="show rejected draft tokens, struck through")
    generate.add_argument("--json", action="store_true", help="print one JSON record instead of streaming")
    generate.set_defaults(handler=run)


def run(args) -> int:
    # torch and the models load only when the command runs: --help stays fast and torch-free
    from ..core.errors import PromptError
    from ..core.text import not_utf8
    from ..engine.chat_engine import LocalChatEngine, reply_to
    from ..engine.chat_prompt import Message
    from .attachments import plan_with_documents, read_attachments, sources_line
    from .loading import load_for, run_options
    from .terminal import StreamPrinter

    if not args.prompt.strip():
        raise PromptError("the prompt is empty")
    for text, what in ((args.prompt, "the prompt"), (args.system or "", "the system prompt")):
        if (problem := not_utf8(text, what)) is not None:
            raise PromptError(problem)
    options = run_options(args)  # the command line read once: nothing below takes args
    config, drafter = options.generation, options.drafter
    documents = read_attachments(args.attach)  # before the model loads: a bad file is said at once
    pair = load_for(options)
    engine = LocalChatEngine(pair.engine(drafter), whole_prompt=True)  # one message: read whole, or refused
    plan = plan_with_documents(pair, [Message("user", args.prompt)], [0], documents, args.system,
                               config.max_new_tokens)
    chat = list(plan.messages)
    if args.json:
        result = reply_to(engine, chat, args.system, config)
        record = {"prompt": args.prompt, "system": args.system, "target": pair.target.name,
                  "draft": pair.draft.name if pair.draft else None, "drafter": drafter, "k": config.k,
                  "adaptive_k": config.adaptive_k, "prompt_tokens": result.stats.prompt_tokens,
                  "documents": [d.name for d in documents], "sources": [s.label for s in plan.sources],
                  **result.to_dict()}
        print(json.dumps(record, ensure_ascii=False))
    else:
        printer = StreamPrinter(sys.stdout, show_rejected=args.show_rejected)
        result = reply_to(engine, chat, args.system, config, threading.Event(), printer.show)
        printer.finish(result, drafter, file=sys.stderr)
        if plan.sources:
            print(sources_line(plan), file=sys.stderr)
    settle_before_exit(pair)
    return 0


def settle_before_exit(pair) -> None:
    """A one-shot command's process ends before the model is ever idle: what a first launch owes (the kernel
    verdict, the cost curve: core/one_time.py) is measured after the reply, once for this file and machine, so that
    the next command's replies draft."""
    native = pair.target.native
    if native is not None:
        native.forget_next_turn()  # no next turn: the process ends
    if native is not None and native.one_time.owed():
        sys.stdout.flush()
        print(f"Measuring what a verification pass costs on {pair.target.name} here, after the reply (once for this "
              "file and machine)…", file=sys.stderr, flush=True)
        native.settle()

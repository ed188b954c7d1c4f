"""`specchat generate`: one reply, streamed (accepted draft tokens coloured on a terminal) or as a JSON record."""

from __future__ import annotations

import json
import sys
import threading

from .options import decoding_options, model_options


def add_parser(subparsers) -> None:
    generate = subparsers.add_parser("generate", help="generate one reply and print it")
    generate.add_argument("--prompt", required=True, help="the user message")
    generate.add_argument("--system", help="system prompt")
    model_options(generate)
    decoding_options(generate)
    generate.add_argument("--stop", action="append", default=[], metavar="TEXT", help="stop string (repeatable)")
    generate.add_argument("--show-rejected", action="store_true", help="show rejected draft tokens, struck through")
    generate.add_argument("--json", action="store_true", help="print one JSON record instead of streaming")
    generate.set_defaults(handler=run)


def run(args) -> int:
    # torch and the models load only when the command runs: --help stays fast and torch-free
    from ..engine import Message, PromptError, build_prompt_ids
    from .loading import drafter_choice, generation_config, load_for
    from .terminal import StreamPrinter

    if not args.prompt.strip():
        raise PromptError("the prompt is empty")
    config = generation_config(args)
    drafter = drafter_choice(args)
    pair = load_for(args, drafter)
    engine = pair.engine(drafter)
    prompt_ids = build_prompt_ids(pair.target.tokenizer, [Message("user", args.prompt)], args.system)
    if args.json:
        result = engine.generate(prompt_ids, config)
        record = {"prompt": args.prompt, "system": args.system, "target": pair.target.name,
                  "draft": pair.draft.name if pair.draft else None, "drafter": drafter, "k": args.k,
                  "adaptive_k": not args.no_adaptive, "prompt_tokens": len(prompt_ids), **result.to_dict()}
        print(json.dumps(record, ensure_ascii=False))
        return 0
    printer = StreamPrinter(sys.stdout, show_rejected=args.show_rejected)
    cancel = threading.Event()
    result = engine.generate(prompt_ids, config, cancel, on_event=printer.show)
    printer.finish(result, drafter, file=sys.stderr)
    return 0

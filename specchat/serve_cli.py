"""`specchat serve`: its options and its handler (kept out of cli.py, which builds every other command)."""

from __future__ import annotations

import argparse
import os
import sys


def add_serve_command(commands, model_options, decoding_options, handler) -> None:
    serve = commands.add_parser(
        "serve", help="an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, /v1/models)",
        description="Serve the model over OpenAI's HTTP API, with speculative decoding. Requests that leave out "
                    "temperature, top_p, top_k or max_tokens get the values given here (greedy by default). "
                    "Each streamed chunk carries a 'specchat' field: every token's origin (draft or target) "
                    "and the acceptance so far.")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: this machine only; any other needs a key)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    serve.add_argument("--api-key", default=None,
                       help="require 'Authorization: Bearer KEY' (default: SPECCHAT_API_KEY if set)")
    serve.add_argument("--model-id", default=None, help="the model's name in the API (default: the target's)")
    serve.add_argument("--max-waiting", type=int, default=8,
                       help="requests that may wait behind the one being generated; more get 429 (default 8)")
    serve.add_argument("--no-store", action="store_true", help="do not record runs in the statistics database")
    model_options(serve)
    decoding_options(serve)
    serve.set_defaults(handler=handler)


def run_serve(args: argparse.Namespace, config, drafter: str, load) -> int:
    """Checks the binding, loads the models (load(): the CLI's loader, with the draft model when the drafter needs
    one), and serves until Ctrl-C."""
    from .engine import SpecchatError
    from .server.run import check_binding, serve_forever
    from .server.served import ServedModel

    api_key = args.api_key or os.environ.get("SPECCHAT_API_KEY") or None
    if args.max_waiting < 0:
        raise SpecchatError(f"--max-waiting must be 0 or more (got {args.max_waiting})")
    check_binding(args.host, api_key)  # before minutes of loading
    print("Loading the model…", file=sys.stderr, flush=True)
    pair = load()
    store = None
    if not args.no_store:
        from .storage import Store

        store = Store.open()
    served = ServedModel(pair, drafter, config, store, model_id=args.model_id)
    try:
        serve_forever(served, args.host, args.port, api_key, args.max_waiting,
                      announce=lambda line: print(line, file=sys.stderr, flush=True))
    finally:
        if store is not None:
            store.close()
    return 0

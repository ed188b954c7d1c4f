"""`specchat serve`: the model behind OpenAI's HTTP API (specchat/server), with speculative decoding."""

from __future__ import annotations

import sys
from pathlib import Path

from ..core.errors import SpecchatError
from .options import decoding_options, model_options, secret_from


def add_parser(subparsers) -> None:
    serve = subparsers.add_parser(
        "serve", help="an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, /v1/models)",
        description="Serve the model over OpenAI's HTTP API, with speculative decoding. Requests that leave out "
                    "temperature, top_p, top_k or max_tokens get the values given here (greedy by default). "
                    "Each streamed chunk carries a 'specchat' field: every token's origin (draft or target) "
                    "and the acceptance so far.")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: this machine only; any other needs a key)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    serve.add_argument("--api-key", default=None,
                       help="require 'Authorization: Bearer KEY'. Prefer the environment variable SPECCHAT_API_KEY "
                            "or --api-key-file: a key on the command line shows in `ps`")
    serve.add_argument("--api-key-file", type=Path, default=None, metavar="FILE",
                       help="read the API key from FILE (its first line)")
    serve.add_argument("--ctx-size", type=int, default=None, metavar="N",
                       help="the served context in tokens, prompt and reply together, fixed at start; a request's "
                            "max_tokens beyond it gets 400 (default 4096, or the model's context if smaller)")
    serve.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                       help="also answer requests addressed to this host name (repeatable; '*' any). Loopback "
                            "names and addresses are always answered; others get 421, which stops web pages "
                            "reaching the server through DNS rebinding")
    serve.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                       help="let web pages from this origin use the API, e.g. http://localhost:3000 (repeatable; "
                            "'*' any). Pages on loopback origins may; other pages get 403")
    serve.add_argument("--model-id", default=None, help="the model's name in the API (default: the target's)")
    serve.add_argument("--max-waiting", type=int, default=8,
                       help="requests that may wait behind the one being generated; more get 429 (default 8)")
    serve.add_argument("--no-store", action="store_true", help="do not record runs in the statistics database")
    model_options(serve)
    decoding_options(serve)
    serve.set_defaults(handler=run)


def run(args) -> int:
    """Checks the options and the binding, loads the models (with the draft model when the drafter needs one),
    and serves until Ctrl-C."""
    # torch, the models and the HTTP stack load only when the command runs: --help stays fast and torch-free
    from ..chats.run_context import RunContext
    from ..server.guard import HostPolicy
    from ..server.run import check_binding, serve_forever
    from ..server.served import ServedModel
    from ..storage import Store
    from .loading import load_for, run_options

    options = run_options(args)  # the command line read once: nothing below takes args
    api_key = secret_from(args.api_key, args.api_key_file, "SPECCHAT_API_KEY", "--api-key")
    if args.max_waiting < 0:
        raise SpecchatError(f"--max-waiting must be 0 or more (got {args.max_waiting})")
    if args.ctx_size is not None and args.ctx_size < 16:
        raise SpecchatError(f"--ctx-size must be at least 16 tokens (got {args.ctx_size})")
    check_binding(args.host, api_key)  # before minutes of loading
    print("Loading the model…", file=sys.stderr, flush=True)
    pair = load_for(options)
    store = None if args.no_store else Store.open()
    served = ServedModel(pair, RunContext.of_pair(pair, options.drafter, options.generation), store,
                         model_id=args.model_id, context_size=args.ctx_size)
    policy = HostPolicy(bind_host=args.host, allowed_hosts=tuple(args.allowed_host),
                        allowed_origins=tuple(args.allowed_origin))
    try:
        serve_forever(served, args.host, args.port, api_key, args.max_waiting,
                      announce=lambda line: print(line, file=sys.stderr, flush=True), policy=policy)
    finally:
        if store is not None:
            store.close()
    return 0

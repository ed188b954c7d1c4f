"""`specchat serve`: its options and its handler (kept out of cli.py, which builds every other command)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

KEY_ON_COMMAND_LINE = ("note: {flag} on the command line can be read by other users of this machine (ps, shell "
                       "history); prefer {env} or {flag}-file FILE")


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
    serve.set_defaults(handler=handler)


def run_serve(args: argparse.Namespace, config, drafter: str, load) -> int:
    """Checks the binding, loads the models (load(): the CLI's loader, with the draft model when the drafter needs
    one), and serves until Ctrl-C."""
    from .engine import SpecchatError
    from .server.guard import HostPolicy
    from .server.run import check_binding, serve_forever
    from .server.served import ServedModel

    api_key = secret_from(args.api_key, args.api_key_file, "SPECCHAT_API_KEY", "--api-key")
    if args.max_waiting < 0:
        raise SpecchatError(f"--max-waiting must be 0 or more (got {args.max_waiting})")
    if args.ctx_size is not None and args.ctx_size < 16:
        raise SpecchatError(f"--ctx-size must be at least 16 tokens (got {args.ctx_size})")
    check_binding(args.host, api_key)  # before minutes of loading
    print("Loading the model…", file=sys.stderr, flush=True)
    pair = load()
    store = None
    if not args.no_store:
        from .storage import Store

        store = Store.open()
    served = ServedModel(pair, drafter, config, store, model_id=args.model_id, context_size=args.ctx_size)
    policy = HostPolicy(bind_host=args.host, allowed_hosts=tuple(args.allowed_host),
                        allowed_origins=tuple(args.allowed_origin))
    try:
        serve_forever(served, args.host, args.port, api_key, args.max_waiting,
                      announce=lambda line: print(line, file=sys.stderr, flush=True), policy=policy)
    finally:
        if store is not None:
            store.close()
    return 0


def secret_from(value: str | None, key_file: Path | None, env: str, flag: str) -> str | None:
    """A key from the command line (with a note on stderr that `ps` shows it), a key file (its first line), or the
    environment variable `env`, in that order; None when none is given. SpecchatError for a key file that cannot
    be read or is empty."""
    from .engine import SpecchatError

    if value:
        print(KEY_ON_COMMAND_LINE.format(flag=flag, env=env), file=sys.stderr)
        return value
    if key_file is not None:
        try:
            lines = key_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            raise SpecchatError(f"cannot read the key file {key_file}: {getattr(error, 'strerror', None) or error}") \
                from None
        if not lines or not lines[0].strip():
            raise SpecchatError(f"the key file {key_file} is empty")
        return lines[0].strip()
    return os.environ.get(env) or None


def without_keys(argv: list[str]) -> list[str]:
    """The command line as a report records it, with the value of --remote-key / --api-key replaced by "…"."""
    shown, hide = [], False
    for arg in argv:
        name = arg.split("=", 1)[0]
        shown.append("…" if hide else f"{name}=…" if name in ("--remote-key", "--api-key") and "=" in arg else arg)
        hide = arg in ("--remote-key", "--api-key")
    return shown

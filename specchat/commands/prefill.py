"""`specchat prefill`: time prompt reading against llama-cpp-python on the same file and threads, alternated
(bench/prefill.py measures)."""

from __future__ import annotations

import os

from .options import positive_int, thread_count


def add_parser(subparsers) -> None:
    prefill = subparsers.add_parser("prefill", help="time prompt reading against llama-cpp-python on the same GGUF "
                                                    "file, alternated in one process")
    prefill.add_argument("--target", default="embedded", help="a GGUF target SRC (default: the embedded one)")
    prefill.add_argument("--tokens", type=positive_int, default=2750, help="prompt length in tokens")
    prefill.add_argument("--rounds", type=positive_int, default=3, help="alternated rounds")
    prefill.add_argument("--threads", type=thread_count, help="llama.cpp threads (default: every core)")
    prefill.add_argument("--exactness", default="auto", choices=("auto", "bit-identical", "distribution"))
    prefill.add_argument("--on-decoding-context", action="store_true",
                         help="read on the decoding context, as before the prompt reader (for comparison)")
    prefill.set_defaults(handler=run)


def run(args) -> int:
    from ..bench.prefill import compare, document_tokens, summary  # torch loads only when the command runs
    from ..core.errors import SpecchatError
    from ..engine.backends.llamacpp.state_shelf import MEMORY_ENV
    from ..engine.loading.load import LoadOptions, load_model
    from ..models.sources import ModelSource

    # Every round reads the prompt afresh, as llama-cpp-python's does: with the state shelf on, the rounds after
    # the first restored the kept state of the same tokens (1.2 s against 11 s for 2,750 tokens) and timed that.
    os.environ[MEMORY_ENV] = "0"

    loaded = load_model(ModelSource.parse(args.target), LoadOptions(backend="llama.cpp", device="cpu",
                                                                    threads=args.threads, exactness=args.exactness))
    if loaded.native is None:
        raise SpecchatError(f"{args.target} is not a GGUF file on llama.cpp")
    ids = document_tokens(loaded.tokenizer, args.tokens)
    print(f"{loaded.name}: {len(ids)} prompt tokens, {loaded.native.threads} threads, "
          f"{loaded.native.kernels.label}")
    print(summary(compare(loaded.native, ids, args.rounds, reader=not args.on_decoding_context)))
    return 0

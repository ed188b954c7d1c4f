"""Up to how many rows a GGUF file's llama.cpp passes stay bit-identical to one-token passes, with weight
repacking on and off (docs/exactness.md), and with --timings the time of passes of 1..16 tokens.

    .venv/bin/python docs/measure/kernel_rows.py FILE.gguf [--timings]

Measures afresh (the app's cache in kernels.json is not read). Each layout loads the file once.
"""

import argparse
import time

import torch

from specchat.engine.backends.llamacpp.kernels import measure_verdict
from specchat.engine.backends.llamacpp.llama_runner import LlamaCppModel


def pass_ms(runner, tokens: list[int], n: int, prefix: int = 200, repeats: int = 8) -> float:
    """The fastest of `repeats` passes of n tokens after `prefix` cached ones, in ms."""
    cache = runner.new_cache(prefix + n + 1)
    runner.forward(torch.tensor([tokens[:prefix]]), cache, keep=1)
    best = float("inf")
    for _ in range(repeats):
        runner.rollback(cache, prefix)
        started = time.perf_counter()
        runner.forward(torch.tensor([tokens[prefix:prefix + n]]), cache, keep=n)
        best = min(best, time.perf_counter() - started)
    return best * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("gguf")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--timings", action="store_true")
    args = parser.parse_args()
    for repack in (True, False):
        model = LlamaCppModel(args.gguf, args.threads, repack=repack)
        verdict = measure_verdict(model.runner())
        line = f"repack={repack}: exact up to {verdict.exact_rows} rows, chunked prefill exact: {verdict.chunked_prefill}"
        if args.timings:
            runner = model.runner()
            tokens = [100 + (7919 * i) % (model.vocab_size - 200) for i in range(240)]
            cache = runner.new_cache(240)
            started = time.perf_counter()
            runner.forward(torch.tensor([tokens[:200]]), cache, keep=1)
            line += f"; prefill 200: {(time.perf_counter() - started) * 1000:.0f} ms; passes (ms): " + " ".join(
                f"{n}:{pass_ms(runner, tokens, n):.1f}" for n in (1, 2, 4, 8, 16))
        print(line, flush=True)
        model.close()


if __name__ == "__main__":
    main()

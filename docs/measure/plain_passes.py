"""Plain decoding's passes against llama-cpp-python's, alternated in one process: our runner's forward of one
token at a time after a short prompt, and Llama.eval([token]) on the same tokens, the same file and 2 threads, both
with flash attention and the bfloat16 cache (peer_llama: the layout our runner loads). Prints ms a token, 3 rounds.

    .venv/bin/python docs/measure/plain_passes.py [--target SRC]   # default: the embedded model
"""

import argparse
import time

import torch

from specchat.engine.backends.llamacpp.extra_buffers import peer_llama
from specchat.engine.backends.llamacpp.cache_types import decoding_types
from specchat.engine.loading.load import LoadOptions, load_model
from specchat.models.sources import ModelSource

PROMPT = "Tell me a long story about a lighthouse keeper and the sea."
STEPS = [100 + (7919 * i) % 40000 for i in range(300)]  # fixed token ids: the same work on both sides
CONTEXT = 2048


def ours_ms(native, prompt: list[int]) -> float:
    """ms a token of our runner's one-token passes after `prompt`, on a fresh runner."""
    runner = native.runner()
    cache = runner.new_cache(CONTEXT)
    runner.forward(torch.tensor([prompt]), cache, keep=1, prefill=True)
    started = time.perf_counter()
    for token in STEPS:
        runner.forward(torch.tensor([[token]]), cache, keep=1)
    return (time.perf_counter() - started) / len(STEPS) * 1000


def theirs_ms(peer, prompt: list[int]) -> float:
    """ms a token of llama-cpp-python's eval of one token at a time after `prompt`, from an empty cache."""
    peer.reset()
    peer.eval(prompt)
    started = time.perf_counter()
    for token in STEPS:
        peer.eval([token])
    return (time.perf_counter() - started) / len(STEPS) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="embedded")
    loaded = load_model(ModelSource.parse(parser.parse_args().target), LoadOptions(backend="llama.cpp", device="cpu", threads=2))
    native = loaded.native
    prompt = loaded.tokenizer(PROMPT)["input_ids"]
    peer = peer_llama(model_path=str(native.path), n_ctx=CONTEXT, n_threads=2, n_threads_batch=2, flash_attn=True,
                      type_k=decoding_types(False)[0], type_v=decoding_types(False)[1], verbose=False)
    print(native.kernels.label)
    for round_ in range(3):
        ours, theirs = ours_ms(native, prompt), theirs_ms(peer, prompt)
        print(f"round {round_ + 1}: ours {ours:.2f} ms/token, llama-cpp-python {theirs:.2f} ms/token, "
              f"ours {theirs / ours:.2f}x")


if __name__ == "__main__":
    main()

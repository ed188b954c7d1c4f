"""Prompt reading against llama-cpp-python on the same GGUF file and threads, alternated in one process.

A figure is a ratio measured side by side: each round reads the same document once through our engine's prefill (a
fresh runner, so nothing is reused) and once through llama-cpp-python's `Llama.eval` (after `reset`), in turn, so
that the machine's drift touches both alike. The document is public-domain PEP prose (resources/documents), cut to
the asked number of tokens, with a question after it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from ..engine.backends.llamacpp.extra_buffers import peer_llama


@dataclass(frozen=True)
class PrefillRound:
    ours_s: float
    peer_s: float

    @property
    def ratio(self) -> float:
        """llama-cpp-python's seconds over ours: above 1, we read faster."""
        return self.peer_s / self.ours_s


def document_tokens(tokenizer, tokens: int) -> list[int]:
    """A chat prompt of exactly `tokens` tokens: PEP passages and a question, as a user would paste them."""
    from ..training.documents import PEPS, load_documents

    passages = [record["text"] for record in load_documents(PEPS)]
    text, ids = "", []
    for passage in passages:
        text += passage + "\n\n"
        ids = tokenizer(text + "Summarize the passages above in three sentences.")["input_ids"]
        if len(ids) >= tokens:
            break
    return ids[-tokens:]


def time_ours(native, ids: list[int], reader: bool = True) -> float:
    """Seconds of our prefill of `ids` on a new runner (its context made before the clock starts); `reader` False:
    read on the decoding context, as before the prompt reader (engine/backends/llamacpp/prompt_reader.py)."""
    runner = native.runner()
    runner.uses_reader = reader
    cache = runner.new_cache(len(ids) + 1)
    started = time.perf_counter()
    runner.forward(torch.tensor([ids]), cache, keep=1, prefill=True)
    return time.perf_counter() - started


def time_peer(peer, ids: list[int]) -> float:
    """Seconds of llama-cpp-python's eval of `ids` from an empty cache."""
    peer.reset()  # and its KV cache: nothing of the last round is reused
    started = time.perf_counter()
    peer.eval(ids)
    return time.perf_counter() - started


def compare(native, ids: list[int], rounds: int, reader: bool = True, batch: int = 512) -> list[PrefillRound]:
    """`rounds` alternated readings of `ids`: ours (time_ours) then llama-cpp-python's (default settings, our thread
    count)."""
    peer = peer_llama(model_path=str(native.path), n_ctx=len(ids) + 64, n_batch=batch, n_threads=native.threads,
                      n_threads_batch=native.threads, verbose=False)
    results = []
    for _ in range(rounds):
        results.append(PrefillRound(ours_s=time_ours(native, ids, reader), peer_s=time_peer(peer, ids)))
    return results


def summary(results: list[PrefillRound]) -> str:
    ratios = [r.ratio for r in results]
    rows = "\n".join(f"  round {i + 1}: ours {r.ours_s:.2f} s, llama-cpp-python {r.peer_s:.2f} s, {r.ratio:.2f}x"
                     for i, r in enumerate(results))
    return (f"{rows}\nprompt reading vs llama-cpp-python: median {statistics.median(ratios):.2f}x "
            f"(range {min(ratios):.2f}-{max(ratios):.2f}x)")

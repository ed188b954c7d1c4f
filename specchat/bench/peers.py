"""Peers in `specchat bench`: llama.cpp as its users run it, through llama-cpp-python's own generation loop, on the
same GGUF file, prompts and threads, side by side with our modes in one run.

- `llama-cpp`: `Llama.generate`, greedy (temperature 0), its own sampler chain and KV-cache prefix reuse, with flash
  attention and a bfloat16 KV cache as our runner (engine/backends/llamacpp/llama_runner.py says why);
- `llama-cpp-pld`: the same with llama-cpp-python's prompt-lookup draft (`LlamaPromptLookupDecoding`).

Both stop at the target's end tokens or the token budget, as our engine does. llama-cpp-python is an
optional install (the `llama` extra); the modes say how to get it when it is missing.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..core.errors import SpecchatError
from ..engine.backends.llamacpp import library
from ..engine.backends.llamacpp.extra_buffers import peer_llama
from ..engine.backends.llamacpp.library import INSTALL_HINT, default_threads, gpu_layers_for
from ..engine.backends.llamacpp.cache_types import decoding_types

PEER_MODES = ("llama-cpp", "llama-cpp-pld")
CONTEXT = 2048


def require_llama_cpp() -> None:
    if not library.llama_cpp_available():
        raise SpecchatError(f"the llama-cpp modes run llama-cpp-python, which is not installed; {INSTALL_HINT}")


class LlamaCppPeer:
    """llama-cpp-python's high-level Llama on a GGUF file; one instance per mode (each keeps its own KV cache)."""

    def __init__(self, gguf_path: Path, end_tokens: set[int], prompt_lookup: bool, threads: int | None = None,
                 lookup_tokens: int = 10):
        require_llama_cpp()
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        threads = threads or default_threads()
        gpu_layers, _ = gpu_layers_for(Path(gguf_path))  # offloaded as our target is: the same device, same layers
        type_k, type_v = decoding_types(offloaded=gpu_layers != 0)
        self._make = lambda n_ctx: peer_llama(
            model_path=str(gguf_path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
            n_gpu_layers=gpu_layers,
            flash_attn=True, type_k=type_k, type_v=type_v,  # as in our runner: the same numbers
            draft_model=LlamaPromptLookupDecoding(num_pred_tokens=lookup_tokens) if prompt_lookup else None,
            # its draft mode keeps logits of every position but sizes that array from this flag: without it, any
            # sequence past n_batch (512) tokens fails with a numpy shape error
            logits_all=prompt_lookup, verbose=False)
        self.n_ctx = CONTEXT
        self.llama = self._make(self.n_ctx)
        self.end_tokens = set(end_tokens)  # the target's, as our engine stops at

    def _room_for(self, tokens: int) -> None:
        """llama-cpp-python writes past its arrays (a numpy error) when a generation outgrows its context, and a
        context sized for the longest prompt up front costs its prompt-lookup mode n_ctx x vocab floats of logits:
        so it is remade larger when a prompt needs it."""
        if tokens > self.n_ctx:
            self.n_ctx = -(-tokens // 1024) * 1024
            self.llama = None  # the old context's memory goes before the new one is made
            self.llama = self._make(self.n_ctx)

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> tuple[list[int], float]:
        """Greedy reply token ids (with the end token, if reached) and the wall time, prompt processing included.
        llama-cpp-python's prompt-lookup mode can trip over its own cached state between prompts (a numpy shape
        error); the prompt is then run again on a fresh instance, which reuses nothing."""
        self._room_for(len(prompt_ids) + max_new_tokens + 32)  # 32: its prompt-lookup draft may run ahead
        try:
            return self._generate(prompt_ids, max_new_tokens)
        except ValueError:
            self.llama = None
            self.llama = self._make(self.n_ctx)
            try:
                return self._generate(prompt_ids, max_new_tokens)
            except ValueError as error:
                raise SpecchatError(f"llama-cpp-python failed on a prompt of {len(prompt_ids)} tokens: {error}") \
                    from error

    def _generate(self, prompt_ids: list[int], max_new_tokens: int) -> tuple[list[int], float]:
        tokens: list[int] = []
        started = time.perf_counter()
        for token in self.llama.generate(prompt_ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0):
            tokens.append(int(token))  # the end token included, as our engine's replies include it
            if token in self.end_tokens or len(tokens) >= max_new_tokens:
                break
        return tokens, time.perf_counter() - started

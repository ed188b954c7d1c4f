"""Reading a prompt at llama.cpp's own speed for a decoding context that must stay batch-invariant.

The decoding context keeps a bfloat16 KV cache (llama_runner.py's module docstring): with it, flash attention reduces
every row in one order whatever the pass's size, so a verification pass gives the rows of one-token passes. The
price is a prompt's reading: over a bfloat16 cache llama.cpp has only that row-by-row kernel, and a long prompt's
attention then costs about 2.5 times what llama.cpp's tiled float16 kernel takes (docs/performance.md).

Plain and speculative decoding share their prefill, so the prefill need not use a decoding pass's kernels. A
PromptReader is a second llama.cpp context with llama.cpp's default float16 cache and fastest kernels. It reads the
prompt, and its KV entries are converted to bfloat16 and restored into the decoding context
(llama_state_seq_get_data / set_data): every reply then starts from the same KV entries and last logits, and
decodes on batch-invariant kernels.

A reused prefix gives what a fresh read gives. The reader feeds a prompt in passes that end at multiples of CHUNK
positions, so a position's entries depend only on the tokens up to the end of its chunk. It keeps the positions of
whole chunks that the next prompt starts with and reads the rest as a fresh read would. Positions that the decoding
context produced (a reply's tokens) are never reused: they came from other kernels, and a fresh read would differ.
"""

from __future__ import annotations

import ctypes
import logging
import struct
import threading

import torch

from specchat.core.errors import DecodeError, ModelLoadError, PrefillCancelled

log = logging.getLogger(__name__)

CHUNK = 256  # positions per pass, aligned to multiples of it: the fastest size here (docs/performance.md), finer reuse
READ_TYPE = 1  # GGML_TYPE_F16: llama.cpp's default cache, with its tiled flash-attention kernel
DECODE_TYPE = 30  # GGML_TYPE_BF16 (llama_runner.KV_CACHE_TYPE)


class PromptReader:
    """A float16 llama.cpp context that reads prompts for one decoding context (LlamaCppRunner)."""

    def __init__(self, model, n_ctx: int):
        """`model`: the LlamaCppModel; `n_ctx`: positions, the decoding context's (a prompt it holds fits here)."""
        self.llama = model.llama
        self.n_ctx = n_ctx
        params = self.llama.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = CHUNK
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = model.threads  # fixed: the same prompt, the same numbers
        params.flash_attn_type = self.llama.LLAMA_FLASH_ATTN_TYPE_ENABLED
        params.type_k = params.type_v = READ_TYPE
        params.no_perf = True
        params.op_offload = model.placement.offloaded
        self._ctx = self.llama.llama_init_from_model(model.handle, params)
        if not self._ctx:
            raise ModelLoadError(f"llama.cpp could not make a context of {n_ctx} positions (out of memory?)")
        self._batch = self.llama.llama_batch_init(CHUNK, 0, 1)
        self._held: list[int] = []  # the tokens whose positions this context holds, all read by it
        self._lock = threading.Lock()

    def reusable(self, tokens: list[int]) -> int:
        """How many of `tokens`' first positions a read would keep: the whole chunks they share with what is held."""
        return common_prefix(self._held, tokens, len(tokens)) // CHUNK * CHUNK

    def read(self, tokens: list[int], cancel: threading.Event | None = None) -> tuple[ctypes.Array, int]:
        """Reads `tokens` (keeping the whole chunks already held); returns the state of the sequence as a bfloat16
        cache holds it (a buffer for llama_state_seq_set_data) and how many positions were kept rather than read.
        No logits: the caller runs the prompt's last token itself. PrefillCancelled when `cancel` is set between
        passes."""
        state, kept = self.read_raw(tokens, cancel)
        as_decoding_state(state)
        return state, kept

    def read_raw(self, tokens: list[int], cancel: threading.Event | None = None) -> tuple[ctypes.Array, int]:
        """As read, but the state as this float16 context holds it: what a later read can continue from (the
        state shelf keeps it: state_shelf.py)."""
        with self._lock:
            kept = self.reusable(tokens)
            self._drop_from(kept)
            start = kept
            while start < len(tokens):
                if start > kept and cancel is not None and cancel.is_set():
                    raise PrefillCancelled
                end = min((start // CHUNK + 1) * CHUNK, len(tokens))
                self._decode(tokens[start:end], start)
                self._held.extend(tokens[start:end])
                start = end
            return self._state(), kept

    def restore(self, tokens: list[int] | tuple[int, ...], state: ctypes.Array) -> bool:
        """Makes this context hold `state`, a state that a reader of the same model and settings wrote for `tokens`
        (read_raw), in place of what it held: the next read keeps its whole chunks that the prompt starts with and
        drops the rest. False, holding nothing, where it does not fit or llama.cpp refuses it."""
        with self._lock:
            self._drop_from(0)
            if len(tokens) > self.n_ctx or self.llama.llama_state_seq_set_data(self._ctx, state, len(state),
                                                                                 0) != len(state):
                self.llama.llama_memory_seq_rm(self.llama.llama_get_memory(self._ctx), 0, 0, -1)
                return False
            self._held = list(tokens)
            return True

    def _decode(self, tokens: list[int], position: int) -> None:
        batch = self._batch
        batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = position + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = False
        status = self.llama.llama_decode(self._ctx, batch)
        if status != 0:
            self._drop_from(position)
            raise DecodeError(f"llama.cpp could not read a prompt pass of {len(tokens)} tokens (status {status})")

    def _state(self) -> ctypes.Array:
        state = sequence_state(self.llama, self._ctx)
        if state is None:
            raise DecodeError("llama.cpp could not copy a prompt's KV entries")
        return state

    def _drop_from(self, position: int) -> None:
        if len(self._held) > position:
            self.llama.llama_memory_seq_rm(self.llama.llama_get_memory(self._ctx), 0, position, -1)
            del self._held[position:]

    def close(self) -> None:
        if self._ctx is not None:
            self.llama.llama_free(self._ctx)
            self.llama.llama_batch_free(self._batch)
            self._ctx = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


def common_prefix(held: list[int], tokens: list[int], most: int) -> int:
    """How many of `tokens`' first tokens `held` starts with, at most `most`: the positions a context can keep."""
    common, limit = 0, min(len(held), len(tokens), most)
    while common < limit and held[common] == tokens[common]:
        common += 1
    return common


def sequence_state(llama, ctx) -> ctypes.Array | None:
    """Sequence 0's state in context `ctx` as llama.cpp writes it (llama_state_seq_get_data), in a buffer of
    exactly its size; None when llama.cpp could not copy it."""
    size = llama.llama_state_seq_get_size(ctx, 0)
    buffer = (ctypes.c_uint8 * size)()
    return buffer if llama.llama_state_seq_get_data(ctx, buffer, size, 0) == size else None


class StateFormatError(ValueError):
    """A sequence state laid out otherwise than a plain KV cache's (another memory kind, cell extras)."""


def as_decoding_state(state: bytearray | memoryview) -> None:
    """Rewrites, in place, a sequence state of a float16 KV cache (llama_state_seq_get_data) for a bfloat16 cache of
    the same model: each layer's K and V rows converted, rounding to nearest even as ggml does (torch's conversion,
    the same bits and several times numpy's speed), and the type fields changed. The layout (llama-kv-cache.cpp,
    state_write): magic, seq id, streams; per stream the cell count, per cell its position, sequence count and ids;
    then v_trans, the layer count, and per layer a type, a row size and the rows, K first then V.
    StateFormatError for any other layout (an SWA or recurrent memory, a transposed V, cells with extras)."""
    view = memoryview(state).cast("B")
    offset = 8  # magic, seq id
    (streams,) = struct.unpack_from("<I", view, offset)
    offset += 4
    for _ in range(streams):
        (cells,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if not cells:
            continue
        for _ in range(cells):
            _, n_seq = struct.unpack_from("<iI", view, offset)
            offset += 8 + 4 * n_seq
        v_trans, layers = struct.unpack_from("<II", view, offset)
        offset += 8
        if v_trans:
            raise StateFormatError("a transposed V cache (no flash attention)")
        for _ in range(2 * layers):  # K of every layer, then V of every layer
            kind, row = struct.unpack_from("<iQ", view, offset)
            if kind != READ_TYPE:
                raise StateFormatError(f"a cache of ggml type {kind}")
            size = cells * row
            if offset + 12 + size > len(view):
                raise StateFormatError("a state shorter than its layers")
            struct.pack_into("<i", view, offset, DECODE_TYPE)
            offset += 12
            halves = torch.frombuffer(view, dtype=torch.float16, count=size // 2, offset=offset)
            halves.copy_(halves.to(torch.bfloat16).view(torch.float16))
            offset += size
    if offset != len(view):
        raise StateFormatError("a state longer than its layers")

"""Reading a prompt at llama.cpp's own speed for a decoding context that must stay batch-invariant.

The decoding context keeps a bfloat16 KV cache (llama_runner.py's module docstring): with it, flash attention reduces
every row in one order whatever the pass's size, so a verification pass gives the rows of one-token passes. The
price is a prompt's reading: over a bfloat16 cache llama.cpp has only that row-by-row kernel, and a long prompt's
attention then costs about 2.5 times what llama.cpp's tiled float16 kernel takes (docs/performance.md).

Plain and speculative decoding share their prefill, so the prefill need not use a decoding pass's kernels. A
PromptReader is a second llama.cpp context with llama.cpp's default float16 cache, without flash attention, as
llama-cpp-python reads a prompt by default. It reads the whole prompt, the last token's logits (and hidden state, for
a runner that keeps them) coming from its last pass, and its KV entries are converted to bfloat16 (V from its
transposed layout into rows) and restored into the decoding context (llama_state_seq_get_data / set_data) before that
context's next pass: every reply then starts from the same KV entries and last logits, and decodes on batch-invariant
kernels, and the first token waits for no move. Without flash attention rather than with it (READ_FLASH_ATTN): a
short pass deep in a long chat, the next message after a document, costs a fifth (15 tokens after 4,096 positions:
117-126 ms against 680-686 ms on a Sapphire Rapids, whose tiled flash-attention kernel only starts at larger passes),
for 13% more on a long prompt's first read (4,096 tokens: 20.1-20.7 s against 17.8-18.0 s); docs/performance.md, "A
follow-up without flash attention".

A reused prefix gives what a fresh read gives. The reader feeds a prompt in passes fixed by its tokens alone
(pass_end): a pass ends after a turn-ending token (`<|im_end|>`: llama.cpp's end-of-generation tokens), or CHUNK
positions after it began; so a position's entries depend only on the tokens up to the end of its pass. It keeps the
positions of the whole passes that the next prompt starts with and reads the rest as a fresh read would. Positions
that the decoding context produced (a reply's tokens) are never reused: they came from other kernels, and a fresh
read would differ. A reply's turn is read by the reader instead, in the model's idle time after it ends
(LlamaCppRunner.read_ahead); passes end with each turn, so the chat's next prompt then reads only its new message.
"""

from __future__ import annotations

import ctypes
import logging
import struct
import threading
from dataclasses import dataclass

import numpy as np
import torch

from specchat.core.errors import DecodeError, ModelLoadError, PrefillCancelled

from .cache_types import BF16, F16, READ_TYPE, decoding_types

log = logging.getLogger(__name__)

CHUNK = 256  # the most positions per pass: the fastest size here (docs/performance.md), finer reuse
SCHEDULE = "turns"  # how passes are cut (pass_end), in the state shelf's key: states cut otherwise are not reused
SCRATCH_ROOM = 1.25  # the reused state buffer's size over the state it was made for (_scratch_of)
READ_FLASH_ATTN = False  # the reader without flash attention: short passes at depth cost a fifth (module docstring)


@dataclass(frozen=True)
class Read:
    """What a read gave: the sequence's state as the reader's float16 cache holds it, the leading positions kept
    rather than read, and, when asked for, the last position's logits [vocab] and final-norm hidden state [hidden]
    (float32 copies)."""

    state: ctypes.Array | None  # None: deferred (PromptReader.deferred_state)
    kept: int
    logits: np.ndarray | None = None
    features: np.ndarray | None = None
    version: int = 0  # the reader's version after the read (PromptReader.deferred_state)


class PromptReader:
    """A float16 llama.cpp context that reads prompts for one decoding context (LlamaCppRunner)."""

    def __init__(self, model, n_ctx: int):
        """`model`: the LlamaCppModel; `n_ctx`: positions, the decoding context's (a prompt it holds fits here)."""
        self.llama = model.llama
        self.n_ctx = n_ctx
        self._model = model  # whose readers' state layout is checked once (_check_layout)
        self._vocab, self._hidden = model.vocab_size, model.hidden_size
        self.decode_types = decoding_types(model.placement.offloaded)  # the decoding context's cache types
        params = self.llama.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = params.n_ubatch = CHUNK
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = model.threads  # fixed: the same prompt, the same numbers
        params.flash_attn_type = (self.llama.LLAMA_FLASH_ATTN_TYPE_ENABLED if READ_FLASH_ATTN
                                  else self.llama.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        params.type_k = params.type_v = READ_TYPE
        params.no_perf = True
        params.op_offload = model.placement.offloaded
        params.pooling_type = self.llama.LLAMA_POOLING_TYPE_NONE  # a last pass may output the hidden states too
        self._ctx = self.llama.llama_init_from_model(model.handle, params)
        if not self._ctx:
            raise ModelLoadError(f"llama.cpp could not make a context of {n_ctx} positions (out of memory?)")
        self._batch = self.llama.llama_batch_init(CHUNK, 0, 1)
        self._held: list[int] = []  # the tokens whose positions this context holds, all read by it
        self._turn_ends = model.turn_end_ids  # a pass ends after one of these (pass_end)
        self._lock = threading.RLock()  # a read ahead runs in the model's idle time, in another thread
        # the decoding state handed to the runner (read, decoding_copy), reused: a fresh buffer of a long prompt's
        # state costs its page faults each time (60 ms for 94 MB here); the model thread's only (_scratch_of)
        self._scratch: ctypes.Array | None = None
        self._version = 0  # counts the changes to what this context holds: a deferred state is taken only unchanged

    def reusable(self, tokens: list[int], most: int | None = None) -> int:
        """How many of `tokens`' first positions a read would keep: the whole passes they share with what is held,
        within their first `most` (default: all)."""
        most = len(tokens) if most is None else most
        with self._lock:
            return whole_passes(tokens, common_prefix(self._held, tokens, most), self._turn_ends)

    def read(self, tokens: list[int], cancel: threading.Event | None = None, logits: bool = False,
             features: bool = False, defer: bool = False) -> Read:
        """Reads `tokens` (keeping the whole passes already held); the state in this reader's reused buffer (valid
        until its next read; the caller converts it there for the decoding context: as_decoding_state). With
        `logits`, the last token is read whatever is held and its logits come back (with `features`, its hidden
        state too): a prompt's first token then needs no decoding pass. With `defer`, once a state of this context
        passed the layout check, the state is not copied yet (its 94 MB take 60 ms at 4,000 positions here): the
        caller takes it later (deferred_state). PrefillCancelled when `cancel` is set between passes;
        StateFormatError where the state cannot be converted."""
        with self._lock:
            kept, last_logits, last_features = self._read_passes(tokens, cancel, logits, features)
            if defer and self._layout_checked:
                return Read(None, kept, last_logits, last_features, self._version)
            return Read(self._state_in_scratch(), kept, last_logits, last_features, self._version)

    def deferred_state(self, version: int) -> ctypes.Array:
        """The state of a deferred read (read with defer) that left this reader at `version`, converted for the
        decoding context in the reused buffer; StaleRead when the reader has read, dropped or restored since."""
        with self._lock:
            if self._ctx is None or version != self._version:
                raise StaleRead("the prompt reader changed before the prompt's state was taken")
            state = self._state_in_scratch()
        as_decoding_state(state, self.decode_types)
        return state

    def _state_in_scratch(self) -> ctypes.Array:
        """The sequence's state copied into the reused buffer, its layout checked (StateFormatError)."""
        size = self.llama.llama_state_seq_get_size(self._ctx, 0)
        state = self._scratch_of(size)
        if self.llama.llama_state_seq_get_data(self._ctx, state, size, 0) != size:
            raise DecodeError("llama.cpp could not copy a prompt's KV entries")
        self._check_layout(state)
        return state

    @property
    def _layout_checked(self) -> bool:
        """Whether a state of this model's readers passed as_decoding_state's check: the layout is the model's and
        its cache types', not a context's, so a reader made anew for a larger context (a chat continued after a
        restart) defers its first state too, rather than copying 94 MB (60-75 ms here) on its first token's path."""
        return self._model.reader_layout_checked

    def _check_layout(self, state: ctypes.Array) -> None:
        if not self._layout_checked:
            as_decoding_state(state, self.decode_types, convert=False)
            self._model.reader_layout_checked = True

    def decoding_copy(self, raw: ctypes.Array) -> ctypes.Array:
        """`raw`, a state as read_raw gives it, converted for the decoding context into this reader's reused buffer
        (valid until its next read): `raw` stays as it is, for the state shelf."""
        state = self._scratch_of(len(raw))
        ctypes.memmove(state, raw, len(raw))
        as_decoding_state(state, self.decode_types)
        return state

    def reserve(self, size: int) -> None:
        """Makes the reused state buffer ready for a state of `size` bytes (its pages touched now): a reader made
        ahead for a kept chat's next turn (room_ahead.py) then hands that state over without page faults."""
        with self._lock:
            self._scratch_of(size)

    def _scratch_of(self, size: int) -> ctypes.Array:
        """A view of exactly `size` bytes of the reused buffer, made anew only when too small, with SCRATCH_ROOM to
        spare. Why it never shrinks: it shrank for a short prompt and grew back at every turn of a long chat (each
        follow-up's state a little larger), and each new buffer cost its page faults (57-68 ms for a 4,000-token
        document's 94 MB here) on the second token's path. It is at most SCRATCH_ROOM times the largest state this
        reader's context held, freed with it."""
        if self._scratch is None or size > len(self._scratch):
            self._scratch = (ctypes.c_uint8 * int(size * SCRATCH_ROOM))()
        return (ctypes.c_uint8 * size).from_buffer(self._scratch)

    def read_raw(self, tokens: list[int], cancel: threading.Event | None = None, logits: bool = False,
                 features: bool = False) -> Read:
        """As read, but the state in a buffer of its own, which nothing converts: what a later read can continue
        from (the state shelf keeps it: state_shelf.py)."""
        with self._lock:
            kept, last_logits, last_features = self._read_passes(tokens, cancel, logits, features)
            state = self._state()
            self._check_layout(state)
            return Read(state, kept, last_logits, last_features, self._version)

    def _read_passes(self, tokens: list[int], cancel: threading.Event | None, logits: bool = False,
                     features: bool = False) -> tuple[int, np.ndarray | None, np.ndarray | None]:
        """Reads what `tokens` do not share with what is held, pass by pass (pass_end); returns the positions kept,
        and with `logits` the last position's logits (its hidden state too with `features`). Called with the lock
        held."""
        if self._ctx is None:
            raise PrefillCancelled  # closed (its runner's context grew: the runner makes a new reader)
        kept = self.reusable(tokens, len(tokens) - 1 if logits else None)
        self._drop_from(kept)
        start = kept
        while start < len(tokens):
            if start > kept and cancel is not None and cancel.is_set():
                raise PrefillCancelled
            end = min(pass_end(tokens, start, self._turn_ends), len(tokens))
            last = logits and end == len(tokens)
            self._decode(tokens[start:end], start, output_last=last, embeddings=last and features)
            self._held.extend(tokens[start:end])
            self._version += 1
            start = end
        if not logits:
            return kept, None, None
        return kept, self._last_row(self.llama.llama_get_logits_ith, self._vocab), (
            self._last_row(self.llama.llama_get_embeddings_ith, self._hidden) if features else None)

    def _last_row(self, getter, width: int) -> np.ndarray:
        """A copy of the last output row of the latest pass, through llama_get_logits_ith or _embeddings_ith."""
        row = getter(self._ctx, -1)
        if not row:
            raise DecodeError("llama.cpp gave no output for the prompt's last token")
        return np.ctypeslib.as_array(row, shape=(width,)).copy()

    def restore(self, tokens: list[int] | tuple[int, ...], state: ctypes.Array) -> bool:
        """Makes this context hold `state`, a state that a reader of the same model and settings wrote for `tokens`
        (read_raw), in place of what it held: the next read keeps its whole passes that the prompt starts with and
        drops the rest. False, holding nothing, where it does not fit or llama.cpp refuses it. PrefillCancelled
        when the reader was closed."""
        with self._lock:
            if self._ctx is None:
                raise PrefillCancelled
            self._drop_from(0)
            self._version += 1
            if len(tokens) > self.n_ctx or self.llama.llama_state_seq_set_data(self._ctx, state, len(state),
                                                                                 0) != len(state):
                self.llama.llama_memory_seq_rm(self.llama.llama_get_memory(self._ctx), 0, 0, -1)
                return False
            self._held = list(tokens)
            return True

    def _decode(self, tokens: list[int], position: int, output_last: bool = False, embeddings: bool = False) -> None:
        """One pass; `output_last`: the last token's logits are wanted, and its hidden state with `embeddings`
        (llama.cpp then outputs every row of the pass: only a prompt's last pass asks)."""
        batch = self._batch
        batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = position + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = output_last and i == len(tokens) - 1
        if embeddings:
            self.llama.llama_set_embeddings(self._ctx, True)
        try:
            status = self.llama.llama_decode(self._ctx, batch)
        finally:
            if embeddings:
                self.llama.llama_set_embeddings(self._ctx, False)
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
            self._version += 1

    def close(self) -> None:
        """Frees the context, once a pass that another thread runs on it (a read ahead: state_shelf.py) ends."""
        with self._lock:
            if self._ctx is not None:
                self.llama.llama_free(self._ctx)
                self.llama.llama_batch_free(self._batch)
                self._ctx = self._scratch = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


def pass_end(tokens: list[int], start: int, turn_ends: frozenset[int]) -> int:
    """Where the reader's pass that begins at `start` (where a pass ends) ends: just after the first of the next
    CHUNK tokens that ends a turn (`turn_ends`), else CHUNK positions on, which may lie beyond `tokens` (a read of
    them ends that pass early). A function of the tokens alone, so a fresh read and a continued one cut alike."""
    for offset, token in enumerate(tokens[start:start + CHUNK]):
        if token in turn_ends:
            return start + offset + 1
    return start + CHUNK


def whole_passes(tokens: list[int], held: int, turn_ends: frozenset[int]) -> int:
    """How many of `tokens`' first positions lie in passes that end within their first `held` positions: those a
    context that read them (and holds `held` of them) keeps for a read of `tokens`."""
    start = 0
    while (end := pass_end(tokens, start, turn_ends)) <= held:
        start = end
    return start


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


class StaleRead(RuntimeError):
    """A deferred read's state asked for after its reader changed (PromptReader.deferred_state)."""


class StateFormatError(ValueError):
    """A sequence state laid out otherwise than a plain KV cache's (another memory kind, cell extras)."""


def as_decoding_state(state: bytearray | memoryview, types: tuple[int, int], convert: bool = True) -> None:
    """Rewrites, in place, a sequence state of a float16 KV cache (llama_state_seq_get_data) for a cache of the same
    model whose K and V have `types` (decoding_types): each layer's rows of a bfloat16 part converted, rounding to
    nearest even as ggml does (torch's conversion, the same bits and several times numpy's speed), those of a
    float16 part kept, and the type fields changed. The layout (llama-kv-cache.cpp,
    state_write): magic, seq id, streams; per stream the cell count, per cell its position, sequence count and ids;
    then v_trans, the layer count, and per layer a type, a row size and the rows, K first then V. A transposed V (a
    context without flash attention: v_trans 1) has per layer a type, an element's size and a cell's element count,
    then each element's values over the cells; it is rewritten as rows, as the decoding context's flash attention
    keeps V. StateFormatError for any other layout (an SWA or recurrent memory, another type, cells with extras).
    Without `convert`, only the layout is checked (about a millisecond): a read whose move waits checks it at once."""
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
        if convert:
            struct.pack_into("<I", view, offset, 0)  # the decoding context's V is not transposed (flash attention)
        offset += 8
        for block in range(2 * layers):  # K of every layer, then V of every layer
            transposed = bool(v_trans) and block >= layers
            if transposed:  # a type, an element's size and the elements a cell, then the cells of each element
                kind, element, width = struct.unpack_from("<iII", view, offset)
                row = element * width
            else:  # a type and a row's size, then each cell's row
                kind, row = struct.unpack_from("<iQ", view, offset)
            if kind != READ_TYPE:
                raise StateFormatError(f"a cache of ggml type {kind}")
            size = cells * row
            if offset + 12 + size > len(view):
                raise StateFormatError("a state shorter than its layers")
            target = types[block >= layers]
            if target not in (F16, BF16):
                raise ValueError(f"no conversion to ggml type {target}")
            if convert:
                struct.pack_into("<iQ", view, offset, target, row)
                halves = torch.frombuffer(view, dtype=torch.float16, count=size // 2, offset=offset + 12)
                rounded = halves.to(torch.bfloat16).view(torch.float16) if target == BF16 else halves.clone()
                if transposed or target == BF16:
                    halves.copy_(rounded.view(width, cells).t().reshape(-1) if transposed else rounded)
            offset += 12 + size
    if offset != len(view):
        raise StateFormatError("a state longer than its layers")

"""The target on llama.cpp: a GGUF file run on its own quantized weights and kernels (through llama-cpp-python's C
API), behind the same runner interface as the torch paths (engine/backends/torch/runners.py).

Why: transformers dequantizes a GGUF file to float32, so every token reads several times the bytes that the
file's 4-bit blocks hold, and each pass pays Python and dispatch costs per operation. llama.cpp multiplies by the
blocks themselves in one C graph per pass.

The speculative loop needs three things of a backend, and llama.cpp has them all:
- one pass over [last token, x_1..x_K] that returns logits at every position (a batch whose tokens all ask for
  output);
- rollback of rejected positions (`llama_memory_seq_rm` from the first rejected position on);
- the last hidden states for the draft head, in the same pass: with `embeddings` on and no pooling, llama.cpp
  returns the final-norm output (the output head's input, as the torch paths keep) beside the logits.

Losslessness needs the logits of a position to be the same whether the pass holds 1 token or K+1, and whatever the
prompt's chunking. Attention is made so: without flash attention the products differ by batch size; with it and a
float16 KV cache, a one-token pass over 512 or more cached positions splits them between threads (flash decoding)
and a pass of 64 or more tokens uses a tiled kernel, each summing in another order. With a bfloat16 KV K both are
off (they take float16/float32 caches with K and V of one type only), every row is reduced by one thread in one
order. So the runner forces flash attention and a bfloat16 K; V stays float16 on the CPU, which that kernel adds
without converting it (cache_types.decoding_types: a one-token pass deep in a document costs 30% less than over a
bfloat16 V). The matrix products change kernel with the rows of a pass, by tensor type:
engine/backends/llamacpp/kernels.py measures up to how many rows a file stays bit-identical, once per file, build
and CPU, and the engine verifies at most that many ("bit-identical"), or takes the fastest kernels with no cap
("same distribution").
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
import time
import weakref
from pathlib import Path

import numpy as np
import torch

from specchat.core.errors import DecodeError, ModelLoadError, PrefillCancelled
from specchat.core.one_time import OneTimeWork
from specchat.core.vocabulary import BIT_IDENTICAL, DISTRIBUTION

from ...decoding.cost_curve import CostCurve, curve_for, kept_curve, measure_curve
from .cache_types import decoding_types
from .governor import ThreadGovernor
from .kernels import (PROVISIONAL, KernelChoice, KernelVerdict, choose, measure_verdict, verdict_kept, verdict_key,
                      verdicts_for)
from .extra_buffers import extra_buffers_usable
from .library import _llama, _load_recording, default_threads, gpu_layers_for
from .offload import Placement, offload_target
from .prompt_reader import CHUNK as READER_CHUNK
from .prompt_reader import (PromptReader, StaleRead, StateFormatError, as_decoding_state, common_prefix,
                            sequence_state)
from .room_ahead import RoomAhead
from .state_shelf import (PRELOAD, READ_AHEAD, PromptRead, forget_model, latest_kept, owe_preload, owe_read_ahead,
                          read_prompt)
from .target_embeddings import TargetEmbeddings

log = logging.getLogger(__name__)

CONTEXT_STEP = 1024  # contexts are made in multiples of this many positions, and remade larger when needed
MAX_BATCH = 512  # tokens per llama_decode call; longer prompts are fed in chunks
NEXT_MESSAGE = READER_CHUNK  # the room made ahead for a chat's next message (LlamaCppRunner.owe_room)
ROOM = "room ahead"  # the one-time task that makes it (room_ahead.py)


class LlamaCppModel:
    """A GGUF file loaded by llama.cpp (weights memory-mapped), shared by every runner made from it."""

    def __init__(self, path: Path | str, threads: int | None = None, repack: bool = True,
                 kernels: KernelChoice | None = None, gpu_layers: int = 0):
        """`repack`: let llama.cpp re-lay weights for its fastest CPU kernels (its default). `kernels`: the choice
        the runners follow (None: this layout with no cap on a pass, prefix reuse on). `gpu_layers`: llama.cpp's
        n_gpu_layers (0: all on the CPU, -1: all on the GPU; gpu_layers_for plans it); `placement` says where the
        layers went, as llama.cpp's log reports it."""
        self.llama = _llama()
        self.path = Path(path)
        self.threads = threads or default_threads()
        self.kernels = kernels or KernelChoice(repack=repack, exactness=DISTRIBUTION, max_pass_rows=None,
                                               reuse_prefix=True)
        # torch and llama.cpp share one OpenMP runtime in this process (torch's libgomp is loaded first); giving
        # torch's small operations between passes (the argmax, the verification rule) the same team size lets them
        # reuse llama.cpp's team instead of resizing it at every switch, which would slow every pass.
        torch.set_num_threads(self.threads)
        params = self.llama.llama_model_default_params()
        params.n_gpu_layers = gpu_layers
        params.use_extra_bufts = self.kernels.repack and extra_buffers_usable(self.llama)
        handle, load_log = _load_recording(self.llama, self.path, params)
        if not handle:
            where = " with its layers on the GPU (try --device cpu or SPECCHAT_GPU_LAYERS=0)" if gpu_layers else ""
            raise ModelLoadError(f"llama.cpp could not load {self.path.name}{where}")
        self.handle = handle
        self.gpu_layers = gpu_layers
        self.cost_curve: CostCurve | None = None  # the verification cost curve (measure_cost_curve), once measured
        device = offload_target(self.llama) if gpu_layers else None
        self.placement: Placement = load_log.placement(device, int(self.llama.llama_model_n_layer(handle)))
        self.vocab = self.llama.llama_model_get_vocab(handle)
        self.vocab_size = int(self.llama.llama_vocab_n_tokens(self.vocab))
        self.hidden_size = int(self.llama.llama_model_n_embd(handle))
        self.context_window = int(self.llama.llama_model_n_ctx_train(handle))
        self.eos_token_id = int(self.llama.llama_vocab_eos(self.vocab))
        self._embeddings: TargetEmbeddings | None = None
        self.reader_layout_checked = False  # a prompt reader's state of this model passed the layout check
        self._rooms: dict[bool, RoomAhead] = {}  # contexts made ahead, one pair per keeps_features (room)
        self.one_time = OneTimeWork()  # the verdict and the curve, measured while no reply runs (core/one_time.py)
        owe_preload(self)  # the latest kept prompt states into memory, in the idle time (state_shelf.py)

    def runner(self, keeps_features: bool = False) -> LlamaCppRunner:
        return LlamaCppRunner(self, keeps_features)

    @functools.cached_property
    def turn_end_ids(self) -> frozenset[int]:
        """The tokens that end a turn (llama.cpp's end-of-generation tokens: `<|im_end|>`, EOS), after each of which
        the prompt reader ends a pass (prompt_reader.pass_end); 30 ms over a 49,152-token vocabulary."""
        return frozenset(i for i in range(self.vocab_size) if self.llama.llama_vocab_is_eog(self.vocab, i))

    def measure_cost_curve(self) -> CostCurve:
        """The verification cost curve of this file as a target (cost_curve.py), kept per file, build, CPU,
        placement, layout and thread count in the user cache, else measured now: once, a few seconds for a 1.5B
        model on two cores."""
        if self.cost_curve is None:
            self.cost_curve = curve_for(self._curve_key(), lambda: measure_curve(self.runner()))
        return self.cost_curve

    def known_cost_curve(self) -> CostCurve | None:
        """The cost curve if it is known (measured in this process or kept from an earlier one); else None, and it
        is owed to the background (one_time): a first reply does not wait for it, and decodes without drafting."""
        if self.cost_curve is None:
            self.cost_curve = kept_curve(self._curve_key())
        if self.cost_curve is None:
            self.one_time.owe("cost curve", self._measure_curve_between_replies)
        return self.cost_curve

    def _measure_curve_between_replies(self, check) -> None:
        """The curve measured by one_time's worker: `check` runs at every clock reading, between passes, and stops
        it when a reply starts (one_time.Interrupted), so that no timing is taken beside a reply."""
        def clock() -> float:
            check()
            return time.perf_counter()

        self.cost_curve = curve_for(self._curve_key(), lambda: measure_curve(self.runner(), clock=clock))

    def settle(self) -> None:
        """Measures now whatever is still owed (the kernel verdict, the cost curve): for benchmarks and tests."""
        self.known_cost_curve()
        self.one_time.settle()

    def _curve_key(self) -> str:
        return f"{verdict_key(self.path, self.kernels.repack, self.placement.key)}:threads={self.threads}"

    def kernel_verdict(self, check=None) -> KernelVerdict:
        """Up to how many rows this file's passes are bit-identical to one-token passes (kernels.py); `check` runs
        before every pass (one_time's interruption)."""
        return measure_verdict(self.runner(), check=check)

    def owe_verdict(self) -> None:
        """Loaded on a provisional choice (PROVISIONAL: nothing drafted, so nothing to promise): the verdict is
        measured in the background, kept, and then the runners follow "auto"'s choice."""
        def measure(check) -> None:
            verdicts = verdicts_for(self.path, lambda repack: self.kernel_verdict(check), (True,),
                                    placement=self.placement.key)
            self.kernels = choose(verdicts, "auto")

        self.one_time.owe("kernel verdict", measure)

    def embeddings(self) -> TargetEmbeddings:
        """The file's token embeddings and output head as float32 torch modules, for a draft head (read from the
        GGUF file once, on first use)."""
        if self._embeddings is None:
            self._embeddings = TargetEmbeddings.from_gguf(self.path)
        return self._embeddings

    def forget_next_turn(self) -> None:
        """Drops the idle-time work that only a next turn would use: reading the last turn ahead, loading the kept
        states into memory, the contexts made ahead. A one-shot command (`specchat generate`) ends after its reply;
        it measures what is still owed (the verdict, the cost curve) and exits, without making any of these."""
        for name in (READ_AHEAD, PRELOAD, *(f"{ROOM} {keeps}" for keeps in (False, True))):
            self.one_time.drop(name)

    def room(self, keeps_features: bool) -> RoomAhead:
        """The contexts made ahead for this model's runners that keep hidden states or not (room_ahead.py): one
        pair per model, whichever runner grows first takes it, so a model with several runners (the race's lanes,
        the calibration's engine) never holds a pair ahead for each. Its callables hold the model weakly."""
        if keeps_features not in self._rooms:
            model = weakref.ref(self)
            self._rooms[keeps_features] = RoomAhead(
                lambda n_ctx: new_decoding_context(model(), keeps_features, n_ctx), self.llama.llama_free,
                lambda n_ctx: PromptReader(model(), n_ctx))
        return self._rooms[keeps_features]

    def close(self) -> None:
        if getattr(self, "handle", None):
            self.one_time.stop()
            for room in self._rooms.values():  # its contexts before the weights they run on
                room.free()
            forget_model(self)  # its prompts' states leave memory; their files stay for the next load
            self.llama.llama_model_free(self.handle)
            self.handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass


def load_with_exactness(path: Path | str, threads: int | None = None, wanted: str = "auto",
                        device: str | None = None, gpu_layers: int | None = None) -> LlamaCppModel:
    """The GGUF file on the kernels that `wanted` exactness allows (kernels.choose), its layers placed by
    gpu_layers_for(path, device, gpu_layers). The first load of a file on this build, CPU and placement measures
    its verdicts (a few seconds: each repack setting loaded once, the last one kept when it is the one chosen);
    later loads read them from the cache. GPU kernels have verdicts of their own (the placement is in the key).
    "auto" on a file not checked before loads at once on PROVISIONAL kernels and owes the check to the background
    (LlamaCppModel.owe_verdict)."""
    path = Path(path)
    layers, placement = gpu_layers_for(path, device, gpu_layers)
    if wanted == DISTRIBUTION:
        return LlamaCppModel(path, threads, kernels=choose({}, wanted), gpu_layers=layers)
    if wanted == "auto" and not verdict_kept(path, True, placement):  # a first launch: answer at once
        model = LlamaCppModel(path, threads, kernels=PROVISIONAL, gpu_layers=layers)
        model.owe_verdict()
        return model
    settings = (True,) if wanted == "auto" else (True, False)  # auto only asks whether the default layout is exact
    measured: dict[bool, LlamaCppModel] = {}

    def measure(repack: bool) -> KernelVerdict:
        for earlier in measured.values():  # one copy of the weights in memory at a time
            earlier.close()
        measured.clear()
        model = measured[repack] = LlamaCppModel(path, threads, repack=repack, gpu_layers=layers)
        return model.kernel_verdict()

    kernels = choose(verdicts_for(path, measure, settings, placement=placement), wanted)
    for repack, model in measured.items():
        if repack != kernels.repack:
            model.close()
    if kernels.repack in measured:  # already loaded in this layout: its runners follow the choice from now on
        measured[kernels.repack].kernels = kernels
        return measured[kernels.repack]
    return LlamaCppModel(path, threads, kernels=kernels, gpu_layers=layers)


class LlamaCppCache:
    """The engine's view of a context's KV cache: how many positions it holds."""

    def __init__(self, runner: LlamaCppRunner):
        self.runner = runner
        self.length = 0

    def get_seq_length(self) -> int:
        return self.length


class LlamaCppRunner:
    """One llama.cpp context (its KV cache) running the target for one engine; not shared between threads."""

    device = torch.device("cpu")

    def __init__(self, model: LlamaCppModel, keeps_features: bool = False):
        self.model = model
        self.llama = model.llama
        self.keeps_features = keeps_features
        self.vocab_size = model.vocab_size
        self.context_window = model.context_window
        self.features: torch.Tensor | None = None  # [rows, hidden] of the latest pass, when kept
        self._ctx = None
        self._n_ctx = 0
        self._batch = self.llama.llama_batch_init(MAX_BATCH, 0, 1)
        self._held: list[int] = []  # the tokens whose positions the context's KV cache holds, in order
        self.reused_tokens = 0  # prompt positions the latest prefill did not read (kept, or restored from a shelf)
        self.restored_tokens = 0  # of those, restored from a kept per-chat state (state_shelf.py)
        self.governor = ThreadGovernor(model.threads)
        self._threads = model.threads  # the context's thread count now
        self.cost_curve = model.cost_curve  # what a pass of n tokens costs (cost_curve.py), for the K policy
        self._reader: PromptReader | None = None  # reads prompts at llama.cpp's speed (prompt_reader.py)
        # a prompt the reader read whose state has not moved here yet: it moves before this context's next pass
        # (_settle), after the first token, which the reader's logits give
        self._pending: PromptRead | None = None
        # False: prompts are read on this decoding context (a cache state the reader cannot convert, or a comparison:
        # `specchat prefill --on-decoding-context`)
        self.uses_reader = True
        self._asked = 0  # the positions the latest new_cache asked for
        self._reply_room = 0  # of those, the ones beyond its prompt: the room a reply takes (owe_room)
        self._room = model.room(keeps_features)  # contexts made ahead for a next turn, the model's (room_ahead.py)

    @property
    def max_pass_rows(self) -> int | None:
        """The engine keeps every verification within this many rows, where they stay bit-identical (None: no cap);
        the model's kernels may be chosen after the runner is made (LlamaCppModel.owe_verdict)."""
        return self.model.kernels.max_pass_rows

    def new_cache(self, capacity: int) -> LlamaCppCache:
        """An empty cache with room for `capacity` positions (the context is remade only when it must grow, with
        the positions it held). The KV entries of the previous generation stay until the prefill, which keeps their
        common prefix."""
        capacity = self._asked = min(max(capacity, 1), self.context_window)
        if self._ctx is None or capacity > self._n_ctx:
            first = self._ctx is None
            self._make_context(self._context_size(capacity))
            if first:  # a chat continued after a restart: room for the latest kept state, in the idle time
                self.owe_room(0)
        return LlamaCppCache(self)

    def _context_size(self, positions: int) -> int:
        """The size a context for `positions` is made at: CONTEXT_STEP's next multiple, within the model's window."""
        return min(-(-positions // CONTEXT_STEP) * CONTEXT_STEP, self.context_window)

    def forward(self, input_ids: torch.Tensor, cache: LlamaCppCache, keep: int, hidden_rows: int = 0,
                prefill: bool = False, cancel: threading.Event | None = None) -> torch.Tensor:
        """Logits [keep, vocab] for the last `keep` input positions; with keeps_features, the final-norm hidden
        states of the last max(keep, hidden_rows) positions are in `features`.

        A prefill into an empty cache reuses the positions that the previous generation left for the same leading
        tokens (the system prompt, earlier turns of the chat), as llama.cpp's server does: every row of a pass
        depends only on the tokens before it, not on how they were batched (module docstring), so the logits are
        the same as with a full prefill. Not when the caller wants hidden states of the whole prompt. `cancel` is
        checked between the passes of MAX_BATCH tokens a long prompt takes (PrefillCancelled)."""
        tokens = input_ids.reshape(-1).tolist()
        rows = max(keep, hidden_rows if self.keeps_features else 0)
        if prefill and cache.length == 0:
            self._reply_room = max(self._asked - len(tokens), 0)
        if prefill and cache.length == 0 and rows <= 1 and self._reader_reads(tokens):
            logits = self._read_prompt(tokens, cache, cancel)
            if logits is not None:
                return logits
        if prefill and cache.length == 0:
            tokens = self._reuse_prefix(tokens, cache, reusable=rows <= 1)
        self._drop_from(cache.length)  # positions held beyond the caller's cache (a new cache, not a prefill)
        if cache.length + len(tokens) > self._n_ctx:
            raise DecodeError(f"the llama.cpp context holds {self._n_ctx} positions; {cache.length + len(tokens)} "
                                 "were needed")
        if self.keeps_features and len(tokens) > rows:
            # With embeddings on, llama.cpp computes the output head at every position of a pass (below), a
            # noticeable share of a long prefill for rows nobody reads. The positions that need no output run first,
            # with embeddings off; rows of a pass do not depend on how the tokens are split into passes.
            self._set_embeddings(False)
            self._run(tokens[:-rows], cache, outputs_from=len(tokens), cancel=cancel)
            self._set_embeddings(True)
            tokens = tokens[-rows:]
        self._run(tokens, cache, outputs_from=len(tokens) - rows, cancel=cancel)
        last_chunk = len(tokens) - (len(tokens) - 1) // MAX_BATCH * MAX_BATCH
        # With embeddings on, llama.cpp outputs every position of the batch, whatever it asked for; the rows are
        # in batch order either way, so the wanted ones are the last.
        outputs = last_chunk if self.keeps_features else min(rows, last_chunk)
        logits = np.ctypeslib.as_array(self.llama.llama_get_logits(self._ctx), shape=(outputs, self.vocab_size))
        if self.keeps_features:
            states = np.ctypeslib.as_array(self.llama.llama_get_embeddings(self._ctx),
                                           shape=(outputs, self.model.hidden_size))
            self.features = torch.from_numpy(states[outputs - min(rows, outputs):].copy())
        return torch.from_numpy(logits[outputs - keep:].copy())

    def read_ahead(self, tokens: list[int]) -> None:
        """After a reply that ended its turn: `tokens` (its prompt, then the reply up to the token that ended it)
        are read by this runner's prompt reader in the model's idle time and kept on the state shelf
        (state_shelf.owe_read_ahead), so that the chat's next prompt reads only its new message; and the room
        that next prompt needs is made then too (owe_room)."""
        if self._reader is not None and self.uses_reader:
            owe_read_ahead(self._reader, self.model, tokens)
        self.owe_room(len(tokens))

    def owe_room(self, turn: int) -> None:
        """Owes to the model's idle time (core/one_time.py) contexts large enough for the next turn, where this one is
        not (room_ahead.py): the longer of the turn just ended (`turn` positions) and the latest state kept
        for this model (a chat continued after a restart: state_shelf.latest_kept), then NEXT_MESSAGE
        positions and the latest reply's room; the reader's state buffer is made ready for that kept state's
        size. The room is the model's (LlamaCppModel.room): each runner's latest need is kept beside it (weakly:
        a runner gone owes nothing), and one task per model and kind of runner makes room for the largest need
        of a runner that its own contexts do not hold. Not with layers offloaded: a GPU's memory may hold the
        larger contexts only once the smaller ones are freed."""
        if self.model.placement.offloaded:
            return
        room = self._room
        room.note(self, turn)
        model = weakref.ref(self.model)

        def make_room(check) -> None:
            live = model()
            if live is None:
                return
            kept = latest_kept(live)
            kept_tokens = len(kept.tokens) if kept is not None else 0
            wanted, with_reader = 0, False
            needs = room.needs()
            for runner, need in needs:
                size = runner._context_size(max(need, kept_tokens) + NEXT_MESSAGE + runner._reply_room)
                if size > runner._n_ctx:
                    wanted, with_reader = max(wanted, size), with_reader or runner.uses_reader
            needs = runner = None  # the runners are the app's: none kept alive by this task while it makes room
            if wanted:
                room.make(wanted, check, with_reader=with_reader, state_bytes=kept.nbytes if kept is not None else 0)

        self.model.one_time.owe(f"{ROOM} {self.keeps_features}", make_room, replace=True)

    def _reader_reads(self, tokens: list[int]) -> bool:
        """Whether the prompt reader (prompt_reader.py) reads this prompt: always where replies are bit-identical
        (a reused prefix must give what a fresh read gives, and a fresh read is the reader's); otherwise unless the
        decoding context already holds all but a chunk's worth of it (a follow-up after a reply)."""
        if not self.uses_reader or len(tokens) < 2:
            return False
        if self.model.kernels.exactness == BIT_IDENTICAL:
            return True
        return len(tokens) - self._reusable(tokens) > READER_CHUNK

    def _read_prompt(self, tokens: list[int], cache: LlamaCppCache,
                     cancel: threading.Event | None) -> torch.Tensor | None:
        """The prompt read by the reader, its last token included; returns that token's logits [1, vocab] (its
        hidden state in `features`, when kept), from the reader's pass, so the first token waits for no decoding
        pass and no state move: the KV entries move here before this context's next pass (_settle). A long
        prompt's state is restored from, and kept on, the state shelf (state_shelf.py). None where this model's
        cache state has another layout: prompts are then read here, for good."""
        if self._reader is None:
            self._reader = PromptReader(self.model, self._n_ctx)
        try:
            read = read_prompt(self._reader, self.model, tokens, cancel, logits=True, features=self.keeps_features)
        except StateFormatError as error:
            log.info("prompts are read on the decoding context: %s", error)
            self.uses_reader = False
            return None
        self._drop_from(0)
        self._pending, self._held = read, list(tokens)
        cache.length = len(tokens)
        self.reused_tokens, self.restored_tokens = read.kept, read.restored
        if self.keeps_features:
            self.features = torch.from_numpy(read.features).unsqueeze(0)
        return torch.from_numpy(read.logits).unsqueeze(0)

    def _settle(self) -> None:
        """Moves the state of a prompt the reader read (_read_prompt) into this context, before its next pass or
        any change to what it holds."""
        if self._pending is None:
            return
        read, self._pending = self._pending, None
        try:
            state = read.decoding_state(self._reader)
        except StaleRead:  # read again as it was (the same passes: the same entries), as the first token came
            state = self._reader.read(self._held, logits=True, features=self.keeps_features).state
            as_decoding_state(state, self._reader.decode_types)
        if self.llama.llama_state_seq_set_data(self._ctx, state, len(state), 0) != len(state):
            self.llama.llama_memory_seq_rm(self.llama.llama_get_memory(self._ctx), 0, 0, -1)
            self._held = []
            raise DecodeError("llama.cpp could not take the prompt's KV entries from the prompt reader")

    def _run(self, tokens: list[int], cache: LlamaCppCache, outputs_from: int,
             cancel: threading.Event | None = None) -> None:
        """Feeds tokens in passes of at most MAX_BATCH; positions from `outputs_from` on (in `tokens`) ask for
        output."""
        for start in range(0, len(tokens), MAX_BATCH):
            if start and cancel is not None and cancel.is_set():
                raise PrefillCancelled
            chunk = tokens[start:start + MAX_BATCH]
            self._decode(chunk, cache.length, outputs_from - start)
            cache.length += len(chunk)
            self._held.extend(chunk)

    def _set_embeddings(self, on: bool) -> None:
        self.llama.llama_set_embeddings(self._ctx, on)

    def rollback(self, cache: LlamaCppCache, keep: int) -> None:
        """Drops every position from `keep` on (the rejected draft tokens)."""
        if cache.length > keep:
            self._drop_from(keep)
            cache.length = keep

    def _reuse_prefix(self, tokens: list[int], cache: LlamaCppCache, reusable: bool) -> list[int]:
        """Keeps the held positions that match the prompt's first tokens (at most all but the last, which must be
        run for its logits); returns the tokens still to run."""
        common = self._reusable(tokens) if reusable else 0
        self._drop_from(common)
        cache.length = self.reused_tokens = common
        self.restored_tokens = 0
        return tokens[common:]

    def _reusable(self, tokens: list[int]) -> int:
        """How many held positions match the prompt's first tokens, at most all but its last (which must be run
        for its logits); 0 where the kernels make reuse inexact."""
        if not self.model.kernels.reuse_prefix:
            return 0
        return common_prefix(self._held, tokens, len(tokens) - 1)

    def _drop_from(self, position: int) -> None:
        if len(self._held) > position:
            if position == 0:
                self._pending = None  # replaced before it moved here
            self._settle()
            self.llama.llama_memory_seq_rm(self.llama.llama_get_memory(self._ctx), 0, position, -1)
            del self._held[position:]

    def _decode(self, tokens: list[int], position: int, outputs_from: int) -> None:
        self._settle()
        batch = self._batch
        batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = position + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i >= outputs_from
        threads = self.governor.threads_for_next_pass()
        if threads != self._threads:
            self.llama.llama_set_n_threads(self._ctx, threads, threads)
            self._threads = threads
        started = time.perf_counter()
        status = self.llama.llama_decode(self._ctx, batch)
        self.governor.observe(len(tokens), threads, time.perf_counter() - started)
        if status != 0:
            raise DecodeError(f"llama.cpp could not run a pass of {len(tokens)} tokens (status {status})")

    def _make_context(self, n_ctx: int) -> None:
        """A context of n_ctx positions. The positions the old one held move into it as they are (their state
        copied, not computed again on other kernels), so that growing a context changes no logits."""
        if self._pending is not None:  # not moved yet: the next prompt is read again, from the reader's positions
            self._pending, self._held = None, []
        growing = self._ctx is not None
        held, state = self._held, self._sequence_state()
        self._free_context()
        if self._reader is not None:  # it holds at most the old context's positions: made again when needed
            self._reader.close()
            self._reader = None
        # made in the idle time for a next turn (owe_room), else made here; a runner's first context is made at its
        # own size, so that a short first question (another runner's, the calibration's) leaves the room to the
        # turn that outgrows its context
        made_ahead = self._room.take(n_ctx) if growing else None
        if made_ahead is not None:
            ctx, n_ctx, self._reader = made_ahead
        else:
            ctx = new_decoding_context(self.model, self.keeps_features, n_ctx)
        self._threads = self.model.threads
        self._ctx, self._n_ctx = ctx, n_ctx
        self._held = []
        if state is not None and self.llama.llama_state_seq_set_data(ctx, state, len(state), 0) == len(state):
            self._held = held

    def _sequence_state(self) -> ctypes.Array | None:
        """The positions this context holds, as llama.cpp copies a sequence's state; None when it holds none."""
        if self._ctx is None or not self._held:
            return None
        self._settle()
        return sequence_state(self.llama, self._ctx)

    def _free_context(self) -> None:
        self._pending = None
        if self._ctx is not None:
            self.llama.llama_free(self._ctx)
            self._ctx = None

    def __del__(self):
        try:
            self._free_context()
            self.llama.llama_batch_free(self._batch)
        except Exception:  # interpreter shutdown
            pass


def new_decoding_context(model: LlamaCppModel, keeps_features: bool, n_ctx: int):
    """A decoding context of `n_ctx` positions for a runner of `model` (with `keeps_features`, one that outputs the
    final-norm hidden states too); ModelLoadError where llama.cpp cannot make it. Made on the runner's thread, or
    ahead in the idle time (room_ahead.py)."""
    llama = model.llama
    params = llama.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_batch = params.n_ubatch = MAX_BATCH
    params.n_seq_max = 1
    params.n_threads = params.n_threads_batch = model.threads
    # Flash attention over a bfloat16 K keeps every row's numbers independent of the batch (module docstring).
    params.flash_attn_type = llama.LLAMA_FLASH_ATTN_TYPE_ENABLED
    params.type_k, params.type_v = decoding_types(model.placement.offloaded)
    params.no_perf = True
    # A GPU build sends a CPU-placed model's large passes (32+ tokens) to the GPU all the same, whose kernels round
    # otherwise: a prefill and a one-token pass would then disagree. A model on the CPU stays there.
    params.op_offload = model.placement.offloaded
    if keeps_features:
        params.embeddings = True
        params.pooling_type = llama.LLAMA_POOLING_TYPE_NONE
    ctx = llama.llama_init_from_model(model.handle, params)
    if not ctx:
        raise ModelLoadError(f"llama.cpp could not make a context of {n_ctx} positions (out of memory?)")
    return ctx

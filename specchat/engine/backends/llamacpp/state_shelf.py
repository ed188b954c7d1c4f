"""Per-chat llama.cpp states: the KV entries of a prompt the reader read, kept so that a chat's next turn reads only
what is new, after other chats in between and after a restart (docs/how-it-works.md, "Per-chat states").

The prompt reader (prompt_reader.py) keeps only the prompt it read last: a message in another chat replaced it, and
a follow-up about a long document read the whole document again. A StateShelf keeps the reader's sequence states
keyed by the token ids they hold:
- in memory, up to a byte cap, the least recently used going first;
- on disk in the user cache, one file per state, up to a byte cap (least recently used first out again), written
  in the model's idle time (core/one_time.py), so that a reply never waits for it.

What is kept is the state as the reader's float16 context holds it, not the bfloat16 state the decoding context
takes: the reader continues from it, and a fresh read attends over float16 entries that a bfloat16 copy has lost.
It is converted (prompt_reader.as_decoding_state) each time it is used, as a fresh read's is.

Reuse stays exact for the reason the reader's own does: the reader feeds a prompt in passes cut by its tokens alone
(prompt_reader.pass_end: at each turn's end, and every CHUNK positions within a turn), so the whole passes a prompt
shares with a kept state hold the bytes a fresh read would write, and the reader keeps those and reads the rest (a
state used for fewer positions than it holds loses its tail, as the reader's live context does).

A reply that ended its turn is read too, in the model's idle time (owe_read_ahead), and its state kept: the chat's
next turn, right after, after other chats or after a restart, then reads only its new message. A state is only ever loaded under the key it was written with: the model file (its
path, size, modification time and a hash of its first bytes), llama.cpp's build and system information, the CPU,
the weights' layout and placement, the cache types and the chunk size. Every file is checked (magic, key, sizes
within bounds, a sha256 of the whole) before a byte of it reaches llama.cpp; a damaged one is deleted.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from specchat.core.errors import PrefillCancelled
from specchat.core.fs import check_disk_space, fingerprint
from specchat.core.paths import cache_file

from . import prompt_reader
from .kernels import verdict_key
from .state_files import (FORMAT, MAX_TOKENS, SUFFIX, DamagedState, ShelvedState, file_size, read_head,
                          read_state_file, write_state_file)
from .cache_types import READ_TYPE, decoding_types
from .prompt_reader import common_prefix

log = logging.getLogger(__name__)

FOLDER = "llama-states"  # in the user cache
MEMORY_ENV = "SPECCHAT_STATE_MEMORY_MIB"  # 0 turns the shelf off
DISK_ENV = "SPECCHAT_STATE_DISK_MIB"  # 0 keeps states in memory only
DEFAULT_MEMORY_MIB = 512
DEFAULT_DISK_MIB = 4096
MIN_SHELVED = 512  # prompts shorter than this are read again (well under a second) rather than kept
MIN_SHARED = 64  # the fewest leading tokens a prompt must share with a kept state to use it
# a prompt that reads fewer new positions than this is not kept anew: the state it starts from serves its chat's
# next turn nearly as well (a follow-up's message, read again in well under a second), and a reply that ends its
# turn keeps a state that holds it (owe_read_ahead); not copying 100 MB for it saves the follow-up 60-70 ms
MIN_NEW = 256
READ_AHEAD = "read ahead"  # the one-time task that reads a finished turn (owe_read_ahead)
PRELOAD = "kept states"  # the one-time task that loads a model's latest state files into memory (owe_preload)
PRELOAD_SHARE = 2  # the latest files preloaded fill at most 1/PRELOAD_SHARE of the memory cap
MAX_FILES = 1024  # state files kept in the folder (the oldest go first), and read per listing
HEADER_HASHED = 1 << 20  # bytes of a model file hashed into its key
STALE_TEMP_S = 3600  # a staging file this old was left by a writer that died
FREE_MARGIN = 1 << 30  # a state is not written where it would leave less free space than this on the disk
Defer = Callable[[str, Callable[[Callable[[], None]], None]], None]  # core.one_time.OneTimeWork.owe


class StateShelf:
    """Kept reader states, in memory and in one folder on disk. Thread-safe; several processes may share the folder
    (each file is written whole under a unique staging name and renamed into place)."""

    def __init__(self, folder: Path | None, memory_bytes: int = DEFAULT_MEMORY_MIB << 20,
                 disk_bytes: int = DEFAULT_DISK_MIB << 20):
        """`folder`: where states are kept on disk (None, or disk_bytes 0: in memory only); made when first written.
        `memory_bytes`, `disk_bytes`: the caps of the two tiers; a state larger than the memory cap is not kept."""
        self.folder = folder if disk_bytes > 0 else None
        self.memory_bytes, self.disk_bytes = memory_bytes, disk_bytes
        self._memory: OrderedDict[str, ShelvedState] = OrderedDict()  # by file name, least recently used first
        self._memory_used = 0
        self._on_disk: dict[str, tuple[int, ...]] = {}  # file name -> tokens, for the keys listed so far
        self._listed: dict[str, int] = {}  # key -> the folder's modification time when its files were listed
        self._lock = threading.RLock()

    @property
    def memory_used(self) -> int:
        return self._memory_used

    def lookup(self, key: str, tokens: Sequence[int], at_least: int = MIN_SHARED,
               max_held: int = MAX_TOKENS) -> ShelvedState | None:
        """The kept state of `key` whose tokens share the longest prefix with `tokens`, if it is `at_least` tokens
        long, from memory or else from disk (then kept in memory too); None when there is none. States holding more
        than `max_held` positions (more than the reader's context) are passed over, as are damaged files (deleted)."""
        with self._lock:
            candidates = []
            for name, entry in self._memory.items():
                if entry.key == key and len(entry.tokens) <= max_held:
                    candidates.append((common_prefix(entry.tokens, tokens, len(tokens)), True, name))
            for name, held in self._disk_entries(key).items():
                if name not in self._memory and len(held) <= max_held:
                    candidates.append((common_prefix(held, tokens, len(tokens)), False, name))
        for common, in_memory, name in sorted(candidates, reverse=True):
            if common < max(at_least, 1):
                break
            entry = self._touch(name) if in_memory else self._load(key, name)
            if entry is not None:
                return entry
        return None

    def preload(self, key: str, budget: int, check: Callable[[], None] | None = None) -> int:
        """Loads the most recently used state files of `key` into memory while they fit in `budget` bytes beside
        what memory holds already; `check` runs between blocks read (one_time's interruption). Why: after a
        restart, a chat's follow-up would otherwise read and check its state file (94 MB: 0.11 s here) on its first
        token's path. Returns how many were loaded."""
        with self._lock:
            names = [n for n in self._disk_entries(key) if n not in self._memory]
            room = budget - self._memory_used
        newest = sorted(names, key=lambda n: _mtime(self.folder / n), reverse=True)
        loaded: list[str] = []
        for name in newest:
            size = _size(self.folder / name)
            if size > room:
                break
            if self._load(key, name, check, touch=False) is not None:
                loaded, room = loaded + [name], room - size
        with self._lock:  # the newest file as the most recently used: the last evicted, the one `latest` gives
            for name in reversed(loaded):
                if name in self._memory:
                    self._memory.move_to_end(name)
        return len(loaded)

    def latest(self, key: str) -> ShelvedState | None:
        """The state of `key` used or kept last in memory (None: none): the chat most likely continued next (after
        a restart, the newest file preloaded)."""
        with self._lock:
            return next((e for e in reversed(self._memory.values()) if e.key == key), None)

    def _touch(self, name: str) -> ShelvedState | None:
        """The memory tier's state `name`, marked as just used; None when it has gone meanwhile."""
        with self._lock:
            entry = self._memory.get(name)
            if entry is not None:
                self._memory.move_to_end(name)
            return entry

    def put(self, key: str, tokens: Sequence[int], state: ctypes.Array, defer: Defer | None = None) -> None:
        """Keeps `state`, which holds the positions of `tokens`, in memory at once, and on disk through `defer`
        (OneTimeWork.owe: in the model's idle time) or, without it, now. A kept state of the same chat that is a
        prefix of this one is dropped (this one serves every prompt it served), and this one is not kept when a kept
        one extends it. The shelf keeps `state` as it is: the caller must not change it afterwards."""
        entry = ShelvedState(key, tuple(tokens), state)
        if entry.nbytes > self.memory_bytes or not entry.tokens:
            return
        with self._lock:
            name = entry.name
            if name in self._memory:
                self._memory.move_to_end(name)
                return
            if self._extended(entry):
                return
            for other in [e for e in self._memory.values() if _is_prefix(e, entry)]:
                self._forget(other.name)
            self._memory[name] = entry
            self._memory_used += entry.nbytes
            while self._memory_used > self.memory_bytes:
                self._forget(next(iter(self._memory)))
        if self.folder is not None:
            if defer is None:
                self.write(name)
            else:
                defer(f"keep prompt state {name}", lambda check: self.write(name, check))

    def write(self, name: str, check: Callable[[], None] = lambda: None) -> bool:
        """Writes the memory tier's state `name` to disk (atomically, synced), drops the files of its chat's shorter
        states and evicts the least recently used files beyond the disk cap. `check` runs between blocks and may
        raise to stop (a reply started: OneTimeWork's Interrupted; no file is left). False when the state is no
        longer in memory or could not be written (a full or read-only disk: logged)."""
        with self._lock:
            entry = self._memory.get(name)
        if entry is None or self.folder is None or file_size(entry) > self.disk_bytes:
            return False
        path = self.folder / name
        if not path.exists():
            try:
                check_disk_space({self.folder: file_size(entry) + FREE_MARGIN}, _no_room)
                write_state_file(path, entry, check)
            except OSError as error:
                log.warning("could not keep a prompt state in %s: %s", self.folder, error)
                return False
        with self._lock:
            self._on_disk[name] = entry.tokens
            for other, held in list(self._disk_entries(entry.key).items()):
                if other != name and other.startswith(entry.key) and _starts(entry.tokens, held):
                    self._delete(other)
            self._evict_disk()
        return True

    def discard(self, entry: ShelvedState) -> None:
        """Drops a state that llama.cpp refused, from memory and from disk."""
        with self._lock:
            self._forget(entry.name)
            if self.folder is not None:
                self._delete(entry.name)

    def forget_key(self, key: str) -> None:
        """Drops the states of `key` from memory (their model was closed); their files stay for a later load."""
        with self._lock:
            for name in [n for n, e in self._memory.items() if e.key == key]:
                self._forget(name)

    def _extended(self, entry: ShelvedState) -> bool:
        """Whether a kept state of the same key holds `entry`'s tokens and more (it is touched)."""
        for name, other in self._memory.items():
            if _is_prefix(entry, other):
                self._memory.move_to_end(name)
                return True
        return False

    def _forget(self, name: str) -> None:
        entry = self._memory.pop(name, None)
        if entry is not None:
            self._memory_used -= entry.nbytes

    def _disk_entries(self, key: str) -> dict[str, tuple[int, ...]]:
        """The files of `key` in the folder with their tokens: listed again when the folder changed (another
        process wrote one), each new file's header read once (a damaged one deleted)."""
        if self.folder is None:
            return {}
        try:
            changed = self.folder.stat().st_mtime_ns
            if self._listed.get(key) != changed:
                names = {p.name for p in self.folder.iterdir() if p.name.startswith(key) and p.name.endswith(SUFFIX)}
                for gone in [n for n in self._on_disk if n.startswith(key) and n not in names]:
                    del self._on_disk[gone]
                for name in sorted(names - self._on_disk.keys())[:MAX_FILES]:
                    held = self._read_tokens(key, name)
                    if held is not None:
                        self._on_disk[name] = held
                self._listed[key] = changed
        except OSError:  # no folder yet, or it cannot be read: nothing on disk
            return {}
        return {name: held for name, held in self._on_disk.items() if name.startswith(key)}

    def _read_tokens(self, key: str, name: str) -> tuple[int, ...] | None:
        try:
            with open(self.folder / name, "rb") as stream:
                tokens, _ = read_head(stream, key, name, self.disk_bytes)
            return tokens
        except FileNotFoundError:
            return None
        except (OSError, DamagedState) as error:
            log.info("a kept prompt state %s was damaged and is deleted: %s", name, error)
            self._delete(name)
            return None

    def _load(self, key: str, name: str, check: Callable[[], None] | None = None,
              touch: bool = True) -> ShelvedState | None:
        """The state in file `name`, read and checked whole with the lock released (hundreds of MB for a long
        document: the background writer goes on meanwhile), then kept in memory and, with `touch`, its file marked
        as just used (a preload does not: it uses nothing); `check` as read_state_file's."""
        path = self.folder / name
        try:
            entry = read_state_file(path, key, self.disk_bytes, check)
        except FileNotFoundError:
            with self._lock:
                self._on_disk.pop(name, None)
            return None
        except (OSError, DamagedState) as error:
            log.info("a kept prompt state %s was damaged and is deleted: %s", name, error)
            with self._lock:
                self._delete(name)
            return None
        if touch:
            with contextlib.suppress(OSError):
                os.utime(path)
        with self._lock:
            if name in self._memory:  # another thread loaded it meanwhile
                self._memory.move_to_end(name)
                return self._memory[name]
            if entry.nbytes <= self.memory_bytes:
                self._memory[name] = entry
                self._memory_used += entry.nbytes
                while self._memory_used > self.memory_bytes:  # never the state just kept: it fits
                    self._forget(next(iter(self._memory)))
        return entry

    def _delete(self, name: str) -> None:
        self._on_disk.pop(name, None)
        with contextlib.suppress(OSError):
            (self.folder / name).unlink()

    def _evict_disk(self) -> None:
        """Deletes the least recently used state files (by modification time: a use touches its file) until the
        folder's states, of every key, fit the disk cap and number MAX_FILES at most; and staging files left by
        writers that died."""
        try:
            paths = list(self.folder.iterdir())
        except OSError:  # the folder is gone or cannot be read: nothing to evict
            return
        files = []
        now = time.time()
        for path in paths:
            with contextlib.suppress(OSError):
                stat = path.stat()
                if path.name.startswith(".") and path.name.endswith(".tmp"):
                    if now - stat.st_mtime > STALE_TEMP_S:
                        path.unlink()
                elif path.name.endswith(SUFFIX):
                    files.append((stat.st_mtime_ns, stat.st_size, path.name))
        total, count = sum(size for _, size, _ in files), len(files)
        for _, size, name in sorted(files):
            if total <= self.disk_bytes and count <= MAX_FILES:
                break
            self._delete(name)
            total, count = total - size, count - 1


def _no_room(needed: int, place: Path, free: int) -> OSError:
    return OSError(f"{free >> 20} MiB free in {place}; a state needs {needed >> 20} MiB with the margin left free")


def _is_prefix(shorter: ShelvedState, longer: ShelvedState) -> bool:
    """Whether `longer` (of the same key) holds `shorter`'s tokens and more."""
    return (shorter.key == longer.key and len(shorter.tokens) < len(longer.tokens)
            and _starts(longer.tokens, shorter.tokens))


def _starts(tokens: tuple[int, ...], prefix: tuple[int, ...]) -> bool:
    return len(prefix) < len(tokens) and tokens[:len(prefix)] == prefix


# --- the runner's side ------------------------------------------------------------------------------------------------

@dataclass
class PromptRead:
    """What reading a prompt gave the runner: the state, converted for the decoding context only when it moves
    there (decoding_state), so that a prompt's first token does not wait for it."""

    raw: ctypes.Array | None  # the sequence state as the reader's float16 cache holds it; None: deferred
    kept: int  # leading positions not read: held by the reader, or restored from the shelf
    restored: int  # of those, restored from the shelf (0 when the shelf gave nothing)
    logits: np.ndarray | None = None  # the last position's, when asked for
    features: np.ndarray | None = None  # the last position's final-norm hidden state, when asked for
    shared: bool = False  # `raw` is on the shelf too: converted through a copy, not in place
    version: int = 0  # the reader's version after the read, for a deferred state
    _moved: bool = field(default=False, init=False)  # decoding_state was called

    def decoding_state(self, reader) -> ctypes.Array:
        """The state for the decoding context's bfloat16 cache (prompt_reader.as_decoding_state), once: `raw` is
        `reader`'s reused buffer, valid until its next read, unless shared; a deferred one is taken from `reader`
        now (StaleRead when it changed since)."""
        if self._moved:
            raise RuntimeError("a prompt's state moves into the decoding context once")
        self._moved = True
        if self.raw is None:
            return reader.deferred_state(self.version)
        if self.shared:
            return reader.decoding_copy(self.raw)
        prompt_reader.as_decoding_state(self.raw, reader.decode_types)
        return self.raw


def read_prompt(reader, model, tokens: list[int], cancel: threading.Event | None = None,
                shelf: StateShelf | None = None, logits: bool = False, features: bool = False) -> PromptRead:
    """Reads `tokens` with `reader` (a PromptReader of `model`, a LlamaCppModel), first restoring the kept state
    that shares more whole chunks with them than the reader holds, then keeps the reader's state on the shelf
    (`shelf`, else default_shelf(); none for a prompt under MIN_SHELVED tokens). `logits` and `features` as
    PromptReader.read; with `logits`, a state that is not shelved is deferred (taken when it moves).
    PrefillCancelled as reader.read; StateFormatError where the cache cannot be converted (then nothing is
    kept)."""
    shelf = shelf if shelf is not None else default_shelf()
    if shelf is None or len(tokens) < MIN_SHELVED:
        read = reader.read(tokens, cancel, logits, features, defer=logits)
        return PromptRead(read.state, read.kept, 0, read.logits, read.features, version=read.version)
    key = shelf_key(model)
    restored = _restore(reader, shelf, key, tokens)
    if len(tokens) - reader.reusable(tokens) < MIN_NEW:  # a follow-up's message: the kept state serves it still
        read = reader.read(tokens, cancel, logits, features, defer=logits)
        return PromptRead(read.state, read.kept, min(restored, read.kept), read.logits, read.features,
                          version=read.version)
    read = reader.read_raw(tokens, cancel, logits, features)  # its layout checked: kept only if it converts
    shelf.put(key, tokens, read.state, getattr(getattr(model, "one_time", None), "owe", None))
    return PromptRead(read.state, read.kept, min(restored, read.kept), read.logits, read.features, shared=True)


def owe_read_ahead(reader, model, tokens: Sequence[int], shelf: StateShelf | None = None) -> None:
    """Owes to `model`'s idle time (core/one_time.py) the reading of `tokens` (a prompt, its reply and the token
    that ended the reply's turn) by `reader` (a PromptReader of `model`), and keeping its state on the shelf
    (`shelf`, else default_shelf()). Why: a reply's positions come from decoding passes, which a prompt may not
    reuse (prompt_reader.py), so the chat's next turn used to read the reply again, and the rest of the pass before
    it, on its first token's path. Read ahead, with passes cut at the turn's end, the next prompt finds everything
    but its new message read: here, after other chats (the shelf's memory) or after a restart (its files). Nothing
    is owed for a prompt too short to be kept (MIN_SHELVED); this reading replaces one still owed (the newest turn
    is the one a follow-up comes after). A reply that starts stops it at its next pass; it goes on at the next
    idle spell from what it read."""
    shelf = shelf if shelf is not None else default_shelf()
    if shelf is None or len(tokens) < MIN_SHELVED:
        return
    tokens = list(tokens)

    def read(check: Callable[[], None]) -> None:
        try:
            key = shelf_key(model)
            _restore(reader, shelf, key, tokens)
            read = reader.read_raw(tokens, _Between(check))
        except PrefillCancelled:  # the reader was closed: its runner's context grew, and a new reader reads anew
            return
        if read.kept < len(tokens):
            shelf.put(key, tokens, read.state, model.one_time.owe)

    model.one_time.owe(READ_AHEAD, read, replace=True)


def latest_kept(model, shelf: StateShelf | None = None) -> ShelvedState | None:
    """The state kept last for `model` in the shelf's memory (`shelf`, else default_shelf()), None when none is:
    what a runner makes room for ahead (LlamaCppRunner.owe_room)."""
    shelf = shelf if shelf is not None else default_shelf()
    if shelf is None:
        return None
    try:
        return shelf.latest(shelf_key(model))
    except OSError:  # the model file went away
        return None


def owe_preload(model, shelf: StateShelf | None = None) -> None:
    """Owes to `model`'s idle time (core/one_time.py) the loading of its latest kept states from disk into the
    shelf's memory (`shelf`, else default_shelf()), up to 1/PRELOAD_SHARE of its cap (StateShelf.preload): a chat
    continued after a restart then restores its state from memory."""
    shelf = shelf if shelf is not None else default_shelf()
    if shelf is None or shelf.folder is None:
        return

    def preload(check: Callable[[], None]) -> None:
        try:
            key = shelf_key(model)
        except OSError:  # the model file went away: nothing of it to load
            return
        shelf.preload(key, shelf.memory_bytes // PRELOAD_SHARE, check)

    model.one_time.owe(PRELOAD, preload)


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class _Between:
    """A one-time task's check (raising one_time.Interrupted when a reply starts) as the cancel event a reader
    tests between its passes."""

    def __init__(self, check: Callable[[], None]):
        self._check = check

    def is_set(self) -> bool:
        self._check()
        return False


def _restore(reader, shelf: StateShelf, key: str, tokens: list[int]) -> int:
    """Restores into `reader` the kept state that gives it more whole chunks of `tokens` than it holds; returns
    how many positions it gives (0: none did)."""
    held = reader.reusable(tokens)
    entry = shelf.lookup(key, tokens, at_least=max(MIN_SHARED, held + 1), max_held=reader.n_ctx)
    if entry is None:
        return 0
    if not reader.restore(entry.tokens, entry.state):
        log.info("llama.cpp refused a kept prompt state; it is dropped")
        shelf.discard(entry)
        return 0
    return reader.reusable(tokens)


def shelf_key(model) -> str:
    """32 hex digits naming what a state's bytes depend on: the model file (kernels.verdict_key: its path, size and
    modification time, llama.cpp's build, the CPU, the weights' layout and the placement, plus a hash of its first
    HEADER_HASHED bytes), llama.cpp's system information, the reader's and decoder's cache types, the chunk size and
    this file format. The context size and the thread count are not in it: they change no byte (measured)."""
    stat = model.path.stat()
    return _key(str(model.path), stat.st_size, stat.st_mtime_ns, model.kernels.repack, model.placement.key,
                prompt_reader.CHUNK, decoding_types(model.placement.offloaded))


@functools.lru_cache(maxsize=32)
def _key(path: str, size: int, mtime_ns: int, repack: bool, placement: str, chunk: int,
         decode: tuple[int, int]) -> str:
    with open(path, "rb") as stream:
        head = hashlib.sha256(stream.read(HEADER_HASHED)).hexdigest()
    return fingerprint(verdict_key(Path(path), repack, placement), size, mtime_ns, head, _system_info(),
                       f"read={READ_TYPE}", f"read_flash={int(prompt_reader.READ_FLASH_ATTN)}", f"decode={decode[0]}/{decode[1]}",
                       f"chunk={chunk}", f"passes={prompt_reader.SCHEDULE}", f"format={FORMAT}", digits=32)


@functools.lru_cache(maxsize=1)
def _system_info() -> str:
    import llama_cpp

    return f"{llama_cpp.__version__}:{llama_cpp.llama_print_system_info().decode('utf-8', 'replace')}"


def forget_model(model) -> None:
    """Drops a closing model's states from the memory of every shelf of this process (their files stay)."""
    try:
        key = shelf_key(model)
    except (OSError, ImportError, AttributeError):  # the file is gone, or the model was never whole
        return
    with _shelves_lock:
        shelves = list(_shelves.values())
    for shelf in shelves:
        shelf.forget_key(key)


_shelves: dict[tuple[Path, int, int], StateShelf] = {}
_shelves_lock = threading.Lock()


def default_shelf() -> StateShelf | None:
    """The process's shelf over <user cache>/llama-states, with the caps of $SPECCHAT_STATE_MEMORY_MIB and
    $SPECCHAT_STATE_DISK_MIB (defaults DEFAULT_MEMORY_MIB and DEFAULT_DISK_MIB); None when the memory cap is 0."""
    memory, disk = _mib(MEMORY_ENV, DEFAULT_MEMORY_MIB), _mib(DISK_ENV, DEFAULT_DISK_MIB)
    if memory == 0:
        return None
    where = (cache_file(FOLDER), memory, disk)
    with _shelves_lock:
        if where not in _shelves:
            _shelves[where] = StateShelf(where[0], memory << 20, disk << 20)
        return _shelves[where]


def _mib(variable: str, default: int) -> int:
    """A cap in MiB from the environment; the default when unset or not a whole number (logged)."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    if text.isdigit():
        return int(text)
    log.warning("%s=%r is not a whole number of MiB; using %d", variable, text, default)
    return default

"""Kept prompt states as files: one file per state, written whole or not at all, and read back only after every
byte is checked (docs/how-it-works.md, "Per-chat states"). The file is the header (magic, format, the key of what
its bytes depend on, the token count, the state's size), the tokens (little-endian uint32), the state as
llama_state_seq_get_data wrote it, and a sha256 of all that. Its name is the key and a hash of the tokens, so a
file holds what its name says or is deleted as damaged. state_shelf.py decides what is kept and where."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

SUFFIX = ".state"
FORMAT = 1
MAGIC = b"SPCSTATE"
HEADER = struct.Struct("<8sI32sIQ")  # magic, format, key (32 hex digits), token count, state bytes
DIGEST_BYTES = 32  # the file's sha256, at its end
MAX_TOKENS = 1 << 22  # bounds what a file may claim to hold
BLOCK = 8 << 20  # bytes written per step (a reply's start interrupts a write between steps)
READ_BLOCK = 1 << 20  # bytes read per step: a preload that a reply's start stops is off the cores within 2 ms


class DamagedState(ValueError):
    """A kept state file that is not what it claims to be (truncated, altered, another key's): it is deleted."""


@dataclass(frozen=True, eq=False)
class ShelvedState:
    """A sequence state of the prompt reader's context and the tokens whose positions it holds."""

    key: str  # shelf_key of the model and settings it was read with
    tokens: tuple[int, ...]
    state: ctypes.Array  # llama_state_seq_get_data's bytes (a float16 cache)

    @property
    def name(self) -> str:
        return state_file_name(self.key, self.tokens)

    @property
    def nbytes(self) -> int:
        return len(self.state)


def state_file_name(key: str, tokens: Sequence[int]) -> str:
    """`<key>-<hash of the tokens><SUFFIX>`: a state's file name, the same in every process."""
    return f"{key}-{hashlib.sha256(_token_bytes(tokens)).hexdigest()[:24]}{SUFFIX}"


def _token_bytes(tokens: Sequence[int]) -> bytes:
    return np.asarray(tokens, dtype="<u4").tobytes()


def file_size(entry: ShelvedState) -> int:
    """The bytes of `entry`'s file: the header, the tokens, the state and the checksum."""
    return HEADER.size + 4 * len(entry.tokens) + entry.nbytes + DIGEST_BYTES



def write_state_file(path: Path, entry: ShelvedState, check: Callable[[], None] = lambda: None) -> None:
    """Writes `entry` to `path`: the header, the tokens (little-endian uint32), the state and the sha256 of all
    that, to a staging file of its own in the same folder (tempfile: two writers never share one), synced, then
    renamed over `path`, so a reader sees no file or a whole one. The staging file is removed on any failure or
    interruption (whatever `check` raises between blocks is raised)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, staging = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as out:
            digest = hashlib.sha256()
            body = memoryview(entry.state).cast("B")
            pieces = [HEADER.pack(MAGIC, FORMAT, entry.key.encode("ascii"), len(entry.tokens), entry.nbytes),
                      _token_bytes(entry.tokens)]
            pieces += [body[start:start + BLOCK] for start in range(0, len(body), BLOCK)]
            for piece in pieces:
                check()
                digest.update(piece)
                out.write(piece)
            out.write(digest.digest())
            out.flush()
            os.fsync(out.fileno())
        os.replace(staging, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(staging)
        raise
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """fsync of the folder, so that the rename survives a crash (where the system allows it)."""
    with contextlib.suppress(OSError, AttributeError):
        descriptor = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def read_state_file(path: Path, key: str, limit: int, check: Callable[[], None] | None = None) -> ShelvedState:
    """The state kept in `path` for `key`, read and checked whole: DamagedState when its header, sizes (a state of
    at most `limit` bytes), name or checksum are not right; OSError (FileNotFoundError) as reading raises it.
    `check` runs before each READ_BLOCK read (it may raise to stop)."""
    with open(path, "rb") as stream:
        tokens, nbytes = read_head(stream, key, path.name, limit)
        digest = hashlib.sha256()
        stream.seek(0)
        digest.update(_read_exactly(stream, HEADER.size + 4 * len(tokens)))
        state = (ctypes.c_uint8 * nbytes)()
        view = memoryview(state).cast("B")
        for start in range(0, nbytes, READ_BLOCK):
            if check is not None:
                check()
            block = view[start:start + READ_BLOCK]
            if stream.readinto(block) != len(block):
                raise DamagedState("shorter than its header says")
            digest.update(block)
        if stream.read(DIGEST_BYTES + 1) != digest.digest():
            raise DamagedState("its checksum does not match")
    return ShelvedState(key, tokens, state)


def read_head(stream, key: str, name: str, limit: int) -> tuple[tuple[int, ...], int]:
    """The tokens and state size in a state file's header, checked against the file's size, its name and `key`."""
    size = os.fstat(stream.fileno()).st_size
    magic, version, file_key, n_tokens, nbytes = HEADER.unpack(_read_exactly(stream, HEADER.size))
    if magic != MAGIC or version != FORMAT:
        raise DamagedState("not a state file of this version")
    if file_key != key.encode("ascii") or not name.startswith(key):
        raise DamagedState("written for another model, build or setting")
    if not 0 < n_tokens <= MAX_TOKENS or not 0 < nbytes <= limit:
        raise DamagedState(f"a size out of bounds ({n_tokens} tokens, {nbytes} bytes)")
    if size != HEADER.size + 4 * n_tokens + nbytes + DIGEST_BYTES:
        raise DamagedState(f"{size} bytes where its header says {HEADER.size + 4 * n_tokens + nbytes + DIGEST_BYTES}")
    tokens = tuple(np.frombuffer(_read_exactly(stream, 4 * n_tokens), dtype="<u4").tolist())
    if state_file_name(key, tokens) != name:
        raise DamagedState("its tokens are not those its name says")
    return tokens, nbytes


def _read_exactly(stream, count: int) -> bytes:
    data = stream.read(count)
    if len(data) != count:
        raise DamagedState("truncated")
    return data

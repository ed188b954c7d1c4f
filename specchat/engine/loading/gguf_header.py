"""A GGUF file's header values (architecture, layer count, heads), read with the standard library alone.

Planning how many of a file's layers fit on a GPU (engine/backends/llamacpp/offload.py) needs its shape before llama.cpp loads it.
llama.cpp's vocab-only load aborts the process when asked for per-layer values, and gguf-py's reader maps every
tensor (seconds for a small file on a busy machine), so this reads the key-value section up to the keys it was
asked for and stops: a few milliseconds, whatever the file's size.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

from ...core.errors import ModelLoadError

# GGUF value types: struct format of the scalars; 8 is a string, 9 an array.
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9


def _read(handle: BinaryIO, fmt: str):
    size = struct.calcsize("<" + fmt)
    data = handle.read(size)
    if len(data) != size:
        raise EOFError
    return struct.unpack("<" + fmt, data)[0]


def _string(handle: BinaryIO) -> str:
    return handle.read(_read(handle, "Q")).decode("utf-8", "replace")


def _value(handle: BinaryIO, kind: int, keep: bool):
    """The next value of type `kind`; arrays and unwanted strings are skipped (None) unless `keep`."""
    if kind in SCALARS:
        return _read(handle, SCALARS[kind])
    if kind == STRING:
        length = _read(handle, "Q")
        if not keep:
            handle.seek(length, 1)
            return None
        return handle.read(length).decode("utf-8", "replace")
    if kind == ARRAY:
        item, count = _read(handle, "I"), _read(handle, "Q")
        if item in SCALARS and not keep:
            handle.seek(count * struct.calcsize("<" + SCALARS[item]), 1)
            return None
        values = [_value(handle, item, keep) for _ in range(count)]
        return values if keep else None
    raise ValueError(f"unknown GGUF value type {kind}")


def header_values(path: Path, wanted: set[str]) -> dict:
    """The values of the keys in `wanted` that the file's header holds (arrays as lists). Takes a GGUF file's path;
    raises ModelLoadError naming the file when it is not a GGUF file or its header is cut short."""
    found: dict = {}
    try:
        with open(path, "rb") as handle:
            if handle.read(4) != b"GGUF":
                raise ModelLoadError(f"{path.name} is not a GGUF file")
            version = _read(handle, "I")
            if version < 2:
                raise ModelLoadError(f"{path.name} is a GGUF version {version} file; llama.cpp reads version 2 and up")
            _read(handle, "Q")  # tensors
            for _ in range(_read(handle, "Q")):
                key = _string(handle)
                value = _value(handle, _read(handle, "I"), keep=key in wanted)
                if key in wanted:
                    found[key] = value
                    if len(found) == len(wanted):
                        break
    except (OSError, EOFError, ValueError, UnicodeDecodeError) as error:
        raise ModelLoadError(f"could not read the header of {path.name}: {error or 'it ends early'}") from error
    return found


def layer_shape(path: Path) -> tuple[int, int, int]:
    """(repeating layers, KV heads, head size) of a GGUF model, for the size of its KV cache per layer. A per-layer
    head count (an array) counts its largest value."""
    arch = header_values(path, {"general.architecture"}).get("general.architecture")
    if not isinstance(arch, str):
        raise ModelLoadError(f"{path.name} does not name its architecture")
    keys = {f"{arch}.{k}" for k in ("block_count", "attention.head_count", "attention.head_count_kv",
                                     "embedding_length", "attention.key_length")}
    values = header_values(path, keys)

    def number(key: str, default: int = 0) -> int:
        value = values.get(f"{arch}.{key}", default)
        return int(max(value) if isinstance(value, list) and value else value or default)

    layers, heads = number("block_count"), max(number("attention.head_count", 1), 1)
    if layers <= 0:
        raise ModelLoadError(f"{path.name} does not say how many layers it has")
    head_size = number("attention.key_length") or number("embedding_length") // heads
    return layers, number("attention.head_count_kv") or heads, head_size

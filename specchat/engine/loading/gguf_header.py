"""A GGUF file's header values (architecture, layer count, heads), read with the standard library alone, and
named tensors' bytes (tensor_bytes) without gguf-py's reader.

Planning how many of a file's layers fit on a GPU (engine/backends/llamacpp/offload.py) needs its shape before llama.cpp loads it.
llama.cpp's vocab-only load aborts the process when asked for per-layer values, and gguf-py's reader maps every
tensor (seconds for a small file on a busy machine), so this reads the key-value section up to the keys it was
asked for and stops: a few milliseconds, whatever the file's size. A draft head needs two of the target's tensors
(its embeddings and output head); gguf-py's reader maps the file's every field (the vocabulary's strings) and tensor
before handing them over: loading the embedded file's two took 1.95 s through it, 0.40 s through tensor_bytes
(their dequantization included), which skips the strings and maps only those two tensors' bytes.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import BinaryIO, NamedTuple

import numpy as np

from ...core.errors import ModelLoadError

# GGUF value types: struct format of the scalars; 8 is a string, 9 an array.
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9
MAX_STRING = 1 << 24  # bytes: a chat template is a few KiB, a key or a tensor's name tens of bytes
MAX_KEPT_ITEMS = 1 << 20  # values of an array read into a list (per-layer values: a few hundred)
MAX_DEPTH = 4  # arrays within arrays


def _read(handle: BinaryIO, fmt: str):
    size = struct.calcsize("<" + fmt)
    data = handle.read(size)
    if len(data) != size:
        raise EOFError
    return struct.unpack("<" + fmt, data)[0]


def _string(handle: BinaryIO) -> str:
    return handle.read(_length(handle)).decode("utf-8", "replace")


def _length(handle: BinaryIO) -> int:
    """A string's length, within MAX_STRING: a hostile length would read the rest of a large file into memory."""
    length = _read(handle, "Q")
    if length > MAX_STRING:
        raise ValueError(f"a string of {length} bytes")
    return length


def _value(handle: BinaryIO, kind: int, keep: bool, depth: int = 0):
    """The next value of type `kind`; arrays and unwanted strings are skipped (None) unless `keep`. A kept array
    holds at most MAX_KEPT_ITEMS values, and arrays nest at most MAX_DEPTH deep (ValueError beyond: a hostile file
    would fill memory or the stack)."""
    if kind in SCALARS:
        return _read(handle, SCALARS[kind])
    if kind == STRING:
        length = _length(handle)
        if not keep:
            handle.seek(length, 1)
            return None
        return handle.read(length).decode("utf-8", "replace")
    if kind == ARRAY:
        item, count = _read(handle, "I"), _read(handle, "Q")
        if depth >= MAX_DEPTH:
            raise ValueError(f"arrays nested more than {MAX_DEPTH} deep")
        if item in SCALARS and not keep:
            handle.seek(count * struct.calcsize("<" + SCALARS[item]), 1)
            return None
        if keep and count > MAX_KEPT_ITEMS:
            raise ValueError(f"an array of {count} values")
        values = [_value(handle, item, keep, depth + 1) for _ in range(count)]
        return values if keep else None
    raise ValueError(f"unknown GGUF value type {kind}")


def _why(error: Exception) -> str:
    return str(error) or "it ends early"


MAX_DIMS = 4  # ggml's
DEFAULT_ALIGNMENT = 32  # the data section's, unless general.alignment says otherwise


class TensorBytes(NamedTuple):
    """A tensor as its file holds it: ggml's type number, its shape as ggml lists it (fastest-varying first), and
    its bytes as a read-only uint8 array of [rows, bytes per row] mapped from the file."""

    ggml_type: int
    dims: tuple[int, ...]
    data: np.ndarray


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
        raise ModelLoadError(f"could not read the header of {path.name}: {_why(error)}") from error
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


def tensor_bytes(path: Path, names: set[str], sizes: dict[int, tuple[int, int]]) -> dict[str, TensorBytes]:
    """The tensors of `names` that the GGUF file at `path` holds, mapped from the file (TensorBytes). `sizes`: ggml
    type -> (elements per block, bytes per block) (gguf.GGML_QUANT_SIZES). Every offset, shape and size is checked
    against the file before it is mapped: a hostile or damaged file raises ModelLoadError naming it."""
    infos: dict[str, tuple[int, tuple[int, ...], int]] = {}
    try:
        file_size = path.stat().st_size
        with open(path, "rb") as handle:
            if handle.read(4) != b"GGUF":
                raise ModelLoadError(f"{path.name} is not a GGUF file")
            if _read(handle, "I") < 2:
                raise ModelLoadError(f"{path.name} is a GGUF file older than version 2")
            tensors, fields = _read(handle, "Q"), _read(handle, "Q")
            alignment = DEFAULT_ALIGNMENT
            for _ in range(fields):
                key = _string(handle)
                kind = _read(handle, "I")
                value = _value(handle, kind, keep=key == "general.alignment" and kind in SCALARS)
                if key == "general.alignment" and isinstance(value, int) and value > 0:
                    alignment = value
                if handle.tell() > file_size:
                    raise EOFError
            for _ in range(tensors):
                name = _string(handle)
                n_dims = _read(handle, "I")
                if not 0 < n_dims <= MAX_DIMS:
                    raise ValueError(f"tensor {name!r} has {n_dims} dimensions")
                dims = tuple(_read(handle, "Q") for _ in range(n_dims))
                ggml_type, offset = _read(handle, "I"), _read(handle, "Q")
                if name in names:
                    infos[name] = (ggml_type, dims, offset)
            start = -(-handle.tell() // alignment) * alignment
    except (OSError, EOFError, ValueError, UnicodeDecodeError) as error:
        raise ModelLoadError(f"could not read the tensors of {path.name}: {_why(error)}") from error
    found = {}
    for name, (ggml_type, dims, offset) in infos.items():
        if ggml_type not in sizes:
            raise ModelLoadError(f"{path.name}: tensor {name!r} has a type ({ggml_type}) this reader does not know")
        block, block_bytes = sizes[ggml_type]
        if not all(dims) or dims[0] % block:
            raise ModelLoadError(f"{path.name}: tensor {name!r} has an empty dimension or rows of part of a block")
        row_bytes, rows = dims[0] // block * block_bytes, math.prod(dims[1:])  # Python integers: no overflow
        if start + offset + rows * row_bytes > file_size:
            raise ModelLoadError(f"{path.name}: tensor {name!r} runs past the end of the file")
        try:
            data = np.memmap(path, dtype=np.uint8, mode="r", offset=start + offset, shape=(rows, row_bytes))
        except (OSError, ValueError) as error:
            raise ModelLoadError(f"could not map tensor {name!r} of {path.name}: {_why(error)}") from error
        found[name] = TensorBytes(ggml_type, dims, data)
    return found

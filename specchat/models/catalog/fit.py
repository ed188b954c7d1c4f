"""Where a catalog model would run on this machine, in what format, whether it fits, and what the catalog offers to
download for it: the one judgement (run_here) that `specchat models catalog` (commands/catalog_report.py) and Settings →
Models… (ui/model_rows.py) share, so that the terminal and the window never disagree on a model's format, size or
verdict. The memory rule itself is entries.memory_verdict, and the CPU's choice of float32 (entries.fits_at_float32) is the
one the loader makes. What this machine is (Machine) is found by engine/loading/machine.py; no torch and no Qt here.

On a CPU with llama.cpp installed, or where llama.cpp offloads to a GPU, a model whose entry names GGUF files is
offered as its default quantization (Q4_K_M), which llama.cpp runs several times faster than torch runs
safetensors, and on llama.cpp's GPU it must fit in that GPU's free memory; elsewhere (a torch GPU with a CPU-only
llama.cpp, no llama.cpp) the safetensors checkpoint is offered, as for training drafters."""

from __future__ import annotations

from dataclasses import dataclass

from ...core.formatting import format_size
from . import entries as cat
from .entries import CatalogEntry, Fit, fits_at_float32
from .quants import GGUF_BITS

SHIPS = ("embedded", "embedded-draft")  # the load specs of what ships with specchat: nothing to download


@dataclass(frozen=True)
class Machine:
    """Where a model would run here, and the memory free there."""

    device: str  # "cpu", "cuda" or "mps"
    available_bytes: int | None
    native_bf16: bool  # the CPU computes bfloat16 natively (what "auto" precision needs to choose it)
    llama_cpp: bool = False  # llama-cpp-python is installed, so GGUF files run on llama.cpp
    gpu_format: str = "bf16"  # what a GPU runs at: bf16 on CUDA (fp16 where bf16 is missing), fp16 on MPS
    # The free memory of the GPU llama.cpp offloads GGUF files to (engine/backends/llamacpp/offload.py); None: they stay on the CPU.
    llama_gpu_bytes: int | None = None

    @property
    def gguf_on_llama(self) -> bool:
        """GGUF files run on llama.cpp here: on the CPU, or offloaded to llama.cpp's GPU."""
        return self.llama_cpp and (self.device == "cpu" or self.llama_gpu_bytes is not None)

    def memory_for(self, fmt: str) -> int | None:
        """The memory a model in `fmt` must fit in: llama.cpp's GPU's for a GGUF format it offloads, else
        available_bytes (the RAM on the CPU, a torch GPU's own)."""
        if self.llama_gpu_bytes is not None and self.llama_cpp and (fmt == "q4" or fmt.upper() in GGUF_BITS):
            return self.llama_gpu_bytes
        return self.available_bytes

    def describe(self) -> str:
        free = format_size(self.available_bytes) if self.available_bytes is not None else "unknown memory"
        if self.llama_gpu_bytes is not None and self.llama_cpp:
            engine = f", llama.cpp on the GPU ({format_size(self.llama_gpu_bytes)} free)"
        else:
            engine = ", llama.cpp" if self.device == "cpu" and self.llama_cpp else ""
        return f"{self.device}{engine}, {free} available"


def run_format(entry: CatalogEntry, precision: str, machine: Machine, dtype: str | None = None) -> str:
    """The catalog's name of the format the model would run in here, as engine/loading/load.py chooses it: `dtype` when
    the user names one (`--dtype`); on the CPU the embedded GGUF file ("q4") and, with llama.cpp, the entry's
    default GGUF quantization; else the Precision setting (float32, bfloat16); else the GPU's format; and on the
    CPU float32 unless it does not fit and bfloat16 is native."""
    if dtype:
        return cat.dtype_name(dtype)
    if machine.device == "cpu" or machine.gguf_on_llama:
        if entry.source == "embedded":
            return "q4"
        if entry.gguf is not None and machine.gguf_on_llama:
            return entry.gguf.default
    if precision in ("float32", "bfloat16"):
        return cat.dtype_name(precision)
    if machine.device != "cpu":
        return machine.gpu_format
    return cpu_float_format(entry, machine)


def cpu_float_format(entry: CatalogEntry, machine: Machine) -> str:
    """float32, unless the model does not fit at float32 and the CPU computes bfloat16 natively: the loader's own
    choice (entries.fits_at_float32, on the entry's parameter count), so that what the catalog says
    a model runs in is what loading it gives."""
    if not machine.native_bf16:
        return "fp32"
    return "fp32" if fits_at_float32(cat.parameter_count(entry), machine.available_bytes) else "bf16"


def memory_rule_text() -> str:
    """The memory rule in words, for the notes under the terminal's table and the Models dialog: what a model
    needs (catalog.memory_needed) and how much to spare for "fits" (catalog.memory_verdict)."""
    spare = f"{round(100 * (cat.HEADROOM - 1))}%"
    return (f"its weights, a {cat.VERDICT_CONTEXT}-token KV cache and {format_size(cat.RUNTIME_BYTES)} for the "
            f"runtime; it fits with {spare} to spare, and is tight without the {spare}")


@dataclass(frozen=True)
class Offer:
    """What the catalog offers for a model here."""

    spec: str  # what Settings and --target load: a Hub id, "org/name/file.gguf", or what ships
    download: str | None  # what a download fetches (a Hub id or a GGUF spec); None: it ships with specchat
    quant: str | None  # the GGUF quantization, when the offer is one GGUF file
    download_bytes: int | None  # None: nothing to download
    estimated: bool = False  # the catalog gives no size for the GGUF file: download_bytes is parameters x bits

    def size_text(self) -> str | None:
        """The download's size as people read it ("3.4 GB"; "~1.0 GB" where estimated); None: nothing to
        download."""
        if self.download_bytes is None:
            return None
        return ("~" if self.estimated else "") + format_size(self.download_bytes)


def offer(entry: CatalogEntry, fmt: str) -> Offer:
    """The offer for a model that would run in `fmt` (run_format): the entry's GGUF file of that type when it has
    one, nothing for what ships with specchat, else the Hub checkpoint (safetensors)."""
    name = cat.dtype_name(fmt)
    if entry.source in SHIPS:
        return Offer(entry.load_spec, None, None, None)
    if name in GGUF_BITS and entry.gguf is not None and any(q.name == name for q in entry.gguf.quants):
        spec = entry.gguf.spec(name)
        return Offer(spec, spec, name, cat.download_bytes(entry, name), entry.gguf.get(name).size is None)
    return Offer(entry.id, entry.id, None, cat.download_bytes(entry))


@dataclass(frozen=True)
class RunHere:
    """How a catalog model runs on this machine: its format (run_format), the memory verdict at that format
    (catalog.fits_in_memory) and what the catalog offers to download for it (offer)."""

    format: str
    fit: Fit
    offer: Offer


def run_here(entry: CatalogEntry, machine: Machine, precision: str = "auto", dtype: str | None = None) -> RunHere:
    """How `entry` runs on `machine` with the Precision setting `precision` ("auto", "float32", "bfloat16") or the
    format `dtype` forces (`--dtype`, None: none): the one judgement the terminal and the Models dialog show."""
    fmt = run_format(entry, precision, machine, dtype)
    return RunHere(fmt, cat.fits_in_memory(entry, fmt, machine.memory_for(fmt)), offer(entry, fmt))

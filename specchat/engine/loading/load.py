"""How a model is loaded once its source is known (models/sources.py): the device and float format it runs in, the
llama.cpp or torch backend, its tokenizer and config, and the GGUF-to-transformers conversion kept in a cache.
Touches no network: downloads are models/hub's, and only when the user asks."""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ...core.errors import ModelLoadError, first_line
from ...core.fs import file_fingerprint
from ...core.paths import cache_file
from ...core.vocabulary import BIT_IDENTICAL, DISTRIBUTION, EXACTNESS_LABELS
from ...models.sources import ModelSource, embedded_model_file, shipped_draft_folder
from ..backends.torch.precision import dtype_label, exactness_note
from .gguf_meta import gguf_config, gguf_tokenizer

log = logging.getLogger(__name__)

BACKENDS = ("auto", "llama.cpp", "torch")


@dataclass(frozen=True)
class LoadOptions:
    device: str | None = None  # None: CUDA, else MPS, else CPU
    dtype: str | None = None  # None: bf16/fp16 on GPUs, fp32 on CPU
    trust_remote_code: bool = False
    allow_pickle: bool = False
    # How a GGUF target runs: "llama.cpp" on the file's own quantized weights (engine/backends/llamacpp/llama_runner.py), "torch" on
    # transformers' float copy; None/"auto": llama.cpp on the CPU where it is installed and passes its check.
    backend: str | None = None
    threads: int | None = None  # llama.cpp's threads (None: SPECCHAT_THREADS, else every core)
    # What a llama.cpp target's replies promise (engine/backends/llamacpp/kernels.py): "bit-identical" to plain decoding (passes
    # capped where its kernels stay batch-invariant), "distribution" (the fastest kernels: the same distribution,
    # rounding may differ) or "auto" (bit-identical where that leaves room to draft).
    exactness: str = "auto"
    # A llama.cpp model's layers on the GPU (engine/backends/llamacpp/offload.py): -1 all, 0 none, n; None: $SPECCHAT_GPU_LAYERS, else
    # as many as fit in its free memory. Only where llama.cpp was built with GPU offload and the device is not "cpu".
    gpu_layers: int | None = None


@dataclass
class LoadedModel:
    source: ModelSource
    model: torch.nn.Module | None  # None until torch_model() when the model runs on llama.cpp
    tokenizer: object
    device: torch.device
    dtype: torch.dtype
    # For a draft: the token ids it proposes from (PROPOSAL_VOCABULARY in its folder), or None for all.
    proposal_vocab: torch.Tensor | None = None
    native: object | None = None  # the LlamaCppModel when the model runs on llama.cpp
    options: LoadOptions = LoadOptions()
    backend_note: str | None = None  # why a GGUF model runs on torch although llama.cpp was wanted, for the user

    @property
    def backend(self) -> str:
        return "llama.cpp" if self.native is not None else "torch"

    @property
    def runs_on(self) -> str:
        """Where the model runs, for the user: "llama.cpp, CPU, 2 threads, …", "llama.cpp, CUDA0, 29/29 layers, …",
        "cpu, float32", "cuda, bfloat16"."""
        if self.native is not None:
            threads = f"{self.native.threads} thread{'s' if self.native.threads > 1 else ''}"
            return (f"llama.cpp, {self.native.placement.describe()}, {threads}, "
                    f"{EXACTNESS_LABELS[self.native.kernels.exactness].short}")
        place = f"{self.device}, {dtype_label(self.dtype)}"
        return f"{place} ({self.backend_note})" if self.backend_note else place

    @property
    def place(self) -> str:
        """The device its passes run on, for records and calibrations: "cpu", "cuda", or llama.cpp's "Vulkan0"."""
        offloaded = self.native is not None and self.native.placement.offloaded
        return self.native.placement.device if offloaded else str(self.device)

    @property
    def runnable(self):
        """What a drafter calls: the LlamaCppModel on llama.cpp, else the torch module."""
        return self.native if self.native is not None else self.model

    @property
    def weight_bytes(self) -> int:
        """The bytes of weights one pass reads: the GGUF file on llama.cpp, else the torch module's parameters. A
        one-token pass on a CPU is bound by them, so two models' ratio prices one's pass in the other's."""
        if self.native is not None:
            return self.native.path.stat().st_size
        return sum(p.numel() * p.element_size() for p in self.model.parameters()) if self.model is not None else 0

    @property
    def exactness(self) -> str:
        """What a speculative reply promises against plain decoding: "bit-identical" or "distribution"."""
        if self.native is not None:
            return self.native.kernels.exactness
        return BIT_IDENTICAL if exactness_note(self.dtype) is None else DISTRIBUTION

    @property
    def precision_note(self) -> str | None:
        """What the user must know about the float format or kernels (replies not held bit-identical), or None."""
        if self.native is not None:
            if self.native.kernels.exactness == BIT_IDENTICAL:
                return None
            return ("llama.cpp verifies on its fastest kernels: replies follow the model's distribution exactly, "
                    "but rounding may differ from plain decoding where two tokens nearly tie")
        return exactness_note(self.dtype)

    def torch_model(self) -> torch.nn.Module:
        """The transformers model, loaded now if the model runs on llama.cpp (transformers' generate(), training,
        cost curves of the torch path)."""
        if self.model is None:
            self.model = load_model(self.source, replace(self.options, backend="torch")).model
        return self.model

    def gguf_path(self) -> Path | None:
        """The GGUF file this model comes from, if any."""
        if self.source.kind == "embedded":
            return embedded_model_file()
        return Path(self.source.location) if self.source.kind == "gguf" else None

    def eos_token_ids(self) -> set[int]:
        from ..decoding.speculative import default_eos_ids

        if self.native is not None:
            ids = {self.native.eos_token_id} - {-1}
            return ids | ({self.tokenizer.eos_token_id} if self.tokenizer.eos_token_id is not None else set())
        return default_eos_ids(self.model, self.tokenizer)

    @property
    def name(self) -> str:
        return self.source.describe()


def choose_device(preference: str | None = None) -> torch.device:
    if preference and preference != "auto":
        if preference.startswith("cuda") and not torch.cuda.is_available():
            raise ModelLoadError("CUDA was requested but no CUDA device is available")
        if preference == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ModelLoadError("MPS was requested but is not available on this machine")
        try:
            return torch.device(preference)
        except RuntimeError as error:
            raise ModelLoadError(f"unknown device {preference!r} (use auto, cpu, cuda, cuda:N or mps)") from error
    if torch.cuda.is_available():
        return torch.device("cuda")
    if hasattr(torch.backends, "mps") and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float16": torch.float16, "fp16": torch.float16,
          "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}


def choose_dtype(device: torch.device, preference: str | None = None) -> torch.dtype:
    if preference and preference != "auto":
        if preference not in DTYPES:
            raise ModelLoadError(f"unknown dtype {preference!r} (use auto, float32, float16 or bfloat16)")
        return DTYPES[preference]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def _auto_cpu_dtype(location: str) -> torch.dtype:
    """float32, or bfloat16 for a model too big for memory at float32 on a CPU that computes bfloat16 natively
    (engine/backends/torch/precision.py says why)."""
    from ...core.accelerators import cpu_has_native_bf16
    from ...models.catalog.entries import available_memory_bytes
    from ..backends.torch.precision import auto_cpu_dtype, checkpoint_parameters

    return auto_cpu_dtype(checkpoint_parameters(Path(location)), available_memory_bytes(), cpu_has_native_bf16())


def _weights_location(source: ModelSource) -> tuple[str, dict]:
    """(path or id, extra from_pretrained kwargs) for transformers."""
    if source.kind == "embedded":
        path = embedded_model_file()
        return str(path.parent), {"gguf_file": path.name}
    if source.kind == "gguf":
        path = Path(source.location)
        if not path.is_file():
            raise ModelLoadError(f"GGUF file not found: {path}")
        return str(path.parent), {"gguf_file": path.name}
    if source.kind == "shipped":
        return str(shipped_draft_folder()), {}
    if source.kind == "folder":
        if not (Path(source.location) / "config.json").is_file():
            raise ModelLoadError(f"{source.location} has no config.json; is it a Hugging Face model folder?")
        return source.location, {}
    return _cached_hub_snapshot(source.location), {}


def _cached_hub_snapshot(repo_id: str) -> str:
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo_id, local_files_only=True)
    except Exception as error:  # LocalEntryNotFoundError and friends
        raise ModelLoadError(f"{repo_id} is not downloaded; run: specchat models download {repo_id}") from error


def _check_weight_format(folder: str, allow_pickle: bool) -> None:
    files = os.listdir(folder)
    has_safetensors = any(f.endswith(".safetensors") for f in files)
    has_pickle = any(f.endswith((".bin", ".pt", ".pth")) for f in files)
    if not has_safetensors and has_pickle and not allow_pickle:
        raise ModelLoadError(f"{folder} only has pickle (.bin) weights, which can run code when loaded; "
                             "allow them explicitly (--allow-pickle) if you trust the source")


def _fast_location(source: ModelSource) -> tuple[str, dict]:
    """Like _weights_location, but a GGUF file already converted is read from its converted copy (much faster
    to open than parsing the GGUF file again)."""
    location, extra = _weights_location(source)
    if "gguf_file" in extra:
        converted = _converted_location(Path(location) / extra["gguf_file"])
        if (converted / "complete").is_file():
            return str(converted), {}
    return location, extra


def load_tokenizer(source: ModelSource, options: LoadOptions = LoadOptions()):
    """The source's tokenizer. A GGUF file's is converted once and kept, and read back without transformers where it
    can be (engine/loading/gguf_meta.py); other models' through transformers' AutoTokenizer."""
    location, extra = _weights_location(source)
    try:
        if "gguf_file" in extra:
            path = Path(location) / extra["gguf_file"]
            return gguf_tokenizer(path, _tokenizer_seed(source, path), options.trust_remote_code)
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(location, trust_remote_code=options.trust_remote_code, **extra)
    except Exception as error:
        raise ModelLoadError(f"could not load the tokenizer of {source.describe()}: {first_line(error)}") from error


def _tokenizer_seed(source: ModelSource, gguf_path: Path) -> Path | None:
    """A folder already holding the GGUF file's tokenizer, for gguf_tokenizer to read rather than convert the file:
    the shipped draft's for the embedded model (saved from its file), else the file's converted copy for the torch
    path (_load_gguf) if one is kept, else None."""
    if source.kind == "embedded":
        return shipped_draft_folder()
    converted = _converted_location(gguf_path)
    return converted if (converted / "complete").is_file() else None


def load_config(source: ModelSource, options: LoadOptions = LoadOptions()):
    from transformers import AutoConfig

    location, extra = _fast_location(source)
    try:
        if "gguf_file" in extra:
            return gguf_config(Path(location) / extra["gguf_file"], options.trust_remote_code)
        return AutoConfig.from_pretrained(location, trust_remote_code=options.trust_remote_code, **extra)
    except Exception as error:
        raise ModelLoadError(f"could not read the configuration of {source.describe()}: {first_line(error)}") from error


def load_model(source: ModelSource, options: LoadOptions = LoadOptions()) -> LoadedModel:
    """Loads model and tokenizer onto the chosen device in eval mode (a GGUF file onto llama.cpp, its layers on the
    GPU where llama.cpp can offload them: see LoadOptions.backend and gpu_layers)."""
    location, extra = _weights_location(source)
    if "gguf_file" in extra and runs_on_llama_cpp(source, options):
        native = _load_native(Path(location) / extra["gguf_file"], options)  # its logits come back to the CPU
        return LoadedModel(source=source, model=None, tokenizer=load_tokenizer(source, options),
                           device=torch.device("cpu"), dtype=torch.float32, native=native, options=options)
    device = choose_device(options.device)
    dtype = choose_dtype(device, options.dtype)
    if device.type == "cpu" and (options.dtype or "auto") == "auto" and "gguf_file" not in extra:
        dtype = _auto_cpu_dtype(location)
    note = None
    if "gguf_file" in extra and device.type == "cpu" and (options.backend or "auto") == "auto":
        from ..backends.llamacpp.library import INSTALL_HINT

        note = "torch: llama.cpp is not installed"
        log.warning("llama.cpp is not installed: GGUF models run on transformers' float32 copy, several times "
                    "slower; %s", INSTALL_HINT)
    try:
        if "gguf_file" in extra:
            model, tokenizer = _load_gguf(Path(location) / extra["gguf_file"], dtype)
        else:
            _check_weight_format(location, options.allow_pickle)
            model, tokenizer = _load_pretrained(location, dtype, options)
        model.to(device).eval()
    except ModelLoadError:
        raise
    except torch.cuda.OutOfMemoryError as error:
        raise ModelLoadError(f"not enough GPU memory to load {source.describe()}; try --device cpu") from error
    except Exception as error:
        raise ModelLoadError(f"could not load {source.describe()}: {first_line(error)}") from error
    return LoadedModel(source=source, model=model, tokenizer=tokenizer, device=device, dtype=dtype,
                       proposal_vocab=read_proposal_vocabulary(Path(location), model), options=options,
                       backend_note=note)


def runs_on_llama_cpp(source: ModelSource, options: LoadOptions = LoadOptions()) -> bool:
    """Whether load_model puts `source` on llama.cpp: a GGUF file, llama-cpp-python installed, the backend not
    "torch", and for a GPU named by the device setting ("cuda", "mps"), a llama.cpp that can offload to one (else
    auto takes the torch path on that GPU). An explicit "llama.cpp" that cannot run is a ModelLoadError saying why."""
    from ..backends.llamacpp.library import INSTALL_HINT, llama_cpp_available, why_no_gpu_offload

    backend = options.backend or "auto"
    if backend not in BACKENDS:
        raise ModelLoadError(f"unknown backend {backend!r} (use {', '.join(BACKENDS)})")
    if backend == "torch" or source.kind not in ("embedded", "gguf"):
        return False
    if not llama_cpp_available():
        if backend == "llama.cpp":
            raise ModelLoadError(f"the llama.cpp backend is not installed; {INSTALL_HINT}")
        return False
    no_gpu = why_no_gpu_offload() if (options.device or "auto") not in ("auto", "cpu") else None
    if no_gpu is not None and backend == "llama.cpp":
        raise ModelLoadError(f"--device {options.device} with the llama.cpp backend: {no_gpu}; or use --device auto")
    return no_gpu is None


def _load_native(gguf_path: Path, options: LoadOptions):
    """The GGUF file on llama.cpp, on the kernels its exactness setting allows (engine/backends/llamacpp/kernels.py): every
    quantization llama.cpp runs stays on llama.cpp."""
    from ..backends.llamacpp.llama_runner import load_with_exactness

    try:
        return load_with_exactness(gguf_path, threads=options.threads, wanted=options.exactness,
                                   device=options.device, gpu_layers=options.gpu_layers)
    except ValueError as error:  # an unknown exactness name
        raise ModelLoadError(str(error)) from error


PROPOSAL_VOCABULARY = "proposal_vocab.json"  # written by `specchat train-draft` next to the draft's weights


def read_proposal_vocabulary(folder: Path, model: torch.nn.Module) -> torch.Tensor | None:
    """The token ids a draft folder says it should propose from, checked against the model, or None."""
    path = folder / PROPOSAL_VOCABULARY
    if not path.is_file():
        return None
    try:
        ids = torch.tensor(json.loads(path.read_text(encoding="utf-8"))["token_ids"], dtype=torch.long)
    except (ValueError, KeyError, TypeError) as error:
        raise ModelLoadError(f"{path} is not a proposal vocabulary: {first_line(error)}") from error
    rows = model.get_output_embeddings().weight.shape[0]
    if ids.ndim != 1 or len(ids) == 0 or int(ids.min()) < 0 or int(ids.max()) >= rows:
        raise ModelLoadError(f"{path} names token ids outside the model's vocabulary of {rows}")
    return ids


def _load_pretrained(location: str, dtype: torch.dtype, options: LoadOptions = LoadOptions(), **extra):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(location, trust_remote_code=options.trust_remote_code, **extra)
    model = AutoModelForCausalLM.from_pretrained(location, dtype=dtype, trust_remote_code=options.trust_remote_code,
                                                 use_safetensors=None if options.allow_pickle or extra else True,
                                                 **extra)
    return model, tokenizer


def converted_cache_dir() -> Path:
    """Where GGUF files' safetensors copies are kept: <user cache folder>/converted (core.paths: SPECCHAT_CACHE_DIR,
    else the platform's)."""
    return cache_file("converted")


def _converted_location(gguf_path: Path) -> Path:
    """Where the safetensors copy of a GGUF file lives, keyed by its path, size and mtime (file_fingerprint)."""
    return converted_cache_dir() / f"{gguf_path.stem}-{file_fingerprint(gguf_path)}"


def needs_conversion(source: ModelSource) -> bool:
    """True when loading `source` will first dequantise a GGUF file (slow, once)."""
    try:
        location, extra = _weights_location(source)
        return "gguf_file" in extra and not (_converted_location(Path(location) / extra["gguf_file"]) / "complete").is_file()
    except (ModelLoadError, OSError):
        return False


def _load_gguf(gguf_path: Path, dtype: torch.dtype):
    """GGUF weights are dequantised by transformers, which takes tens of seconds on a CPU; a safetensors copy is
    kept in the user cache so that later loads take about a second."""
    converted = _converted_location(gguf_path)
    if (converted / "complete").is_file():
        return _load_pretrained(str(converted), dtype)
    log.info("dequantising %s (first load only)", gguf_path.name)
    model, tokenizer = _load_pretrained(str(gguf_path.parent), torch.float32, gguf_file=gguf_path.name)
    _save_converted(model, tokenizer, converted, gguf_path)
    return model.to(dtype), tokenizer


def _save_converted(model, tokenizer, converted: Path, gguf_path: Path) -> None:
    # transformers dequantised the GGUF tensors into plain float32 Linear layers; only the bookkeeping still says
    # "quantized", which would make save_pretrained refuse and the copy claim a quantisation it does not have.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    staging = converted.with_name(f"{converted.name}.tmp{os.getpid()}")
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / "complete").write_text(str(gguf_path))
        os.replace(staging, converted)
    except OSError as error:  # a read-only or full cache only costs the next launch the same conversion
        log.warning("could not keep the converted model in %s: %s", converted, error)
        shutil.rmtree(staging, ignore_errors=True)



"""llama.cpp's extra buffer types (`use_extra_bufts`: weights re-laid for its fastest CPU kernels, the runner's
"repack" setting): where this build may use them, and llama-cpp-python's own Llama, the benchmarks' peer, loaded on
the layout our runner uses.

Why: a build with llama.cpp's AMX kernels (GGML_NATIVE on an Intel CPU with AMX, such as Sapphire Rapids) puts the
quantized weights in its AMX buffer, and there ggml_backend_amx_mul_mat crashed the process (SIGSEGV) at the first
batch of the embedded Q4_1 file, in llama-cpp-python 0.3.36's own Llama as in our runner (docs/exactness.md, "A CPU
with AMX"). With the extra buffer types off the file runs on the plain CPU kernels, a little slower, but it runs.
"""

from __future__ import annotations

import threading

_defaults_lock = threading.Lock()


def extra_buffers_usable(llama) -> bool:
    """Whether llama.cpp's extra buffer types may be used: not in a build with its AMX kernels. Takes the llama_cpp
    module; reads its build's feature line (llama_print_system_info: "AMX_INT8 = 1" where they are built in)."""
    return b"AMX_INT8 = 1" not in llama.llama_print_system_info()


def extra_buffers_usable_here() -> bool:
    """extra_buffers_usable for the llama_cpp installed here (True where none is: nothing to say of its layout)."""
    try:
        import llama_cpp
    except ImportError:
        return True
    return extra_buffers_usable(llama_cpp)


def peer_llama(**kwargs):
    """llama_cpp.Llama(**kwargs) with the extra buffer types off where extra_buffers_usable says so: Llama has no
    parameter for them, so the defaults it reads from its bindings while it loads are changed meanwhile."""
    import llama_cpp
    from llama_cpp import llama_cpp as bindings

    if extra_buffers_usable(llama_cpp):
        return llama_cpp.Llama(**kwargs)
    defaults = bindings.llama_model_default_params

    def without_extra_buffers():
        params = defaults()
        params.use_extra_bufts = False
        return params

    with _defaults_lock:
        bindings.llama_model_default_params = without_extra_buffers
        try:
            return llama_cpp.Llama(**kwargs)
        finally:
            bindings.llama_model_default_params = defaults

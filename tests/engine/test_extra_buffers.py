"""llama.cpp's extra buffer types off where its AMX kernels are built in: there the embedded file's first batch
crashed the process (SIGSEGV in ggml_backend_amx_mul_mat) in our runner and in llama-cpp-python's own Llama alike
(engine/backends/llamacpp/extra_buffers.py). On such a machine the real-model tests are the check that it runs."""

import pytest

from specchat.engine.backends.llamacpp import extra_buffers
from specchat.engine.backends.llamacpp.extra_buffers import extra_buffers_usable, peer_llama

pytest.importorskip("llama_cpp")


class Build:
    def __init__(self, info: bytes):
        self.info = info

    def llama_print_system_info(self) -> bytes:
        return self.info


def test_a_build_with_amx_kernels_takes_no_extra_buffers():
    assert extra_buffers_usable(Build(b"CPU : SSE3 = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | OPENMP = 1 | REPACK = 1 | "))
    assert not extra_buffers_usable(Build(b"CPU : AVX512 = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | REPACK = 1 | "))


@pytest.mark.parametrize("usable", [True, False])
def test_the_peer_loads_on_the_layout_our_runner_loads(monkeypatch, usable):
    """Llama has no parameter for the extra buffers: the defaults it reads while it loads say it, and only then."""
    import llama_cpp
    from llama_cpp import llama_cpp as bindings

    seen = []

    def llama(**kwargs):
        seen.append((kwargs, bindings.llama_model_default_params().use_extra_bufts))
        return "peer"

    monkeypatch.setattr(llama_cpp, "Llama", llama)
    monkeypatch.setattr(extra_buffers, "extra_buffers_usable", lambda _llama: usable)
    assert peer_llama(model_path="m.gguf", n_threads=2) == "peer"
    assert seen == [({"model_path": "m.gguf", "n_threads": 2}, usable)]
    assert bindings.llama_model_default_params().use_extra_bufts  # llama.cpp's own default again afterwards

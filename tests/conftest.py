"""Shared fixtures. Fast tests use tiny random-initialised Llama models and tokenizers built here; tests marked
`model` use the real embedded SmolLM2-135M-Instruct, loaded once per session."""

import os
import sys
import tempfile

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before any QApplication exists
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch the network
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("SPECCHAT_MEASURE_NOW", "1")  # one-time measurements in the test's thread, not beside it
os.environ.setdefault("SPECCHAT_STATE_DISK_MIB", "0")  # per-chat states in memory only: none in the user's cache
if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one pytest worker a core (pytest-xdist): each keeps to its own core, as llama.cpp's threads
    # spin while they wait for one another and a pass whose second thread waits for the other worker's core can take
    # ten times as long. A test about threads sets them itself.
    os.environ.setdefault("SPECCHAT_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
# Hypothesis keeps caches (Unicode tables, constants) in a folder it makes in the working directory, which is the
# repository's top level: they go to the system's temporary folder instead.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY",
                      os.path.join(tempfile.gettempdir(), "specchat-tests-hypothesis"))

import pytest
from tiny_models import EXACT_PLACEMENT, build_byte_tokenizer, build_tiny_llama, perturbed_copy


def pytest_configure(config):
    # Registered here rather than in pyproject.toml, whose every change makes `make setup` reinstall.
    config.addinivalue_line("markers", "offload: llama.cpp tests that `make test-offload` runs with every layer on a "
                                       "GPU device (tests/engine/test_llama_offload.py)")


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    """Where bytecode may not be written (PYTHONDONTWRITEBYTECODE, so that no cache folder is left in the checkout),
    pytest would rewrite the asserts of every test module again at every run (seconds): during the collection, the
    rewritten modules (and what they import for the first time) are kept in the system's temporary folder instead,
    as Hypothesis's caches are, and read back from there by the next run."""
    if not sys.dont_write_bytecode:
        yield
        return
    saved = sys.pycache_prefix
    sys.dont_write_bytecode, sys.pycache_prefix = False, os.path.join(tempfile.gettempdir(), "specchat-tests-pycache")
    try:
        yield
    finally:
        sys.dont_write_bytecode, sys.pycache_prefix = True, saved


def pytest_collection_finish(session):
    """What the imports and the collection made (torch, transformers, Qt: hundreds of thousands of objects) lives
    until the run ends: frozen out of the cyclic garbage collector's way, so that each of its full collections
    during the tests walks what the tests made, not all of that again (gc.freeze)."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one thread for a module of thousands of passes of tiny models (`pytestmark =
    pytest.mark.usefixtures("one_torch_thread")`): they gain nothing from a second thread, and where another process
    shares the CPU, every operation's wait for the other core can make them several times slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tokenizer():
    return build_byte_tokenizer()


@pytest.fixture(scope="session")
def target(tokenizer):
    return build_tiny_llama(len(tokenizer), seed=0)


@pytest.fixture(scope="session")
def close_draft(target):
    return perturbed_copy(target, noise=0.3, seed=1)


@pytest.fixture(scope="session")
def unrelated_draft(tokenizer):
    return build_tiny_llama(len(tokenizer), seed=7, hidden=32, layers=1)


@pytest.fixture(scope="session")
def prompt_ids(tokenizer):
    text = "The quick brown fox jumps over the lazy dog. Speculative decoding drafts tokens."
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="session")
def model_folders(tmp_path_factory, tokenizer, target, unrelated_draft):
    """The tiny target and an unrelated tiny draft saved as Hugging Face folders: root/target, root/draft."""
    root = tmp_path_factory.mktemp("models")
    for name, model in (("target", target), ("draft", unrelated_draft)):
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    return root


@pytest.fixture(scope="session")
def embedded_pair():
    """The real embedded model on the torch path, with its shipped draft (first use in a fresh environment converts
    the GGUF file once, ~30 s). On the CPU in float32 on every machine: its tests assert replies token for token,
    and the lean forward they compare with is the CPU's."""
    from specchat.engine.loading.load import LoadOptions
    from specchat.engine.loading.pair import load_pair
    from specchat.models.sources import ModelSource, default_draft_for

    target = ModelSource.parse("embedded")
    return load_pair(target, default_draft_for(target), LoadOptions(backend="torch", **EXACT_PLACEMENT))


@pytest.fixture(scope="session")
def native_pair():
    """The real embedded model on llama.cpp's CPU kernels (its default on the CPU), with its shipped draft on the
    CPU in float32, on every machine: its tests assert what the CPU kernels promise (bit-identity across row
    counts, their verdict). A GPU build's placement is placed_native_pair's."""
    return _embedded_on_llama_cpp(**EXACT_PLACEMENT)


@pytest.fixture(scope="session")
def placed_native_pair():
    """The real embedded model on llama.cpp with its layers where the build and the settings put them (on a GPU
    where llama.cpp can offload to one, SPECCHAT_GPU_LAYERS; `make test-offload`), with its shipped draft: for the
    tests of placement, which assert only what the placement's measured verdict promises."""
    return _embedded_on_llama_cpp()


def _embedded_on_llama_cpp(**placement):
    from specchat.engine.loading.load import LoadOptions
    from specchat.engine.loading.pair import load_pair
    from specchat.models.sources import ModelSource, default_draft_for

    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (make setup installs it)")
    target = ModelSource.parse("embedded")
    return load_pair(target, default_draft_for(target), LoadOptions(backend="llama.cpp", **placement))


@pytest.fixture(autouse=True)
def fixed_step_costs(request, monkeypatch):
    """Every engine made in a test prices a step with StepCosts.fixed instead of the clock, so that adaptive K, and
    with it every count of drafted and accepted tokens, is the same on a fast, a slow and a busy machine; a torch
    pair measures no cost curve (nor keeps one in the user cache) for it. A test of the measured costs themselves
    opts out with @pytest.mark.clock."""
    if request.node.get_closest_marker("clock"):
        return
    from specchat.engine.decoding.adaptive import DRAFT_PRIOR, StepCosts
    from specchat.engine.decoding.cost_curve import FIXED_CURVE
    from specchat.engine.decoding.speculative import SpeculativeEngine
    from specchat.engine.loading.pair import ModelPair

    measured = ModelPair.cost_curve

    def fixed_curve(self, runner, packed_weights=True):
        return measured(self, runner, packed_weights) if self.target.native is not None else FIXED_CURVE

    monkeypatch.setattr(ModelPair, "cost_curve", fixed_curve)

    made = SpeculativeEngine.__init__

    def with_fixed_costs(self, *args, **kwargs):
        made(self, *args, **kwargs)
        self.step_costs = StepCosts.fixed(FIXED_CURVE, DRAFT_PRIOR if self.drafter.capabilities.uses_model else 0.0)

    monkeypatch.setattr(SpeculativeEngine, "__init__", with_fixed_costs)

"""`specchat models list` (catalog_report.print_local_models): the models that load offline, and an unfinished
Hub download set apart as one to resume, never listed as a model."""

import io

import pytest
from huggingface_hub import constants

from specchat.cli import main
from specchat.commands.catalog_report import partial_downloads, print_local_models

COMMIT = "1234567890abcdef1234567890abcdef12345678"
BLOB = "ab" * 32


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache of the test's own. scan_cache_dir (which engine/loading/load.py's list uses) reads the
    location its module copied from huggingface_hub.constants at import, the rest of specchat the constant itself:
    both are pointed at it."""
    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr("huggingface_hub.utils._cache_manager.HF_HUB_CACHE", str(cache))
    return cache


def cached(cache, repo_id: str, complete: bool):
    """A repository in the cache layout hub_download writes: the config's blob and its link in the snapshot, the
    weights' blob unfinished (.incomplete) unless `complete`, and refs/main only once everything is there."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "blobs" / ("c" * 40)).write_text('{"model_type": "llama"}')
    (snapshot / "config.json").symlink_to(repo / "blobs" / ("c" * 40))
    weights = repo / "blobs" / (BLOB if complete else BLOB + ".incomplete")
    weights.write_bytes(b"\0" * 2_500_000)
    if complete:
        (snapshot / "model.safetensors").symlink_to(weights)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(COMMIT)


def test_a_partial_download_is_not_listed_as_a_model(hf_cache, capsys):
    cached(hf_cache, "org/done", complete=True)
    cached(hf_cache, "org/half", complete=False)
    (hf_cache / "models--org--nothing" / "blobs").mkdir(parents=True)  # a try that got no byte: nothing to say
    assert partial_downloads({"org/done"}) == [("org/half", 2_500_023)]
    out = io.StringIO()
    assert print_local_models(out) == 0
    lines = out.getvalue().splitlines()
    assert any(line.startswith("embedded ") for line in lines)
    assert [line.split()[:2] for line in lines if line.startswith("org/")] == [["org/done", "hub"],
                                                                               ["org/half", "partial"]]
    half = next(line for line in lines if line.startswith("org/half"))
    assert "partial download (2.5 MB so far), resume in the Models dialog" in half
    assert "specchat models download org/half" in half
    assert main(["models", "list"]) == 0  # the command prints the same
    assert capsys.readouterr().out == out.getvalue()

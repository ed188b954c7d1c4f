"""An empty Hugging Face cache of a test's own, with huggingface_hub offline as the app runs it (its downloads go
through specchat's own code, network_for_this_thread), shared by the tests of the fake and hostile Hubs."""

from pathlib import Path

from huggingface_hub import constants


def offline_hf_cache(tmp_path: Path, monkeypatch) -> Path:
    """Makes tmp_path/hf/hub the cache, turns huggingface_hub's own network off and leaves this machine's login
    out of the requests; returns the cache folder."""
    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_TOKEN", "")
    return cache

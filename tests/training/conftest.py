"""Fixtures of the training tests."""

import functools

import pytest
from tiny_models import EXACT_PLACEMENT


@pytest.fixture(autouse=True)
def pipelines_load_their_target_on_the_cpu_in_float32(monkeypatch):
    """The pipelines load their target where the loader chooses (a GPU in bf16 or fp16, where there is one), and
    take no device of their own; these tests assert drafts that keep replies token for token and weights that come
    out the same when a run is repeated, which float32 on the CPU keeps. So here the pipelines' loads are pinned
    there (LoadOptions(**EXACT_PLACEMENT) for every LoadOptions training/pipeline.py makes)."""
    from specchat.training import pipeline

    monkeypatch.setattr(pipeline, "LoadOptions", functools.partial(pipeline.LoadOptions, **EXACT_PLACEMENT))

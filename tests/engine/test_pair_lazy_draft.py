"""A draft left for later (load_pair's draft_later): the pair offers the model drafters at once, and the first engine
that drafts with the model checks and loads it, once; a draft that cannot draft says why wherever it is asked for."""

import pytest

import specchat.engine.loading.pair as pair_module
from specchat.core.errors import IncompatibleDraftError
from specchat.engine.loading.load import LoadOptions
from specchat.engine.loading.pair import load_pair
from specchat.models.sources import ModelSource


@pytest.fixture
def incompatible_draft(tmp_path, unrelated_draft):
    """A tiny draft whose tokenizer ends its text with another token than the target's: it cannot draft."""
    from tiny_models import build_byte_tokenizer

    other = build_byte_tokenizer()
    other.eos_token = "<|endoftext|>"
    other.save_pretrained(tmp_path)
    unrelated_draft.save_pretrained(tmp_path)
    return ModelSource.parse(str(tmp_path))


def counted(monkeypatch, name):
    """pair_module's function `name`, counting its calls."""
    calls, function = [], getattr(pair_module, name)

    def call(*args, **kwargs):
        calls.append(args)
        return function(*args, **kwargs)
    monkeypatch.setattr(pair_module, name, call)
    return calls


def test_a_draft_left_for_later_loads_with_the_first_model_drafter_once(model_folders, monkeypatch):
    draft = ModelSource.parse(str(model_folders / "draft"))
    checks = counted(monkeypatch, "check_sources")
    pair = load_pair(ModelSource.parse(str(model_folders / "target")), draft, LoadOptions(device="cpu"),
                     draft_later=True)
    assert pair.draft is None and pair.has_draft and not checks  # neither checked nor loaded yet
    assert pair.draft_label == draft.describe() == pair.draft_name("model")  # named as it will be recorded
    pair.check_drafter("model")  # offered
    assert pair.engine("pld").drafter.name == "pld" and pair.draft is None  # a model-free drafter leaves it

    assert pair.engine("model").drafter.name == "model"
    loaded = pair.draft
    assert loaded is not None and loaded.name == draft.describe() and len(checks) == 1
    assert pair.engine("hybrid").drafter.name == "hybrid" and pair.draft is loaded and len(checks) == 1


def test_a_draft_loaded_with_the_target_is_checked_first(model_folders, incompatible_draft, monkeypatch):
    loads = counted(monkeypatch, "load_model")
    with pytest.raises(IncompatibleDraftError, match="cannot draft"):
        load_pair(ModelSource.parse(str(model_folders / "target")), incompatible_draft)
    assert not loads  # refused before any weights load
    pair = load_pair(ModelSource.parse(str(model_folders / "target")), ModelSource.parse(str(model_folders / "draft")),
                     LoadOptions(device="cpu"))
    assert pair.draft is not None and len(loads) == 2


def test_an_incompatible_draft_left_for_later_says_why_each_time_it_is_asked_for(model_folders, incompatible_draft,
                                                                                 monkeypatch):
    pair = load_pair(ModelSource.parse(str(model_folders / "target")), incompatible_draft, LoadOptions(device="cpu"),
                     draft_later=True)
    checks = counted(monkeypatch, "check_sources")
    pair.check_drafter("model")  # not known yet: nothing is checked on the asking thread
    with pytest.raises(IncompatibleDraftError, match="eos token differs"):
        pair.engine("model")
    assert pair.draft is None and len(checks) == 1
    with pytest.raises(IncompatibleDraftError, match="cannot draft"):
        pair.check_drafter("hybrid")  # known now: said at once, before any engine
    with pytest.raises(IncompatibleDraftError, match="cannot draft"):
        pair.engine("model", checked=True)
    assert len(checks) == 1  # checked once
    assert pair.engine("pld").drafter.name == "pld"  # the model-free drafters run as ever

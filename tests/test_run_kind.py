"""RunKind: every run name reads back unchanged, means what the engine, the bench and the UI take it to mean, and
the names kept here without torch agree with the engine's own tables."""


import pytest

from specchat.core import run_kind, vocabulary
from specchat.core.run_kind import RunKind

STORED_NAMES = ("none", "pld", "history", "model", "hybrid", "eagle", "eagle-hybrid", "universal", "default",
                "hf-none", "hf-pld", "hf-model", "llama-cpp", "llama-cpp-pld", "llama-server", "llama-server-draft",
                "llama-server-ngram", "remote", "remote pld", "remote eagle-hybrid", "remote ", "some-old-drafter",
                "", "hf-", "llama-cpp-", "llama-cppx", "remoteX")


@pytest.mark.parametrize("name", STORED_NAMES)
def test_every_name_round_trips(name):
    kind = RunKind.parse(name)
    assert str(kind) == kind.label == name
    assert RunKind.parse(str(kind)) == kind


@pytest.mark.parametrize("name, engine, drafter", [
    ("none", run_kind.OURS, "none"), ("history", run_kind.OURS, "history"), ("hf-pld", run_kind.TRANSFORMERS, "pld"),
    ("llama-cpp", run_kind.LLAMA_CPP, None), ("llama-cpp-pld", run_kind.LLAMA_CPP, "pld"),
    ("llama-server", run_kind.LLAMA_SERVER, None), ("llama-server-ngram", run_kind.LLAMA_SERVER, "ngram"),
    ("remote", run_kind.REMOTE_ENGINE, None), ("remote pld", run_kind.REMOTE_ENGINE, "pld"),
    ("llama-cppx", run_kind.OURS, "llama-cppx"), ("remoteX", run_kind.OURS, "remoteX")])
def test_parse_splits_engine_and_drafter(name, engine, drafter):
    assert RunKind.parse(name) == RunKind(engine, drafter)


def test_the_families_are_told_apart():
    families = {name: (k.is_ours, k.is_plain, k.is_reference, k.is_peer, k.is_remote)
                for name, k in ((n, RunKind.parse(n)) for n in ("none", "pld", "hf-none", "llama-cpp",
                                                                 "llama-server-draft", "remote eagle"))}
    assert families == {"none": (True, True, False, False, False), "pld": (True, False, False, False, False),
                        "hf-none": (False, False, True, False, False), "llama-cpp": (False, False, False, True, False),
                        "llama-server-draft": (False, False, False, True, False),
                        "remote eagle": (False, False, False, False, True)}
    assert RunKind.parse("llama-cpp-pld").is_llama_cpp and RunKind.parse("llama-server").is_llama_server


def test_a_kind_that_would_not_read_back_is_refused():
    for engine, drafter in ((run_kind.OURS, "hf-pld"), (run_kind.OURS, "remote pld"), (run_kind.OURS, "remote"),
                            (run_kind.OURS, None), (run_kind.TRANSFORMERS, None), ("vllm", None)):
        with pytest.raises(ValueError):
            RunKind(engine, drafter)


def test_ours_with_history_is_the_history_drafter_and_remote_names_its_drafter():
    assert str(RunKind.ours("pld", history=True)) == "history"
    assert str(RunKind.ours("pld")) == "pld"
    assert str(RunKind.ours("hybrid", history=True)) == "hybrid"  # the hybrids keep their names
    assert str(RunKind.remote("eagle")) == "remote eagle"
    assert str(RunKind.remote("")) == str(RunKind.remote()) == "remote"


def test_a_remote_runs_device_names_its_server():
    assert run_kind.remote_device() == "remote"
    assert run_kind.remote_device("vllm") == "remote (vllm)"


def test_needs_and_history():
    assert [n for n in STORED_NAMES if RunKind.parse(n).needs_draft_model] == [
        "model", "hybrid", "universal", "hf-model", "llama-server-draft"]
    assert [n for n in STORED_NAMES if RunKind.parse(n).reads_history] == ["pld", "history", "hybrid", "eagle-hybrid"]
    assert [n for n in STORED_NAMES if RunKind.parse(n).needs_history] == ["history"]
    assert not RunKind.parse("remote pld").reads_history and not RunKind.parse("hf-pld").reads_history


def test_colour_keys_are_our_drafters_or_the_other_engine():
    assert [RunKind.parse(n).colour_key for n in ("pld", "hf-pld", "llama-cpp-pld", "llama-server", "remote pld")] \
        == ["pld", "transformers", "llama-cpp", "llama-server", "remote"]


def test_every_drafter_kind_has_a_builder_and_reads_as_ours():
    from specchat.core import vocabulary
    from specchat.engine.drafting import registry

    assert set(registry.BUILDERS) == set(vocabulary.DRAFTER_KEYS)
    assert [d.key for d in vocabulary.DRAFTERS if d.needs_history] == [vocabulary.HISTORY]
    for info in vocabulary.DRAFTERS:
        kind = RunKind.parse(info.key)
        assert kind.is_ours and (kind.needs_draft_model, kind.reads_history) == (info.needs_model, info.reads_history)


def test_the_peer_and_shape_names_agree_with_their_modules():
    from specchat.bench import peer_server, peers
    from specchat.commands import measure_costs as costs

    assert run_kind.LLAMA_CPP_MODES == peers.PEER_MODES
    assert run_kind.LLAMA_SERVER_MODES == peer_server.SERVER_MODES
    assert set(run_kind.SHAPE_NAMES) == set(costs.SHAPES)
    assert all(RunKind.parse(m).is_peer for m in (*peers.PEER_MODES, *peer_server.SERVER_MODES))
    assert all(RunKind.parse(m).is_reference for m in run_kind.HF_MODES)


def test_the_origin_names():
    from specchat.core.vocabulary import ORIGIN_NAMES, Origin, origin_name

    assert set(ORIGIN_NAMES) == set(Origin)
    assert [origin_name(o) for o in Origin] == ["target", "draft", "inferred"]
    assert origin_name(99) == "target"


def test_the_api_and_the_transcript_name_origins_alike():
    from specchat.chats.reply_spans import ReplySpans
    from specchat.core.vocabulary import Origin
    from specchat.engine.decoding.events import GenerationStats, StepEvent
    from specchat.server.protocol import speculative_figures

    origins = (Origin.TARGET, Origin.DRAFT, Origin.INFERRED_DRAFT)
    event = StepEvent(token_ids=(5, 6, 7), origins=origins, spans=((0, 1), (1, 2), (2, 3)), text_delta="abc",
                      text_offset=0, rejected_ids=(), rejected_text="", stats=GenerationStats(), wall_s=0.0)
    spans = ReplySpans()
    spans.add_tokens(event.spans, event.origins)
    names = [vocabulary.origin_name(o) for o in origins]
    assert speculative_figures(event)["origins"] == names == [origin for _, _, origin in spans.spans]

"""The model commands read their command line once, at the edge (commands/loading.py run_options): each source
text is parsed once, and what loads and decodes takes the typed RunOptions, never the parsed args."""

from collections import Counter

import pytest

from specchat.cli import build_parser, main
from specchat.models.sources import ModelSource


@pytest.fixture
def parses(monkeypatch):
    """Counts ModelSource.parse calls by the text parsed."""
    counts = Counter()
    original = ModelSource.parse.__func__

    def counting(cls, spec):
        counts[spec] += 1
        return original(cls, spec)

    monkeypatch.setattr(ModelSource, "parse", classmethod(counting))
    return counts


def test_generate_parses_each_source_once(capsys, parses, model_folders):
    target, draft = str(model_folders / "target"), str(model_folders / "draft")
    code = main(["generate", "--prompt", "hello", "--target", target, "--draft", draft, "--max-new-tokens", "4",
                 "--json"])
    assert code == 0, capsys.readouterr().err
    assert parses == {target: 1, draft: 1}


def test_chat_options_resolve_the_default_draft_once(parses):
    from specchat.commands.loading import RunOptions, run_options

    options = run_options(build_parser().parse_args(["chat", "--backend", "torch", "--top-k", "3", "--k", "7"]))
    assert isinstance(options, RunOptions)
    assert parses == {"embedded": 1, "embedded-draft": 1}
    assert (options.target.kind, options.draft.kind, options.head) == ("embedded", "shipped", None)
    assert options.load.backend == "torch" and options.generation.k == 7
    assert options.generation.sampling.top_k == 3 and options.generation.stop_strings == ()
    with pytest.raises(AttributeError):
        options.drafter = "none"  # frozen: read once, changed nowhere below


def test_bench_options_have_the_default_drafter_and_no_generation_config(parses, model_folders):
    from specchat.commands.loading import run_options

    target = str(model_folders / "target")
    options = run_options(build_parser().parse_args(["bench", "--target", target]), decoding=False)
    assert parses == {target: 1}
    assert (options.draft, options.drafter, options.generation) == (None, "pld", None)


def test_generate_stop_strings_reach_the_generation_config(model_folders):
    from specchat.commands.loading import run_options

    args = build_parser().parse_args(["generate", "--prompt", "hi", "--target", str(model_folders / "target"),
                                      "--stop", "END", "--stop", "\n\n", "--drafter", "none"])
    options = run_options(args)
    assert options.generation.stop_strings == ("END", "\n\n") and options.drafter == "none"

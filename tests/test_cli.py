"""The command line: generate, bench, models, and one-line errors (exit code 2) for bad input."""

import argparse
import json

import pytest

from specchat.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, fragment):
    """Exit code 2, no traceback, and exactly one error line (a progress note such as "Preparing…" may precede it)."""
    assert code == 2
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("specchat")]
    assert len(errors) == 1 and fragment in errors[0], err


def test_generate_json_record(capsys, model_folders):
    code, out, _ = run(capsys, "generate", "--prompt", "The quick brown fox", "--target", str(model_folders / "target"),
                       "--drafter", "pld", "--max-new-tokens", "12", "--seed", "1", "--json")
    assert code == 0
    record = json.loads(out)
    assert len(record["token_ids"]) == len(record["origins"]) == 12
    assert set(record["origins"]) <= {"draft", "target"}
    assert record["stats"]["new_tokens"] == 12 and "predicted_speedup" in record["stats"]


def test_generate_reads_an_attached_document_into_its_prompt(capsys, model_folders, tmp_path):
    memo = tmp_path / "memo.txt"
    memo.write_text("The quarterly report is due on Friday.\n\nSend your figures to Maria by Wednesday.\n")
    code, out, err = run(capsys, "generate", "--prompt", "When are the figures due?", "--attach", str(memo),
                         "--target", str(model_folders / "target"), "--drafter", "pld", "--max-new-tokens", "6",
                         "--seed", "1", "--json")
    assert code == 0 and "Reading memo.txt" in err
    record = json.loads(out)
    assert record["documents"] == ["memo.txt"] and record["sources"] == ["memo.txt"]
    assert record["stats"]["prompt_tokens"] > 40  # the document was read with the question


def test_generate_refuses_a_bad_attachment_in_one_line_before_loading(capsys, tmp_path):
    binary = tmp_path / "data.txt"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    code, _, err = run(capsys, "generate", "--prompt", "hi", "--attach", str(binary))
    assert_one_line_error(code, err, "data.txt holds binary data")


def test_generate_streams_plain_text_when_not_a_terminal(capsys, model_folders):
    code, out, err = run(capsys, "generate", "--prompt", "hello", "--target", str(model_folders / "target"),
                         "--draft", str(model_folders / "draft"), "--max-new-tokens", "8")
    assert code == 0 and "\x1b[" not in out
    assert "drafter hybrid" in err and "8 tokens" in err  # a given draft model means the hybrid drafter


@pytest.mark.parametrize("argv, fragment", [
    (["generate", "--prompt", "  "], "the prompt is empty"),
    (["generate", "--prompt", "hi", "--target", "/no/such/model"], "no model at /no/such/model"),
    (["generate", "--prompt", "hi", "--target", "someone/not-downloaded"], "not downloaded"),
    (["generate", "--prompt", "hi", "--target", "{target}", "--drafter", "model"], "needs a draft model"),
    (["bench", "--modes", "none,turbo"], "unknown mode turbo"),
    (["generate", "--prompt", "hi", "--target", "{target}", "--drafter", "eagle"], "no draft head is trained"),
    (["generate", "--prompt", "hi", "--target", "{target}", "--drafter", "eagle", "--head", "/no/such/head"],
     "cannot read the draft head"),
])
def test_bad_input_gives_one_line_and_exit_2(capsys, model_folders, argv, fragment):
    code, _, err = run(capsys, *[a.format(target=model_folders / "target") for a in argv])
    assert_one_line_error(code, err, fragment)


def test_k_below_one_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--prompt", "hi", "--k", "0"])
    assert exit_info.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err


def test_corrupt_model_file(capsys, tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf file at all")
    code, _, err = run(capsys, "generate", "--prompt", "hi", "--target", str(broken))
    assert_one_line_error(code, err, "could not load")


def test_prompt_longer_than_the_context_window(capsys, model_folders):
    code, _, err = run(capsys, "generate", "--prompt", "fox " * 2000, "--target", str(model_folders / "target"))
    assert_one_line_error(code, err, "context window")


def test_incompatible_pair(capsys, model_folders, tmp_path, unrelated_draft):
    from tiny_models import build_byte_tokenizer

    other = build_byte_tokenizer()
    other.eos_token = "<|endoftext|>"  # the same ids, another end of text
    other.save_pretrained(tmp_path)
    unrelated_draft.save_pretrained(tmp_path)
    code, out, _ = run(capsys, "models", "check", str(model_folders / "target"), str(tmp_path))
    assert code == 2 and out.startswith("incompatible: eos token differs")
    code, _, err = run(capsys, "generate", "--prompt", "hi", "--target", str(model_folders / "target"),
                       "--draft", str(tmp_path))
    assert_one_line_error(code, err, "cannot draft for")


def test_a_draft_with_another_tokenizer_drafts_through_text(capsys, model_folders, tmp_path, unrelated_draft):
    from tiny_models import build_byte_tokenizer

    build_byte_tokenizer(vocab_size=300).save_pretrained(tmp_path)
    unrelated_draft.save_pretrained(tmp_path)
    code, out, _ = run(capsys, "models", "check", str(model_folders / "target"), str(tmp_path))
    assert code == 0 and out.startswith("compatible through text (universal drafting): the tokenizers differ")
    code, _, err = run(capsys, "generate", "--prompt", "hi", "--target", str(model_folders / "target"),
                       "--draft", str(tmp_path), "--drafter", "universal", "--max-new-tokens", "8")
    assert code == 0 and "8 tokens" in err


def test_models_check_compatible(capsys, model_folders):
    code, out, _ = run(capsys, "models", "check", str(model_folders / "target"), str(model_folders / "draft"))
    assert code == 0 and out.strip() == "compatible"


def test_models_list_shows_the_embedded_model(capsys):
    code, out, _ = run(capsys, "models", "list")
    assert code == 0 and "SmolLM2-135M-Instruct" in out


def test_download_when_offline_says_so(capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: no network
    monkeypatch.setattr(constants, "HF_ENDPOINT", "http://127.0.0.1:9", raising=False)
    code, _, err = run(capsys, "models", "download", "HuggingFaceTB/SmolLM2-360M-Instruct")
    assert_one_line_error(code, err, "could not reach the Hugging Face Hub")
    assert "offline" in err


def test_a_download_reaches_the_hub_although_the_app_is_offline_for_everything_else(monkeypatch):
    """The app (GUI included) runs with HF_HUB_OFFLINE=1, which huggingface_hub reads at import: the download the
    user asked for must lift it, and only for itself."""
    from huggingface_hub import constants

    from specchat.models.hub import snapshots
    from specchat.models.hub.download import download_from_hub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    seen = []

    def fake_download(repo_id, on_progress, cancel):  # the downloader's own thread sees the network open
        seen.append((repo_id, bool(constants.HF_HUB_OFFLINE)))
        return "/cache/snapshot"

    monkeypatch.setattr(snapshots, "download_snapshot", fake_download)
    assert download_from_hub("HuggingFaceTB/SmolLM2-360M-Instruct", on_progress=lambda progress: None) \
        == "/cache/snapshot"
    assert seen == [("HuggingFaceTB/SmolLM2-360M-Instruct", False)] and constants.HF_HUB_OFFLINE is True


def test_download_rejects_a_malformed_id(capsys):
    code, _, err = run(capsys, "models", "download", "not a repo id")
    assert_one_line_error(code, err, "not a Hugging Face Hub id")


def test_the_cli_offers_the_drafter_kinds():
    """The CLI offers core/vocabulary.py's drafter kinds, so that `specchat --help` does not import torch."""
    from specchat.commands.options import decoding_options
    from specchat.core.vocabulary import DRAFTER_KINDS

    parser = argparse.ArgumentParser()
    decoding_options(parser)
    drafter = next(a for a in parser._actions if a.dest == "drafter")
    assert tuple(drafter.choices) == DRAFTER_KINDS


def _seeded_database(path):
    from specchat.storage import Store, open_database

    store = Store(open_database(path))
    session = store.start_app_session("test")
    base = dict(target="embedded", k=4, adaptive=True, temperature=0.0, top_p=1.0, top_k=0, seed=0, device="cpu",
                app_session_id=session, new_tokens=50, target_passes=25, wall_s=2.5)
    store.record_run({**base, "drafter": "none", "speedup": None})
    store.record_run({**base, "drafter": "pld", "draft_proposed": 40, "draft_accepted": 30, "speedup": 1.5,
                      "speedup_basis": "measured", "source": "race"})
    store.close()


def test_stats_prints_per_session_and_per_pair_tables(capsys, tmp_path):
    _seeded_database(tmp_path / "chats.db")
    code, out, _ = run(capsys, "stats", "--db", str(tmp_path / "chats.db"))
    assert code == 0
    assert "2 runs (1 chat, 1 race)" in out and "Per app session" in out and "Per model pair and drafter" in out
    pld = next(line for line in out.splitlines() if "embedded · pld" in line)
    assert pld.split()[3:8] == ["1", "50", "20.0", "1.50x", "0.75"]


def test_stats_json_parses_back(capsys, tmp_path):
    _seeded_database(tmp_path / "chats.db")
    code, out, _ = run(capsys, "stats", "--json", "--db", str(tmp_path / "chats.db"))
    data = json.loads(out)
    assert code == 0 and data["overall"]["runs"] == 2 and data["runs_by_source"] == {"chat": 1, "race": 1}
    [session] = data["app_session"]
    assert session["runs"] == 2 and session["tokens_per_s"] == 20.0
    pairs = {g["label"]: g for g in data["pair"]}
    assert pairs["embedded · pld"]["alpha"] == 0.75 and pairs["embedded · none"]["mean_speedup"] is None


def test_stats_on_a_missing_database_is_a_one_line_error(capsys, tmp_path):
    code, _, err = run(capsys, "stats", "--db", str(tmp_path / "nowhere.db"))
    assert_one_line_error(code, err, "does not exist")

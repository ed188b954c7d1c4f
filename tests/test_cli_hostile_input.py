"""Hostile input on the command line and the terminal chat: each gets one clear line before any model loads, the
chat session goes on, and nothing is written that was not asked for (bytes that are not UTF-8, numbers past every
bound, names that rewrite the terminal, a report path that cannot be written)."""

import io
import json
import os

import pytest
import torch

from specchat.chats.context_plan import PromptPlan, Source
from specchat.cli import main
from specchat.commands.attachments import sources_line
from specchat.commands.bench import check_writable, write_report
from specchat.commands.terminal import TerminalChat
from specchat.core.errors import SpecchatError, StorageError
from specchat.core.text import not_utf8, one_line, visible_name
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.engine.loading.load import LoadedModel
from specchat.engine.loading.pair import ModelPair
from specchat.models.sources import ModelSource

@pytest.fixture
def store(tmp_path):
    from specchat.storage import Store, open_database

    store = Store(open_database(tmp_path / "specchat.db"))
    yield store
    store.close()


NOT_UTF8 = b"hi \xff".decode("utf-8", "surrogateescape")  # what Python makes of argv's byte 0xFF


def usage_error(capsys, *argv) -> str:
    """The one line argparse prints for `argv` (exit status 2, before anything loads)."""
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("option, value, says", [
    ("--temperature", "nan", "'nan' is not a finite number"),
    ("--temperature", "inf", "'inf' is not a finite number"),
    ("--temperature", "-0.5", "must be 0 (greedy) or from 0.001 to 2"),
    ("--temperature", "2.5", "must be 0 (greedy) or from 0.001 to 2"),
    ("--temperature", "1e-9", "must be 0 (greedy) or from 0.001 to 2"),
    ("--seed", "99999999999999999999999", "must be at most 9223372036854775807 (got a 23-digit number)"),
    ("--seed", "9" * 5000, "(got a 5000-digit number)"),
    ("--seed", "-9223372036854775809", "must be at least -9223372036854775808"),
    ("--seed", "1.5", "'1.5' is not a whole number"),
    ("--top-k", "-1", "must be at least 0 (got -1)"),
    ("--threads", "10000", "must be at most"),
    ("--max-new-tokens", "٣", "is not a whole number"),  # an Arabic-Indic digit: int() would take it
    ("--dtype", "int3", "invalid choice: 'int3'"),
])
def test_a_value_out_of_bounds_is_refused_before_the_model_loads(capsys, option, value, says):
    line = usage_error(capsys, "generate", "--prompt", "hi", option, value)
    assert f"argument {option}:" in line and says in line


def test_threads_are_capped_at_this_machines_cores(capsys):
    cores = len(os.sched_getaffinity(0))
    assert f"must be at most {cores} (got {cores + 1})" in usage_error(capsys, "chat", "--threads", str(cores + 1))


def test_the_edges_of_each_bound_are_taken():
    from specchat.cli import build_parser

    args = build_parser().parse_args(["generate", "--prompt", "hi", "--seed", str(-2**63), "--temperature", "2",
                                      "--top-k", "0", "--threads", "1", "--dtype", "bf16"])
    assert (args.seed, args.temperature, args.top_k, args.threads, args.dtype) == (-2**63, 2.0, 0, 1, "bf16")
    assert build_parser().parse_args(["generate", "--prompt", "hi", "--seed", str(2**63 - 1)]).seed == 2**63 - 1


@pytest.mark.parametrize("argv, says", [
    (["generate", "--prompt", NOT_UTF8], "the prompt is not UTF-8 text (byte 0xFF at character 4)"),
    (["generate", "--prompt", "hi", "--system", "\udcfe"], "the system prompt is not UTF-8 text (byte 0xFE"),
    (["chat", "--system", "x\udc80"], "the system prompt is not UTF-8 text (byte 0x80 at character 2)"),
])
def test_bytes_that_are_not_utf8_get_one_line(capsys, argv, says):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "TypeError" not in err and says in err


def test_the_terminal_chat_goes_on_after_a_line_that_is_not_utf8(tokenizer, target):
    loaded = LoadedModel(ModelSource("folder", "tiny"), target, tokenizer, torch.device("cpu"), torch.float32)
    typed = io.StringIO(f"{NOT_UTF8}\n/system \udcff\n/attach\n/attach   \nhello\n/quit\n")
    out = io.StringIO()
    chat = TerminalChat(ModelPair(loaded, loaded), "pld", GenerationConfig(max_new_tokens=4), inp=typed, out=out)
    chat.loop()
    text = out.getvalue()
    assert text.count("error: that line is not UTF-8 text") == 2 and "(byte 0xFF at character 4)" in text
    assert chat.system is None  # the bad /system line set nothing
    assert text.count("usage: /attach FILE") == 2 and "(unnamed)" not in text
    assert text.count("assistant> ") == 1 and [m.content for m in chat.history][0] == "hello"


def test_not_utf8_names_the_byte_or_the_code_point():
    assert not_utf8("fine ünïcode", "the prompt") is None
    assert "(U+D800 at character 1)" in not_utf8("\ud800", "the prompt")


def test_names_cannot_rewrite_the_terminal():
    assert visible_name("report\n.pdf") == "report\\n.pdf"
    assert visible_name("\x1b]0;owned\x07a.txt") == "\\x1b]0;owned\\x07a.txt"
    assert visible_name("invoice\u202efdp.exe") == "invoice\\u202efdp.exe"
    assert visible_name("bad\udcff") == "bad\\udcff"
    assert visible_name("Übersicht – été.md") == "Übersicht – été.md"


def test_the_sources_line_counts_the_passages_of_one_file():
    plan = PromptPlan(messages=(), left_out=0, meter=None, sources=(
        Source(1, "words.txt", None, 0), Source(1, "words.txt", None, 1), Source(2, "r.pdf", 3, 0),
        Source(1, "words.txt", None, 2), Source(3, "x\u202e.md", None, 0)))
    assert sources_line(plan) == "Sources: words.txt (3 passages) · r.pdf, p. 3 · x\\u202e.md"


def test_a_name_from_argv_is_shown_escaped_while_it_is_read(capsys, tmp_path):
    from specchat.commands.attachments import read_attachments

    named = tmp_path / "notes\x1b[2J.txt"
    named.write_text("The meeting moved to Thursday.")
    (document,) = read_attachments([named])
    assert "Reading notes\\x1b[2J.txt…" in capsys.readouterr().err and document.document.text.startswith("The")


def test_a_report_path_is_checked_before_the_run(tmp_path):
    with pytest.raises(SpecchatError, match="is a folder: give a file name"):
        check_writable(tmp_path)
    with pytest.raises(SpecchatError, match="does not exist"):
        check_writable(tmp_path / "missing" / "report.json")
    check_writable(tmp_path / "report.json")
    assert list(tmp_path.iterdir()) == []  # the check creates nothing


def test_a_report_that_cannot_be_written_after_the_run_is_kept_elsewhere(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    (tmp_path / "gone").mkdir()
    target = tmp_path / "gone" / "report.json"
    (tmp_path / "gone").rmdir()  # the folder went away during the run
    kept = write_report(target, '{"summary": 1}')
    assert kept.parent == tmp_path and json.loads(kept.read_text()) == {"summary": 1}
    assert f"the report is in {kept}" in capsys.readouterr().err


def test_costs_context_past_the_models_window_is_refused(capsys):
    from specchat.commands.measure_costs import _check_room

    class Runner:
        context_window = 8192

    with pytest.raises(SpecchatError, match=r"ask for 100,000,010 positions, but tiny reads at most 8,192"):
        _check_room(Runner(), "tiny", 100_000_010)
    _check_room(Runner(), "tiny", 8192)


def test_stats_does_not_write_into_an_empty_file(capsys, tmp_path):
    empty = tmp_path / "stats.db"
    empty.touch()
    assert main(["stats", "--db", str(empty)]) == 2
    assert "is empty: not a specchat database" in capsys.readouterr().err and empty.stat().st_size == 0


def test_titles_lose_control_characters_and_bidi_marks(store):
    from specchat.storage.exchange import FORMAT

    assert one_line(" a\x00b\x1b[2J\u202etxt.exe\n\tc ") == "a b [2J txt.exe c"
    data = {"format": FORMAT, "version": 1, "title": "Plan\x00\x1b[31m\u202eevil", "messages": []}
    imported = store.import_json(json.dumps(data).encode())
    assert store.conversation(imported.id).title == "Plan [31m evil"
    assert store.rename_conversation(imported.id, "New\r\nname\x7f").title == "New name"
    with pytest.raises(StorageError, match="must not be empty"):
        store.rename_conversation(imported.id, "\x00\u202e")


def test_a_number_of_thousands_of_digits_gets_our_message(store):
    with pytest.raises(StorageError) as error:
        store.import_json(('{"format": "specchat-conversation", "version": ' + "9" * 5000 + "}").encode())
    assert "a 5,000-digit number" in str(error.value) and "set_int_max_str_digits" not in str(error.value)

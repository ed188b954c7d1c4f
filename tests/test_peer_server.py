"""llama.cpp's llama-server as a peer in `specchat bench`: its flags, the token ids it is sent and sends back, its
process stopped at the end, and the messages when it is missing, exits or never gets ready (a fake server stands in
for the binary: tests/fake_llama_server.py); then the real binary, if `make peers` built it, on the embedded model."""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from specchat.bench import peer_server
from specchat.bench.peer_server import LlamaServerPeer, server_flags
from specchat.core.errors import SpecchatError
from specchat.engine.backends.llamacpp.extra_buffers import extra_buffers_usable_here

FAKE = Path(__file__).with_name("fake_llama_server.py")


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """SPECCHAT_LLAMA_SERVER names a script that runs the fake server; returns (gguf, log reader, behaviour setter)."""
    binary = tmp_path / "llama-server"
    binary.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{FAKE}' \"$@\"\n")
    binary.chmod(0o755)
    log = tmp_path / "fake.jsonl"
    monkeypatch.setenv("SPECCHAT_LLAMA_SERVER", str(binary))
    monkeypatch.setenv("FAKE_LLAMA_LOG", str(log))
    gguf = tmp_path / "target.gguf"
    gguf.write_bytes(b"GGUF")

    def entries():
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    return gguf, entries, lambda behaviour: monkeypatch.setenv("FAKE_LLAMA_BEHAVIOUR", behaviour)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead
        return stat.read().split()[2] != "Z"


def test_the_flags_of_each_mode(tmp_path):
    gguf, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    plain = server_flags("llama-server", gguf, 2, 4096, 5)
    assert plain == ["-m", str(gguf), "-t", "2", "-tb", "2", "-c", "4096", "-np", "1", "-fa", "on", "-ctk", "bf16",
                     "-ctv", "f16", "--no-webui"]
    drafted = server_flags("llama-server-draft", gguf, 2, 4096, 5, draft)
    assert drafted[len(plain):len(plain) + 6] == ["-md", str(draft), "--spec-type", "draft-simple",
                                                  "--spec-draft-n-max", "5"]
    ngram = server_flags("llama-server-ngram", gguf, 2, 4096, 4)
    assert ngram[len(plain):] == ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                                  "--spec-ngram-simple-size-m", "4"]
    assert server_flags("llama-server", gguf, 2, 4096, 5, repack=False) == plain + ["--no-repack"]
    with pytest.raises(SpecchatError, match="--peer-draft"):
        server_flags("llama-server-draft", gguf, 2, 4096, 5)
    with pytest.raises(SpecchatError, match="unknown llama-server mode"):
        server_flags("llama-server-lookahead", gguf, 2, 4096, 5)


def test_a_missing_binary_names_make_peers(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_LLAMA_SERVER", str(tmp_path / "nowhere"))
    with pytest.raises(SpecchatError, match="SPECCHAT_LLAMA_SERVER=.*make peers"):
        peer_server.server_binary()
    monkeypatch.delenv("SPECCHAT_LLAMA_SERVER")
    monkeypatch.setattr(peer_server, "BUILT_BINARY", tmp_path / "build" / "llama-server")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SpecchatError, match="make peers"):
        peer_server.server_binary()
    from specchat import bench

    with pytest.raises(SpecchatError, match="make peers"):  # before any model is loaded
        bench.parse_modes("none,llama-server-ngram", has_draft=False)


def test_token_ids_go_out_and_come_back_and_the_server_stops_at_close(fake):
    gguf, entries, _ = fake
    with LlamaServerPeer("llama-server-ngram", gguf, end_tokens={7}, threads=2, k=4) as peer:
        reply = peer.generate([5, 6, 7, 8], max_new_tokens=6)
        assert reply.token_ids == [100, 101, 102, 103, 104, 105]
        assert (reply.draft_proposed, reply.draft_accepted) == (10, 7) and reply.wall_s > 0
        started = entries()[0]
        assert started["argv"][:4] == ["--host", "127.0.0.1", "--port", str(peer.port)]
        assert started["argv"][4:] == server_flags("llama-server-ngram", gguf, 2, peer_server.CONTEXT, 4, None,
                                                   extra_buffers_usable_here())  # the layout our runner loads
        body = entries()[1]["body"]
        assert body["prompt"] == [5, 6, 7, 8] and body["n_predict"] == 6 and body["return_tokens"] is True
        assert body["temperature"] == 0.0 and body["top_k"] == 1 and body["cache_prompt"] is True
        pid = started["pid"]
        assert alive(pid)
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


def test_a_reply_ends_at_the_targets_end_token_and_plain_has_no_draft_counters(fake, monkeypatch):
    gguf, entries, _ = fake
    monkeypatch.setenv("FAKE_LLAMA_END", "2")
    with LlamaServerPeer("llama-server", gguf, end_tokens={2}, threads=1, k=5) as peer:
        reply = peer.generate([1, 2, 3], max_new_tokens=8)
    assert reply.token_ids == [100, 101, 102, 2]
    assert reply.draft_proposed is None and reply.draft_accepted is None


def test_a_prompt_longer_than_the_context_restarts_the_server_larger(fake):
    gguf, entries, _ = fake
    with LlamaServerPeer("llama-server", gguf, end_tokens=set(), threads=1, k=5) as peer:
        peer.generate([1] * 10, max_new_tokens=4)
        peer.generate([1] * (peer_server.CONTEXT + 100), max_new_tokens=4)
    starts = [e["argv"] for e in entries() if "argv" in e]
    assert [a[a.index("-c") + 1] for a in starts] == [str(peer_server.CONTEXT), str(peer_server.CONTEXT + 1024)]
    assert not alive(entries()[0]["pid"])


@pytest.mark.parametrize("behaviour, startup_s, message", [
    ("exit", 2, "exited with code 3 before it was ready:\n.*failed to load model"),
    ("unhealthy", 1, "was not ready within 1 s")])  # waits out the whole start-up time: a short one
def test_a_server_that_exits_or_never_gets_ready_fails_in_bounded_time(fake, behaviour, startup_s, message):
    gguf, entries, set_behaviour = fake
    set_behaviour(behaviour)
    started = time.monotonic()
    with LlamaServerPeer("llama-server", gguf, end_tokens=set(), threads=1, k=5, startup_s=startup_s) as peer:
        with pytest.raises(SpecchatError, match=message):
            peer.generate([1, 2, 3], max_new_tokens=4)
        assert peer.process is None
    assert time.monotonic() - started < 30
    assert not alive(entries()[0]["pid"])


def test_a_server_that_dies_during_a_request_says_so(fake):
    gguf, entries, set_behaviour = fake
    set_behaviour("die-on-request")
    with LlamaServerPeer("llama-server", gguf, end_tokens=set(), threads=1, k=5, request_s=20) as peer:
        with pytest.raises(SpecchatError, match="died|no reply"):
            peer.generate([1, 2, 3], max_new_tokens=4)
        assert peer.process is None


def test_a_draft_mode_without_a_gguf_draft_says_what_to_give(fake, model_folders):
    from specchat.engine.loading.load import LoadOptions
    from specchat.engine.loading.pair import load_pair
    from specchat.models.sources import ModelSource

    pair = load_pair(ModelSource.parse(str(model_folders / "target")), None, LoadOptions(device="cpu"))
    with pytest.raises(SpecchatError, match="not one"):  # an HF folder, not a GGUF file
        peer_server.bench_peer("llama-server", pair, 5)
    gguf, _, _ = fake
    pair.target.gguf_path = lambda: gguf
    with pytest.raises(SpecchatError, match=r"GGUF draft model \(no draft\); give --peer-draft"):
        peer_server.bench_peer("llama-server-draft", pair, 5)
    with pytest.raises(SpecchatError, match="does not exist"):
        peer_server.bench_peer("llama-server-draft", pair, 5, peer_draft=gguf.with_name("missing.gguf"))


def test_bench_runs_the_server_modes_beside_ours_and_stops_them(fake, tmp_path, tokenizer, target, monkeypatch):
    from specchat.cli import main
    from specchat.engine.loading.load import LoadedModel

    gguf, entries, _ = fake
    monkeypatch.setattr(LoadedModel, "gguf_path", lambda self: gguf)
    target.save_pretrained(tmp_path / "target")
    tokenizer.save_pretrained(tmp_path / "target")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "chat", "turns": ["The quick brown fox", "Again"]}))
    report_path = tmp_path / "report.json"
    assert main(["bench", "--prompts", str(prompts), "--target", str(tmp_path / "target"), "--modes",
                 "none,llama-server,llama-server-draft,llama-server-ngram", "--peer-draft", str(gguf),
                 "--max-new-tokens", "8", "--k", "3", "--out", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    records = {r["mode"]: r for r in report["records"]}
    assert set(records) == {"none", "llama-server", "llama-server-draft", "llama-server-ngram"}
    assert records["llama-server-draft"]["new_tokens"] == 16  # both turns, 8 tokens each
    assert records["llama-server-draft"]["draft_proposed"] == 20 and records["llama-server-draft"]["alpha"] == 0.7
    assert records["llama-server"]["alpha"] is None
    assert records["llama-server"]["identical"] is False  # the fake's tokens are not the tiny model's
    assert report["settings"]["peer_draft"] == str(gguf)
    starts = [e for e in entries() if "argv" in e]
    assert len(starts) == 3 and any("-md" in e["argv"] and str(gguf) in e["argv"] for e in starts)
    assert not any(alive(e["pid"]) for e in starts)


REAL = peer_server.BUILT_BINARY


@pytest.mark.model
@pytest.mark.skipif(not REAL.is_file() and not os.environ.get("SPECCHAT_LLAMA_SERVER"),
                    reason="llama-server is not built (make peers)")
def test_the_real_llama_server_decodes_as_our_plain_decoding(native_pair):
    from specchat import bench
    from specchat.engine.chat_prompt import Message, build_prompt_ids
    from specchat.engine.decoding.speculative import GenerationConfig

    ids = build_prompt_ids(native_pair.target.tokenizer,
                           [Message("user", "Repeat exactly: The library opens at nine and closes at six.")])
    plain = native_pair.engine("none").generate(ids, GenerationConfig(max_new_tokens=32)).token_ids
    settings = bench.BenchSettings(k=4, peer_draft=str(native_pair.target.gguf_path()))  # itself as its draft
    for mode in peer_server.SERVER_MODES:
        with peer_server.bench_peer(mode, native_pair, settings.k, settings.peer_draft) as peer:
            reply = peer.generate(ids, 32)
        assert reply.token_ids == list(plain), mode
        if mode != "llama-server":
            assert reply.draft_proposed >= reply.draft_accepted >= 0

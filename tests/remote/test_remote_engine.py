"""The remote engine against a real `specchat serve` process on a tiny model (tests/server_fixtures.py).

A greedy reply must be plain decoding's, token for token; each token's origin must be the one the server streamed
in its extension field; Stop must stop the server's generation; and an unreachable server, a wrong key, an unknown
model or a silent server must each give a one-line RemoteError. The server runs with a fixed K so that its drafts,
and so the origins, are the same for the same prompt every time."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx2 as httpx
import pytest
from server_fixtures import last_api_run, plain_reply, planned_server, stop_server, wait_until

from specchat.core.errors import SpecchatError
from specchat.core.vocabulary import Origin
from specchat.engine.chat_engine import reply_to
from specchat.engine.chat_prompt import Message
from specchat.engine.decoding.events import origin_runs
from specchat.engine.decoding.speculative import GenerationConfig
from specchat.remote import RemoteEndpoint, RemoteEngine, RemoteError
from specchat.remote.engine import _Reply

KEY = "remote-test-key"
TIMEOUT = 120
PROMPT = "The quick brown fox"


SERVERS = {"remote": ("--api-key", KEY, "--k", "4", "--no-adaptive")}  # started with the session's others


@pytest.fixture(scope="module")
def remote_server(request):
    running = planned_server(request, "remote")  # its data folder is data_dir
    yield running
    stop_server(running)


@pytest.fixture(scope="module")
def endpoint(remote_server):
    return RemoteEndpoint(remote_server.url, api_key=KEY)




def test_connect_finds_a_specchat_server_with_exact_origins(endpoint, remote_server):
    info = endpoint.connect()
    assert (info.model, info.models, info.kind, info.drafter) == ("tiny", ("tiny",), "specchat", "pld")
    assert info.exact_origins and not info.has_metrics and not info.spec_metrics
    assert info.context_window == 4096 and "exact" in info.describe()
    assert RemoteEndpoint(remote_server.url + "/v1/", api_key=KEY).connect() == info  # the /v1 form works too


@pytest.mark.parametrize("text", [PROMPT, "Speculative decoding drafts tokens."])
def test_a_greedy_reply_is_plain_decodings_token_for_token(endpoint, served_pair, text):
    events = list(endpoint.engine().stream([Message("user", text)], None, GenerationConfig(max_new_tokens=48)))
    result = events[-1].result
    assert result.text == plain_reply(served_pair, text, 48)
    assert "".join(event.text_delta for event in events) == result.text
    assert result.finish_reason == "length" and result.stats.new_tokens == 48 and len(result.origins) == 48
    assert all(event.result is None for event in events[:-1])
    assert "".join(piece for piece, _ in origin_runs(result.text, result.spans, result.origins)) == result.text


def test_each_tokens_origin_is_the_servers(endpoint, remote_server):
    engine = endpoint.engine()
    events = list(engine.stream([Message("user", PROMPT)], None, GenerationConfig(max_new_tokens=64)))
    streamed = raw_extension_chunks(remote_server.url, PROMPT, 64)
    mine = [event for event in events if event.origins]
    assert [[_name(o) for o in event.origins] for event in mine] == [chunk["origins"] for chunk in streamed]
    assert [[(text, _name(o)) for text, o in event.runs()] for event in mine] == \
        [[(run["text"], run["origin"]) for run in chunk["runs"] if run["text"]] for chunk in streamed]
    assert any(o == Origin.DRAFT for event in mine for o in event.origins)  # the fixed K drafts something here
    stats, last = events[-1].result.stats, streamed[-1]
    assert (stats.draft_accepted, stats.draft_proposed, stats.target_passes) == \
        (last["draft_accepted"], last["draft_proposed"], last["target_passes"])
    assert engine.figures.origins == "exact" and not engine.figures.server_wide
    assert engine.figures.alpha == pytest.approx(last["alpha"], abs=1e-4)


def test_stop_ends_the_stream_and_the_servers_generation(endpoint, remote_server, data_dir):
    cancel = threading.Event()
    events = []
    for event in endpoint.engine().stream([Message("user", "Cancel me")], None,
                                          GenerationConfig(max_new_tokens=3000), cancel):
        events.append(event)
        if len(events) == 2:
            cancel.set()
    result = events[-1].result
    assert result.finish_reason == "cancelled" and len(events) <= 4
    wait_until(lambda: httpx.get(f"{remote_server.url}/health").json()["running"] == 0)
    run = last_api_run(data_dir, lambda r: r["finish_reason"] == "cancelled")
    assert 0 < run["new_tokens"] < 3000
    again = reply_to(endpoint.engine(), [Message("user", "still there?")], None, GenerationConfig(max_new_tokens=4))
    assert again.stats.new_tokens == 4 and again.finish_reason == "length"  # and the server goes on serving


def test_without_the_extension_multi_token_steps_are_inferred(endpoint, served_pair):
    """The path for servers that do not say where tokens came from, with a local tokenizer to count them: the
    text is the same, and a chunk counted as several tokens is marked inferred as a whole (never DRAFT)."""
    engine = RemoteEngine(endpoint, tokenizer=served_pair.target.tokenizer, use_extension=False)
    events = list(engine.stream([Message("user", PROMPT)], None, GenerationConfig(max_new_tokens=64)))
    result = events[-1].result
    assert result.text == plain_reply(served_pair, PROMPT, 64) and result.stats.new_tokens == 64
    for event in events[:-1]:
        counted = len(served_pair.target.tokenizer(event.text_delta, add_special_tokens=False)["input_ids"])
        expected = [Origin.INFERRED_DRAFT] * counted if counted > 1 else [Origin.TARGET]
        assert list(event.origins) == expected
    assert engine.figures.origins == "estimated" and engine.figures.alpha is None
    assert "no speculative-decoding metrics" in engine.figures.source


def test_usage_per_chunk_marks_n_minus_one_tokens_accepted():
    """vLLM's chunks with continuous usage (cumulative completion_tokens in every chunk): a chunk of n tokens is
    one engine step, n - 1 accepted drafts and the target's token; the whole chunk is highlighted as inferred."""
    reply = _Reply(exact=False, tokenizer=None, started=time.perf_counter())
    chunks = [("", 0), ("Hello", 1), (" world, how", 4), (" are", 5), ("", 5)]
    events = [reply.add(vllm_chunk(text, tokens), "http://vllm") for text, tokens in chunks]
    assert events[0] is None and events[-1] is None  # the role chunk, and a chunk with nothing new
    assert events[1].origins == (Origin.TARGET,) and events[3].origins == (Origin.TARGET,)
    three = events[2]
    assert three.origins == (Origin.INFERRED_DRAFT, Origin.INFERRED_DRAFT, Origin.TARGET)
    assert three.runs() == [(" world, how", Origin.INFERRED_DRAFT)]
    assert reply.stats.new_tokens == 5 and reply.stats.target_passes == 3 and reply.stats.draft_accepted == 2
    reply.add({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": None}],
               "usage": {"prompt_tokens": 9, "completion_tokens": 5}}, "http://vllm")
    last = reply.last_event(cancelled=False, seed=1)
    assert last.result.text == "Hello world, how are" and last.result.finish_reason == "eos"
    assert last.result.stats.prompt_tokens == 9
    figures = reply.figures(None)
    assert figures.alpha is None and figures.tokens_per_chunk == pytest.approx(5 / 3)
    assert "accepted drafts inferred" in figures.label()
    # When the server's metrics show that speculation is off, several tokens in a chunk are merged steps: no claim.
    plain = _Reply(exact=False, tokenizer=None, started=time.perf_counter(), infer=False)
    merged = [plain.add(vllm_chunk(text, tokens), "http://vllm") for text, tokens in chunks][2]
    assert merged.origins == (Origin.TARGET,) * 3 and plain.stats.draft_accepted == 0
    assert plain.figures(None).origins == "none"


def test_vllm_per_request_figures_are_the_replys_own():
    """With `--per-request-spec-decode-metrics`, vLLM puts this reply's counts on the usage chunk (the example in
    vLLM's docs/features/speculative_decoding/acceptance_metrics.md): they win over the server-wide counters."""
    reply = _Reply(exact=False, tokenizer=None, started=time.perf_counter())
    reply.add({"choices": [], "usage": {"prompt_tokens": 11742, "total_tokens": 11777, "completion_tokens": 35},
               "metrics": {"speculative_decoding": {
                   "mean_acceptance_length": 1.2325581395348837, "draft_acceptance_rate": 0.07751937984496124,
                   "acceptance_histogram": [39, 1, 0, 3], "num_spec_steps": 43, "num_accepted_draft_tokens": 10,
                   "num_draft_tokens": 129, "num_spec_tokens": 3}}}, "http://vllm")
    figures = reply.figures(None)
    assert figures.alpha == pytest.approx(0.07751937984496124) and figures.tau == pytest.approx(1.2325581395348837)
    assert not figures.server_wide and "per-request" in figures.source


def test_nothing_listening_is_a_clear_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(RemoteError) as raised:
        RemoteEndpoint(f"127.0.0.1:{port}").connect()
    assert raised.value.kind == "unreachable" and f"http://127.0.0.1:{port}" in str(raised.value)
    assert "connection refused" in str(raised.value)
    assert_user_facing(raised.value)


def test_a_wrong_or_missing_key_is_a_clear_error(remote_server):
    with pytest.raises(RemoteError) as wrong:
        RemoteEndpoint(remote_server.url, api_key="wrong").connect()
    assert wrong.value.kind == "auth" and "refused the API key" in str(wrong.value) and "401" in str(wrong.value)
    with pytest.raises(RemoteError) as missing:
        RemoteEndpoint(remote_server.url).connect()
    assert missing.value.kind == "auth" and "needs an API key" in str(missing.value)
    assert_user_facing(wrong.value)


def test_an_unknown_model_is_a_clear_error(remote_server):
    with pytest.raises(RemoteError) as raised:
        RemoteEndpoint(remote_server.url, api_key=KEY, model="gpt-4o").connect()
    assert raised.value.kind == "model" and "'gpt-4o'" in str(raised.value) and "'tiny'" in str(raised.value)
    assert_user_facing(raised.value)


def test_a_server_that_never_answers_times_out():
    with socket.socket() as silent:  # accepts connections (the backlog) but never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = "http://127.0.0.1:%d" % silent.getsockname()[1]
        started = time.monotonic()
        with pytest.raises(RemoteError) as raised:
            RemoteEndpoint(url, timeout_s=0.5).connect()
    assert raised.value.kind == "timeout" and "0.5 s" in str(raised.value)
    assert time.monotonic() - started < 10
    assert_user_facing(raised.value)


def test_an_address_that_is_not_http_is_refused_at_once():
    for address in ("ftp://example.org", "http://host:port", "http://"):
        with pytest.raises(RemoteError) as raised:
            RemoteEndpoint(address)
        assert raised.value.kind == "address"


# --- helpers ----------------------------------------------------------------------------------------------------

def _name(origin: Origin) -> str:
    return {Origin.DRAFT: "draft", Origin.TARGET: "target"}[origin]


def raw_extension_chunks(url: str, text: str, max_tokens: int) -> list[dict]:
    """The `specchat` field of each chunk of the same request, read straight off the wire."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens,
            "stream": True}
    figures = []
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=TIMEOUT,
                      headers={"Authorization": f"Bearer {KEY}"}) as answer:
        for line in answer.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[6:])
                if "specchat" in chunk:
                    figures.append(chunk["specchat"])
    return figures


def vllm_chunk(text: str, completion_tokens: int) -> dict:
    """A chat.completion.chunk as vLLM streams it with stream_options.continuous_usage_stats."""
    delta = {"role": "assistant", "content": ""} if completion_tokens == 0 else {"content": text}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}],
            "usage": {"prompt_tokens": 9, "total_tokens": 9 + completion_tokens,
                      "completion_tokens": completion_tokens}}


def assert_user_facing(error: RemoteError) -> None:
    """A SpecchatError (shown without a traceback) in one line, not chained to the socket error behind it."""
    assert isinstance(error, SpecchatError) and "\n" not in str(error)
    assert error.__cause__ is None and (error.__context__ is None or error.__suppress_context__)





def test_specchat_bench_measures_a_remote_engine_beside_plain_decoding(remote_server, served_model_dir, tmp_path,
                                                                        capsys):
    """`specchat bench --remote URL`: the same model here and there, so the remote text is plain decoding's; its
    speed is another machine's, so no speedup is reported for it."""
    from specchat.cli import main

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": ["The quick brown fox"]}),
                       encoding="utf-8")
    out = tmp_path / "report.json"
    code = main(["bench", "--prompts", str(prompts), "--target", str(served_model_dir), "--device", "cpu",
                 "--modes", "none", "--max-new-tokens", "8", "--remote", remote_server.url, "--remote-key", KEY,
                 "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["modes"] == ["none", "remote"]
    remote = report["summary"]["overall"]["remote"]
    assert remote["identical"] == 1.0 and remote["speedup"] is None and remote["new_tokens"] == 8
    assert "remote: tiny at 127.0.0.1" in capsys.readouterr().err

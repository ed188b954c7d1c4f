"""`specchat serve` as a client sees it: the real `openai` client against a real server process on a tiny model.

The replies must be plain decoding's, token for token (greedy) and reproducible (sampling with a seed); the stream
must carry each token's origin; stop sequences, bad requests, a full line, an API key and a client that goes away
must each get the documented answer; and every generation must land in the statistics with source "api"."""

from __future__ import annotations

import concurrent.futures

import httpx2 as httpx
import openai
import pytest
from server_fixtures import last_api_run, plain_reply, wait_until

TIMEOUT = 120
# The server processes of this module (server_fixtures.py): `server` (its data folder is data_dir) and `busy_server`.
SERVERS = {"server": (), "busy": ("--max-waiting", "0", "--api-key", "s3cret")}


def client(url: str, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=TIMEOUT)




def test_models_lists_the_served_model(server):
    models = client(server.url).models.list()
    assert [m.id for m in models.data] == ["tiny"]
    assert models.data[0].model_extra["specchat"]["drafter"] == "pld"


@pytest.mark.parametrize("text", ["The quick brown fox", "Speculative decoding drafts tokens."])
def test_a_greedy_reply_is_plain_decodings_token_for_token(server, served_pair, text):
    reply = client(server.url).chat.completions.create(model="tiny", messages=[{"role": "user", "content": text}],
                                                       max_tokens=48)
    assert reply.choices[0].message.content == plain_reply(served_pair, text, 48)
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 48 and reply.usage.total_tokens == reply.usage.prompt_tokens + 48
    figures = reply.model_extra["specchat"]
    assert len(figures["origins"]) == 48 and set(figures["origins"]) <= {"draft", "target"}


def test_the_stream_is_the_same_reply_with_each_tokens_origin(server, served_pair):
    text = "The quick brown fox"
    chunks = list(client(server.url).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": text}], max_tokens=40, stream=True,
        stream_options={"include_usage": True}))
    content = [c for c in chunks if c.choices]
    assert content[0].choices[0].delta.role == "assistant"
    streamed = "".join(c.choices[0].delta.content or "" for c in content)
    assert streamed == plain_reply(served_pair, text, 40)
    assert content[-1].choices[0].finish_reason == "length"
    steps = [c.model_extra["specchat"] for c in content if "specchat" in (c.model_extra or {})]
    assert sum(len(s["origins"]) for s in steps) == 40  # every token, with its origin
    for chunk in content:  # the runs are the chunk's text, cut by origin
        figures = (chunk.model_extra or {}).get("specchat")
        if figures is not None:
            assert "".join(run["text"] for run in figures["runs"]) == (chunk.choices[0].delta.content or "")
    assert chunks[-1].usage.completion_tokens == 40 and not chunks[-1].choices


def test_sampling_with_a_seed_is_reproducible(server):
    ask = dict(model="tiny", messages=[{"role": "user", "content": "The quick brown fox"}], max_tokens=32,
               temperature=0.9, top_p=0.95, seed=1234)
    api = client(server.url)
    first, second = (api.chat.completions.create(**ask).choices[0].message.content for _ in range(2))
    assert first == second


def test_a_stop_sequence_ends_the_reply_before_it(server, served_pair):
    whole = client(server.url).completions.create(model="tiny", prompt="The quick brown fox", max_tokens=40)
    text = whole.choices[0].text
    stop = text[10:13]  # three characters from the middle of the reply
    assert stop.strip()
    cut = client(server.url).completions.create(model="tiny", prompt="The quick brown fox", max_tokens=40,
                                                stop=[stop, "never appears"])
    assert cut.choices[0].text == text[:text.index(stop)] and cut.choices[0].finish_reason == "stop"
    streamed = client(server.url).completions.create(model="tiny", prompt="The quick brown fox", max_tokens=40,
                                                     stop=stop, stream=True)
    assert "".join(c.choices[0].text for c in streamed if c.choices) == cut.choices[0].text


@pytest.mark.parametrize("change, status, param", [
    ({"messages": []}, 400, "messages"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, 400, "messages.0.role"),
    ({"max_tokens": 0}, 400, "max_tokens"),
    ({"temperature": 5}, 400, "temperature"),
    ({"n": 2}, 400, "n"),
    ({"frequency_penalty": 0.5}, 400, "frequency_penalty"),
    ({"stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ({"messages": [{"role": "assistant", "content": "hi"}]}, 400, "messages"),
    ({"model": "gpt-4o"}, 404, "model"),
    ({"messages": [{"role": "user", "content": "x " * 5000}]}, 400, "messages"),
])
def test_a_bad_request_gets_a_clear_json_error(server, change, status, param):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], **change}
    answer = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=TIMEOUT)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert error["param"] == param and error["message"] and error["type"]
    with pytest.raises(openai.APIStatusError) as raised:  # and the client raises it with its message
        client(server.url).chat.completions.create(**body)
    assert raised.value.status_code == status and error["message"] in str(raised.value)


def test_malformed_json_and_unknown_paths_are_json_errors_too(server):
    broken = httpx.post(f"{server.url}/v1/chat/completions", content=b"{not json",
                        headers={"content-type": "application/json"}, timeout=TIMEOUT)
    assert broken.status_code == 400 and "error" in broken.json()
    missing = httpx.get(f"{server.url}/v1/embeddings", timeout=TIMEOUT)
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"


def test_concurrent_clients_each_get_their_own_reply(server, served_pair):
    texts = ["The quick brown fox", "Speculative decoding", "jumps over the lazy dog", "drafts tokens"]

    def ask(text):
        return client(server.url).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": text}], max_tokens=24).choices[0].message.content

    with concurrent.futures.ThreadPoolExecutor(len(texts)) as pool:
        replies = list(pool.map(ask, texts))
    assert replies == [plain_reply(served_pair, text, 24) for text in texts]


def test_a_client_that_disconnects_cancels_its_generation(server, data_dir):
    stream = client(server.url).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Cancel me"}], max_tokens=3000, stream=True)
    chunks = iter(stream)
    next(chunks), next(chunks)
    stream.close()  # the connection goes away mid-reply
    wait_until(lambda: httpx.get(f"{server.url}/health").json()["running"] == 0)
    run = last_api_run(data_dir, lambda r: r["finish_reason"] == "cancelled")
    assert 0 < run["new_tokens"] < 3000
    reply = client(server.url).chat.completions.create(model="tiny", max_tokens=4,
                                                       messages=[{"role": "user", "content": "still there?"}])
    assert reply.usage.completion_tokens == 4  # and the server goes on serving


def test_every_generation_is_recorded_with_source_api(server, data_dir):
    client(server.url).chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Count me"}],
                                               max_tokens=6)
    run = last_api_run(data_dir, lambda r: r["new_tokens"] == 6)
    assert run["source"] == "api" and run["drafter"] == "pld" and run["finish_reason"] == "length"


def test_a_full_line_answers_429_and_a_key_is_required_when_set(busy_server):
    api = client(busy_server.url, key="s3cret")
    with pytest.raises(openai.AuthenticationError):
        client(busy_server.url, key="wrong").models.list()
    assert httpx.get(f"{busy_server.url}/v1/models").status_code == 401
    stream = api.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hold the device"}],
                                         max_tokens=3000, stream=True)
    chunks = iter(stream)
    next(chunks)  # generating now; the line holds no one else (--max-waiting 0)
    answer = httpx.post(f"{busy_server.url}/v1/chat/completions", timeout=TIMEOUT,
                        headers={"Authorization": "Bearer s3cret"},
                        json={"model": "tiny", "messages": [{"role": "user", "content": "me too"}]})
    assert answer.status_code == 429 and answer.headers["retry-after"] == "1"
    assert answer.json()["error"]["code"] == "server_busy"
    stream.close()
    wait_until(lambda: httpx.get(f"{busy_server.url}/health").json()["running"] == 0)
    assert api.models.list().data[0].id == "tiny"






def test_binding_beyond_this_machine_needs_a_key(tmp_path, monkeypatch, capsys):
    from specchat.cli import main  # the command as `specchat serve` runs it, in this process: refused before loading
    from specchat.commands import loading

    def loads(*args):
        raise AssertionError("the binding was not refused: the model is loading")

    monkeypatch.setattr(loading, "load_for", loads)  # a refusal that failed ends here, not in a server for ever
    monkeypatch.delenv("SPECCHAT_API_KEY", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "API key" in err and "Traceback" not in err

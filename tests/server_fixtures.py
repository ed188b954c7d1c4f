"""Fixtures for tests against real `specchat serve` processes (tests/server, tests/remote): a tiny model saved as
a Hugging Face folder, the same model loaded here as the reference, and servers on it. Each of those folders'
conftest.py imports them.

The model has no end-of-sequence token and a long context, so a reply runs until its token limit: a test can hold
the device with a long reply and be sure it is still generating when the next request arrives."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass, field

import pytest
from tiny_models import EXACT_ARGS, EXACT_PLACEMENT, build_byte_tokenizer, build_tiny_llama

START_TIMEOUT_S = 180
LISTENING = re.compile(r"specchat serve: .* on (http://\S+)/v1")


@dataclass
class ServerProcess:
    process: subprocess.Popen
    url: str
    log: list[str] = field(default_factory=list)


@pytest.fixture(scope="session")
def served_model_dir(tmp_path_factory):
    tokenizer = build_byte_tokenizer(with_eos=False)
    model = build_tiny_llama(len(tokenizer), seed=0, max_positions=4096)
    model.generation_config.eos_token_id = None
    folder = tmp_path_factory.mktemp("served") / "tiny"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def served_pair(served_model_dir):
    """The same model loaded in the test process: plain decoding here is the reference for the server's replies
    (both on the CPU in float32, where they are the same token for token)."""
    from specchat.engine import LoadOptions, ModelSource
    from specchat.engine.pair import load_pair

    return load_pair(ModelSource.parse(str(served_model_dir)), None, LoadOptions(**EXACT_PLACEMENT))


@pytest.fixture
def serve(served_pair):
    """Starts servers in this process (RunningServer, as the app's switch runs it) on the tiny pair, bound to
    127.0.0.1 on a free port: `serve(context_size=None, **RunningServer options)` returns one once /health answers;
    each is stopped at teardown."""
    from specchat.engine import GenerationConfig
    from specchat.server.run import RunningServer
    from specchat.server.served import ServedModel

    servers = []

    def start(context_size: int | None = None, **options):
        served = ServedModel(served_pair, "pld", GenerationConfig(max_new_tokens=16), model_id="tiny",
                             context_size=context_size)
        server = RunningServer(served, port=0, **options).start()
        servers.append(server)
        wait_until(lambda: answers_health(server.url), 30)
        return server

    yield start
    for server in servers:
        assert server.stop(20)


def answers_health(url: str) -> bool:
    """Whether a server at `url` answers /health with 200 now."""
    import httpx2 as httpx

    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("serve-data")


def start_server(model_dir, data_dir, *options: str) -> ServerProcess:
    env = {**os.environ, "SPECCHAT_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1"}
    env.pop("SPECCHAT_API_KEY", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "specchat", "serve", "--target", str(model_dir), *EXACT_ARGS, "--port", "0",
         "--drafter", "pld", "--model-id", "tiny", "--max-new-tokens", "64", *options],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
    log: list[str] = []
    found = threading.Event()
    url: list[str] = []

    def read_log():  # keeps draining stderr so the server never blocks on a full pipe
        for line in process.stderr:
            log.append(line)
            match = LISTENING.search(line)
            if match:
                url.append(match.group(1))
                found.set()
        found.set()

    threading.Thread(target=read_log, daemon=True).start()
    if not found.wait(START_TIMEOUT_S) or not url:
        process.kill()
        raise AssertionError("the server did not start:\n" + "".join(log))
    return ServerProcess(process, url[0], log)


def stop_server(server: ServerProcess) -> None:
    server.process.terminate()  # uvicorn shuts down gracefully on SIGTERM
    try:
        server.process.wait(60)
    except subprocess.TimeoutExpired:
        server.process.kill()
        raise AssertionError("the server did not stop on SIGTERM")
    assert "Traceback" not in "".join(server.log), "".join(server.log)


@pytest.fixture(scope="module")
def server(served_model_dir, data_dir):
    running = start_server(served_model_dir, data_dir)
    yield running
    stop_server(running)


@pytest.fixture
def busy_server(served_model_dir, tmp_path):
    running = start_server(served_model_dir, tmp_path, "--max-waiting", "0", "--api-key", "s3cret")
    yield running
    stop_server(running)


# --- helpers the server and remote tests share -------------------------------------------------------------------

WAIT_S = 120


def wait_until(condition, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def last_api_run(data_dir, matching):
    """The newest run the server recorded (source "api") that matches, once it is written (read with sqlite3:
    the columns as stored)."""
    found = []

    def look():
        with contextlib.closing(sqlite3.connect(data_dir / "specchat.db", timeout=30)) as db:
            db.row_factory = sqlite3.Row
            rows = db.execute("SELECT * FROM generation_runs WHERE source = 'api' ORDER BY id").fetchall()
        found[:] = [row for row in rows if matching(row)]
        return bool(found)

    wait_until(look)
    return found[-1]


def plain_reply(pair, text: str, max_tokens: int) -> str:
    """What plain decoding (no drafter) writes for one user message: the reference for every greedy reply."""
    from specchat.engine import GenerationConfig, Message, build_prompt_ids

    prompt = build_prompt_ids(pair.target.tokenizer, [Message("user", text)])
    return pair.engine("none").generate(prompt, GenerationConfig(max_new_tokens=max_tokens)).text

"""Fixtures for tests against real `specchat serve` processes (tests/server, tests/remote): a tiny model saved as
a Hugging Face folder, the same model loaded here as the reference, and servers on it. Each of those folders'
conftest.py imports them.

The model has no end-of-sequence token and a long context, so a reply runs until its token limit: a test can hold
the device with a long reply and be sure it is still generating when the next request arrives.

A module names the server processes it needs in SERVERS ({name: options}); the session starts all of them at once
when the first is needed (ServerPool), so that their start-ups (seconds of imports, one core each) overlap, and
each module then takes its own, fresh and unshared, as start_server would have made it."""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tiny_models import EXACT_ARGS, EXACT_PLACEMENT, build_byte_tokenizer, build_tiny_llama

START_TIMEOUT_S = 180
LISTENING = re.compile(r"specchat serve: .* on (http://\S+)/v1")


@dataclass
class ServerProcess:
    process: subprocess.Popen
    url: str
    log: list[str] = field(default_factory=list)
    data_dir: Path | None = None


# One model folder and one pool of server processes for the whole session: each folder's conftest.py (and a module
# that imports these fixtures) registers the session fixtures anew, and pytest makes each registration its own.
_SESSION: dict = {}


@pytest.fixture(scope="session")
def served_model_dir(tmp_path_factory):
    if "model_dir" not in _SESSION:
        tokenizer = build_byte_tokenizer(with_eos=False)
        model = build_tiny_llama(len(tokenizer), seed=0, max_positions=4096)
        model.generation_config.eos_token_id = None
        folder = tmp_path_factory.mktemp("served") / "tiny"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        _SESSION["model_dir"] = folder
    return _SESSION["model_dir"]


@pytest.fixture(scope="session")
def served_pair(served_model_dir):
    """The same model loaded in the test process: plain decoding here is the reference for the server's replies
    (both on the CPU in float32, where they are the same token for token)."""
    from specchat.engine.loading.load import LoadOptions
    from specchat.engine.loading.pair import load_pair
    from specchat.models.sources import ModelSource

    return load_pair(ModelSource.parse(str(served_model_dir)), None, LoadOptions(**EXACT_PLACEMENT))


@pytest.fixture
def serve(served_pair):
    """Starts servers in this process (RunningServer, as the app's switch runs it) on the tiny pair, bound to
    127.0.0.1 on a free port: `serve(context_size=None, **RunningServer options)` returns one once /health answers;
    each is stopped at teardown."""
    from specchat.chats.run_context import RunContext
    from specchat.engine.decoding.speculative import GenerationConfig
    from specchat.server.run import RunningServer
    from specchat.server.served import ServedModel

    servers = []

    def start(context_size: int | None = None, **options):
        served = ServedModel(served_pair, RunContext.of_pair(served_pair, "pld", GenerationConfig(max_new_tokens=16)),
                             model_id="tiny", context_size=context_size)
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
def data_dir(request, tmp_path_factory):
    """The data folder of the module's first server in SERVERS (its statistics database), else a new folder."""
    if hasattr(request.module, "SERVERS"):
        return request.getfixturevalue("server_pool").data_dirs[request.module.__name__]
    return tmp_path_factory.mktemp("serve-data")


class Launch:
    """A `specchat serve` process on its way up; ready() waits until it listens."""

    def __init__(self, model_dir, data_dir, *options: str):
        # its own cache too: the curves it measures for test models stay out of the user's costs.json
        env = {**os.environ, "SPECCHAT_DATA_DIR": str(data_dir), "SPECCHAT_CACHE_DIR": str(Path(data_dir) / "cache"),
               "HF_HUB_OFFLINE": "1"}
        env.pop("SPECCHAT_API_KEY", None)
        self.data_dir = Path(data_dir)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "specchat", "serve", "--target", str(model_dir), *EXACT_ARGS, "--port", "0",
             "--drafter", "pld", "--model-id", "tiny", "--max-new-tokens", "64", *options],
            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env)
        self.log: list[str] = []
        self.found = threading.Event()
        self.url: list[str] = []
        threading.Thread(target=self._read_log, daemon=True).start()

    def _read_log(self) -> None:  # keeps draining stderr so the server never blocks on a full pipe
        for line in self.process.stderr:
            self.log.append(line)
            match = LISTENING.search(line)
            if match:
                self.url.append(match.group(1))
                self.found.set()
        self.found.set()

    def ready(self) -> ServerProcess:
        if not self.found.wait(START_TIMEOUT_S) or not self.url:
            self.process.kill()
            raise AssertionError("the server did not start:\n" + "".join(self.log))
        return ServerProcess(self.process, self.url[0], self.log, self.data_dir)


def start_server(model_dir, data_dir, *options: str) -> ServerProcess:
    return Launch(model_dir, data_dir, *options).ready()


class ServerPool:
    """The server processes that the modules of the session's tests name in SERVERS ({name: options}), launched
    together; each is taken once, by its module (a second request for the same name starts a fresh one on the same
    data folder: with --dist worksteal a worker may run a module's tests on both sides of another module's, so its
    module-scoped server is stopped and taken again, and data_dir must still be where that server writes). A
    module's data_dir is the data folder of the first server it names."""

    def __init__(self, model_dir, tmp_path_factory, modules):
        self.model_dir, self.tmp_path_factory = model_dir, tmp_path_factory
        self.launches = {(module.__name__, name): Launch(model_dir, tmp_path_factory.mktemp("serve-data"), *options)
                         for module in modules for name, options in module.SERVERS.items()}
        self.folders = {key: launch.data_dir for key, launch in self.launches.items()}
        self.data_dirs = {module.__name__: self.folders[module.__name__, next(iter(module.SERVERS))]
                          for module in modules}
        for launch in self.launches.values():  # all up before any test runs beside their start-ups
            launch.found.wait(START_TIMEOUT_S)

    def take(self, module, name: str) -> ServerProcess:
        launch = self.launches.pop((module.__name__, name), None)
        if launch is None:
            folder = self.folders.get((module.__name__, name)) or self.tmp_path_factory.mktemp("serve-data")
            launch = Launch(self.model_dir, folder, *module.SERVERS[name])
        return launch.ready()

    def close(self) -> None:
        for launch in self.launches.values():  # named, never taken (their tests did not run)
            launch.process.kill()
            launch.process.wait(60)
        self.launches.clear()


@pytest.fixture(scope="session")
def server_pool(request, served_model_dir, tmp_path_factory):
    if "pool" not in _SESSION:
        modules = {item.module for item in request.session.items
                   if hasattr(getattr(item, "module", None), "SERVERS")}
        _SESSION["pool"] = ServerPool(served_model_dir, tmp_path_factory, modules)
    yield _SESSION["pool"]
    _SESSION["pool"].close()


def planned_server(request, name: str) -> ServerProcess:
    """The server `name` of the requesting test's module (its SERVERS), started with the session's others."""
    assert name in getattr(request.module, "SERVERS", {}), f"name the server {name!r} in the module's SERVERS"
    return request.getfixturevalue("server_pool").take(request.module, name)


def stop_server(server: ServerProcess) -> None:
    server.process.terminate()  # uvicorn shuts down gracefully on SIGTERM
    try:
        server.process.wait(60)
    except subprocess.TimeoutExpired:
        server.process.kill()
        raise AssertionError("the server did not stop on SIGTERM")
    assert "Traceback" not in "".join(server.log), "".join(server.log)


@pytest.fixture(scope="module")
def server(request):
    """SERVERS["server"]: the module's server with the default options (its data folder is data_dir)."""
    running = planned_server(request, "server")
    yield running
    stop_server(running)


@pytest.fixture
def busy_server(request):
    """SERVERS["busy"]: --max-waiting 0 --api-key s3cret, for one test."""
    running = planned_server(request, "busy")
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
    from specchat.engine.chat_prompt import Message, build_prompt_ids
    from specchat.engine.decoding.speculative import GenerationConfig

    prompt = build_prompt_ids(pair.target.tokenizer, [Message("user", text)])
    return pair.engine("none").generate(prompt, GenerationConfig(max_new_tokens=max_tokens)).text

"""llama.cpp's own speculation as a peer in `specchat bench`: its `llama-server` binary, as its users run it.

- `llama-server`: plain greedy decoding (no speculation), llama.cpp's server loop;
- `llama-server-draft`: its draft-model speculation (`-md DRAFT.gguf --spec-type draft-simple`), K drafts a step;
- `llama-server-ngram`: its prompt-lookup speculation (`--spec-type ngram-simple`), drafts of K tokens.

Each mode starts one server on 127.0.0.1, on a free port, with the target's GGUF file, our runner's threads, flash
attention and our runner's KV cache types, bfloat16 K and float16 V (as engine/backends/llamacpp/llama_runner.py runs the target: the same numbers), and one slot. Prompts
go as token ids to its /completion endpoint and the reply comes back as token ids, so both sides see the same tokens;
the wall time is measured around the request (prompt processing included, as for our modes), and the server's own
draft counters give α. The binary is built by `make peers` (build/peers/bin/llama-server), or named by
SPECCHAT_LLAMA_SERVER.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..core.errors import SpecchatError
from ..engine.backends.llamacpp.extra_buffers import extra_buffers_usable_here
from ..engine.backends.llamacpp.library import default_threads
from ..engine.backends.llamacpp.cache_types import BF16, F16, decoding_types
from .peer_engine import PeerReply

SERVER_MODES = ("llama-server", "llama-server-draft", "llama-server-ngram")
BINARY_ENV = "SPECCHAT_LLAMA_SERVER"
BUILT_BINARY = Path(__file__).resolve().parents[2] / "build" / "peers" / "bin" / "llama-server"
BUILD_HINT = "build it with `make peers` in the specchat checkout, or set SPECCHAT_LLAMA_SERVER to one"
CONTEXT = 4096  # tokens of the first server's context; a longer prompt restarts it larger
NGRAM_SIZE = 3  # ngram-simple matches exactly this many tokens (our pld tries 6 down to 1)
STARTUP_S = 180.0  # loading a large GGUF from a cold disk can take a while
REQUEST_S = 900.0
STOP_S = 10.0
CACHE_TYPE_NAMES = {F16: "f16", BF16: "bf16"}  # llama-server's -ctk/-ctv names of the ggml types


def server_binary() -> Path:
    """The llama-server to run: $SPECCHAT_LLAMA_SERVER, else the one `make peers` builds, else one on PATH.
    Raises SpecchatError naming `make peers` when there is none."""
    named = os.environ.get(BINARY_ENV)
    if named:
        path = Path(named).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise SpecchatError(f"{BINARY_ENV}={named} is not an executable file; {BUILD_HINT}")
        return path
    if BUILT_BINARY.is_file():
        return BUILT_BINARY
    found = shutil.which("llama-server")
    if found:
        return Path(found)
    raise SpecchatError(f"the llama-server modes run llama.cpp's llama-server, which is not built here "
                        f"({BUILT_BINARY} is missing); {BUILD_HINT}")


def server_flags(mode: str, gguf: Path, threads: int, n_ctx: int, k: int, draft: Path | None = None,
                 repack: bool = True) -> list[str]:
    """llama-server's command-line flags (without the binary, host and port) for one of SERVER_MODES; `repack`
    False: its weights without the extra buffer types, as our runner loads them where those crash
    (engine/backends/llamacpp/extra_buffers.py)."""
    if mode not in SERVER_MODES:
        raise SpecchatError(f"unknown llama-server mode {mode!r}; choose from {', '.join(SERVER_MODES)}")
    type_k, type_v = (CACHE_TYPE_NAMES[t] for t in decoding_types(offloaded=False))  # our runner's cache, on the CPU
    flags = ["-m", str(gguf), "-t", str(threads), "-tb", str(threads), "-c", str(n_ctx), "-np", "1",
             "-fa", "on", "-ctk", type_k, "-ctv", type_v, "--no-webui"] + ([] if repack else ["--no-repack"])
    if mode == "llama-server-draft":
        if draft is None:
            raise SpecchatError("the llama-server-draft mode needs a GGUF draft model: load a pair whose draft is a "
                                "GGUF file, or give --peer-draft PATH")
        flags += ["-md", str(draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(k),
                  "--spec-draft-n-min", "0", "-td", str(threads), "-tbd", str(threads), "-ctkd", type_k,
                  "-ctvd", type_v]
    elif mode == "llama-server-ngram":
        flags += ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", str(NGRAM_SIZE),
                  "--spec-ngram-simple-size-m", str(k)]
    return flags


def bench_peer(mode: str, pair, k: int, peer_draft: str | Path | None = None) -> "LlamaServerPeer":
    """The peer for one of SERVER_MODES on a loaded ModelPair: the target's GGUF file, our runner's threads, and for
    llama-server-draft the GGUF draft (peer_draft, else the pair's draft's file). Raises SpecchatError when the
    target (or draft) is not a GGUF file or the binary is missing."""
    gguf = pair.target.gguf_path()
    if gguf is None:
        raise SpecchatError(f"the {mode} mode runs llama-server on the target's GGUF file; {pair.target.name} is "
                            "not one")
    draft = None
    if mode == "llama-server-draft":
        draft = Path(peer_draft) if peer_draft else pair.draft.gguf_path() if pair.draft is not None else None
        if draft is None:
            which = f"the draft {pair.draft.name} is not a GGUF file" if pair.draft is not None else "no draft"
            raise SpecchatError(f"the llama-server-draft mode needs a GGUF draft model ({which}); give "
                                "--peer-draft PATH")
    native = pair.target.native
    threads = native.threads if native is not None else default_threads()
    return LlamaServerPeer(mode, gguf, pair.target.eos_token_ids(), threads, k, draft)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _die_with_parent() -> None:
    """Linux: the server gets SIGTERM when this process dies, even by SIGKILL (no orphaned servers)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class LlamaServerPeer:
    """One llama-server process for one mode; `generate` sends a prompt's token ids and reads the reply's back."""

    def __init__(self, mode: str, gguf: Path, end_tokens: set[int], threads: int, k: int,
                 draft: Path | None = None, startup_s: float = STARTUP_S, request_s: float = REQUEST_S):
        self.binary = server_binary()
        if not Path(gguf).is_file():
            raise SpecchatError(f"the {mode} mode needs the target's GGUF file; {gguf} does not exist")
        if draft is not None and not Path(draft).is_file():
            raise SpecchatError(f"the draft GGUF file {draft} does not exist")
        self.mode, self.gguf, self.threads, self.k, self.draft = mode, Path(gguf), threads, k, draft
        # llama.cpp's default layout (repacked), unless the extra buffer types crash in this llama_cpp's build (AMX):
        # read from llama-cpp-python's build, not the binary's (`make peers` builds it without AMX)
        self.repack = extra_buffers_usable_here()
        server_flags(mode, self.gguf, threads, CONTEXT, k, draft, self.repack)  # bad arguments fail before starting
        self.end_tokens = set(end_tokens)
        self.startup_s, self.request_s = startup_s, request_s
        self.n_ctx = CONTEXT
        self.process: subprocess.Popen | None = None
        self.port = 0
        self._folder = Path(tempfile.mkdtemp(prefix="specchat-llama-server-"))
        self._log = None
        atexit.register(self.close)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Starts the server and waits (at most startup_s) until its /health says ready; SpecchatError with the end
        of its log if it exits first or never gets ready."""
        self.stop()
        self.port = _free_port()
        self._log = open(self._folder / "server.log", "w+b")
        command = [str(self.binary), "--host", "127.0.0.1", "--port", str(self.port),
                   *server_flags(self.mode, self.gguf, self.threads, self.n_ctx, self.k, self.draft, self.repack)]
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                        preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                self.stop()
                raise SpecchatError(f"llama-server ({self.mode}) exited with code {code} before it was ready:\n"
                                    f"{self.log_tail()}")
            if self._healthy():
                return
            time.sleep(0.1)
        self.stop()
        raise SpecchatError(f"llama-server ({self.mode}) was not ready within {self.startup_s:.0f} s:\n"
                            f"{self.log_tail()}")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2.0) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False  # not listening yet, or 503 while the model loads

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of the server's output (it writes its errors there)."""
        try:
            text = (self._folder / "server.log").read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(no output)"

    def generate(self, prompt_ids: list[int], max_new_tokens: int) -> PeerReply:
        """Greedy reply token ids (with the end token, if reached), the wall time around the request and the
        server's draft counters. The server is (re)started with a context that fits the prompt and the reply."""
        needed = len(prompt_ids) + max_new_tokens + self.k + 8
        if needed > self.n_ctx:
            self.n_ctx = -(-needed // 1024) * 1024
            self.stop()
        if self.process is None:
            self.start()
        body = {"prompt": list(map(int, prompt_ids)), "n_predict": max_new_tokens, "temperature": 0.0,
                "top_k": 1, "top_p": 1.0, "min_p": 0.0, "repeat_penalty": 1.0, "seed": 0,
                "cache_prompt": True, "return_tokens": True, "stream": False}
        started = time.perf_counter()
        reply = self._post("/completion", body)
        wall = time.perf_counter() - started
        tokens = [int(t) for t in reply.get("tokens") or []][:max_new_tokens]
        for i, token in enumerate(tokens):
            if token in self.end_tokens:  # the server stops at every end-of-generation token its GGUF names
                tokens = tokens[:i + 1]
                break
        timings = reply.get("timings") or {}
        if self.mode == "llama-server":
            return PeerReply(tokens, wall, None, None)
        # it leaves the counters out when it drafted nothing
        return PeerReply(tokens, wall, int(timings.get("draft_n") or 0), int(timings.get("draft_n_accepted") or 0))

    def _post(self, path: str, body: dict) -> dict:
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.request_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            detail = error.read().decode("utf-8", "replace")[:500]
            raise SpecchatError(f"llama-server ({self.mode}) refused a prompt of {len(body['prompt'])} tokens: "
                                f"HTTP {error.code} {detail}") from error
        except (urllib.error.URLError, OSError, ValueError) as error:
            died = self.process is not None and self.process.poll() is not None
            what = f"died (exit code {self.process.returncode})" if died else \
                f"gave no reply within {self.request_s:.0f} s ({error})"
            tail = self.log_tail()
            self.stop()
            raise SpecchatError(f"llama-server ({self.mode}) {what}:\n{tail}") from error

    def stop(self) -> None:
        """Ends the server: SIGTERM, then SIGKILL if it has not exited within STOP_S seconds."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_S)
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        """Stops the server and removes its log folder; safe to call more than once."""
        self.stop()
        shutil.rmtree(self._folder, ignore_errors=True)
        atexit.unregister(self.close)

    def __enter__(self) -> "LlamaServerPeer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

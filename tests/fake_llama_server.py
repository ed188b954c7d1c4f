"""A stand-in for llama.cpp's llama-server in the tests (tests/test_peer_server.py): it takes the same flags, speaks
/health and /completion on 127.0.0.1, and writes its command line and every request body, one JSON line each, to
$FAKE_LLAMA_LOG. $FAKE_LLAMA_BEHAVIOUR: ok (default), exit (exits with code 3 at once), unhealthy (/health always
503), die-on-request (exits during the first /completion). Its reply: tokens 100, 101, ... (n_predict of them),
with $FAKE_LLAMA_END (if set) as the fourth; draft counters when --spec-type is given."""

import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

BEHAVIOUR = os.environ.get("FAKE_LLAMA_BEHAVIOUR", "ok")
LOG = os.environ.get("FAKE_LLAMA_LOG")


def record(entry: dict) -> None:
    if LOG:
        with open(LOG, "a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")


def reply_tokens(n_predict: int) -> list[int]:
    tokens = [100 + i for i in range(n_predict)]
    end = os.environ.get("FAKE_LLAMA_END")
    if end and len(tokens) > 3:
        tokens[3] = int(end)
    return tokens


class Handler(BaseHTTPRequestHandler):
    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            unhealthy = BEHAVIOUR == "unhealthy"
            self._send(503 if unhealthy else 200, {"status": "loading model" if unhealthy else "ok"})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        record({"request": self.path, "body": body})
        if BEHAVIOUR == "die-on-request":
            os._exit(1)
        timings = {"prompt_n": len(body["prompt"]), "predicted_n": body["n_predict"]}
        if "--spec-type" in sys.argv:
            timings |= {"draft_n": 10, "draft_n_accepted": 7}
        self._send(200, {"tokens": reply_tokens(body["n_predict"]), "content": "", "stop_type": "limit",
                         "timings": timings})

    def log_message(self, *args):
        pass


def main() -> None:
    record({"argv": sys.argv[1:], "pid": os.getpid()})
    if BEHAVIOUR == "exit":
        print("error: failed to load model", file=sys.stderr)
        sys.exit(3)
    port = int(sys.argv[sys.argv.index("--port") + 1])
    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()

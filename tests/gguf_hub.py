"""A local Hub for GGUF downloads, on 127.0.0.1 only: GET /api/models/<repo>/revision/main lists a repository's files
(size, LFS sha256 and size, as the Hub's API gives them with blobs=true), GET /<repo>/resolve/<commit>/<file> serves
a file honouring Range, anything else is the Hub's 404. It records every request, and can misbehave on purpose:
`cut_at` closes the connection after that many bytes of the next full response (a broken network), `listed_sha256`
lists another checksum than the bytes have (a damaged file), `commit` can be any value (a hostile mirror)."""

import hashlib
import json
import re
import socket
from http.server import BaseHTTPRequestHandler
from local_http import start_server, stop_server

COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


class FakeGgufHub:
    def __init__(self):
        self.repos: dict[str, dict[str, bytes]] = {}
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        self.commit: object = COMMIT
        self.cut_at: int | None = None
        self.listed_sha256: dict[str, str] = {}  # file name -> the sha256 to list instead of the real one
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 - http.server's name
                hub.requests.append((self.path.split("?")[0], self.headers.get("Range")))
                try:
                    hub.answer(self)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away (a cancel)

        self.server, self.url = start_server(Handler)

    def answer(self, handler) -> None:
        path = handler.path.split("?")[0]
        listing = re.fullmatch(r"/api/models/(.+?)/revision/main", path)
        resolve = re.fullmatch(r"/(.+?/.+?)/resolve/([^/]+)/(.+)", path)
        if listing and listing[1] in self.repos:
            siblings = [self._sibling(name, content) for name, content in self.repos[listing[1]].items()]
            body = json.dumps({"id": listing[1], "sha": self.commit, "siblings": siblings}).encode()
            self._send(handler, 200, body, {"Content-Type": "application/json"})
        elif resolve and resolve[2] == self.commit and resolve[3] in self.repos.get(resolve[1], {}):
            self._send_file(handler, self.repos[resolve[1]][resolve[3]])
        else:
            self._send(handler, 404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"})

    def _sibling(self, name: str, content: bytes) -> dict:
        sha256 = self.listed_sha256.get(name, hashlib.sha256(content).hexdigest())
        return {"rfilename": name, "size": len(content), "blobId": hashlib.sha1(content).hexdigest(),
                "lfs": {"sha256": sha256, "size": len(content), "pointerSize": 134}}

    @staticmethod
    def _send(handler, status: int, body: bytes, headers: dict) -> None:
        handler.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(body)

    def _send_file(self, handler, content: bytes) -> None:
        wanted = handler.headers.get("Range")
        start = int(re.fullmatch(r"bytes=(\d+)-", wanted)[1]) if wanted else 0
        handler.send_response(206 if start else 200)
        if start:
            handler.send_header("Content-Range", f"bytes {start}-{len(content) - 1}/{len(content)}")
        handler.send_header("Content-Length", str(len(content) - start))
        handler.end_headers()
        cut, self.cut_at = self.cut_at, None
        if cut is not None and not start:  # the connection breaks mid-file
            handler.wfile.write(content[:cut])
            handler.wfile.flush()
            handler.close_connection = True
            handler.connection.shutdown(socket.SHUT_RDWR)
            return
        handler.wfile.write(content[start:])

    def resolve_requests(self) -> list[tuple[str, str | None]]:
        return [(path, byte_range) for path, byte_range in self.requests if "/resolve/" in path]

    def close(self) -> None:
        stop_server(self.server)

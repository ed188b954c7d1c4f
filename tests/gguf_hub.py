"""A local Hub for GGUF downloads, on 127.0.0.1 only: GET /api/models/<repo>/revision/main lists a repository's files
(size, LFS sha256 and size, as the Hub's API gives them with blobs=true), GET /<repo>/resolve/<commit>/<file> serves
a file honouring Range, anything else is the Hub's 404. It records every request, and can misbehave on purpose:
`cut_at` closes the connection after that many bytes of the next full response (a broken network), `listed_sha256`
lists another checksum than the bytes have (a damaged file), `commit` can be any value (a hostile mirror)."""

import hashlib
import json
import re
import socket

from local_http import send, send_file_head, serve_get, stop_server

COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


class FakeGgufHub:
    def __init__(self):
        self.repos: dict[str, dict[str, bytes]] = {}
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        self.commit: object = COMMIT
        self.cut_at: int | None = None
        self.listed_sha256: dict[str, str] = {}  # file name -> the sha256 to list instead of the real one
        self.server, self.url = serve_get(self.answer)

    def answer(self, handler) -> None:
        path = handler.path.split("?")[0]
        self.requests.append((path, handler.headers.get("Range")))
        listing = re.fullmatch(r"/api/models/(.+?)/revision/main", path)
        resolve = re.fullmatch(r"/(.+?/.+?)/resolve/([^/]+)/(.+)", path)
        if listing and listing[1] in self.repos:
            siblings = [self._sibling(name, content) for name, content in self.repos[listing[1]].items()]
            body = json.dumps({"id": listing[1], "sha": self.commit, "siblings": siblings}).encode()
            send(handler, 200, body, {"Content-Type": "application/json"})
        elif resolve and resolve[2] == self.commit and resolve[3] in self.repos.get(resolve[1], {}):
            self._send_file(handler, self.repos[resolve[1]][resolve[3]])
        else:
            send(handler, 404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"})

    def _sibling(self, name: str, content: bytes) -> dict:
        sha256 = self.listed_sha256.get(name, hashlib.sha256(content).hexdigest())
        return {"rfilename": name, "size": len(content), "blobId": hashlib.sha1(content).hexdigest(),
                "lfs": {"sha256": sha256, "size": len(content), "pointerSize": 134}}

    def _send_file(self, handler, content: bytes) -> None:
        start = send_file_head(handler, content)
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

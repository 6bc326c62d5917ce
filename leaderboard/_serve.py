"""Serve a page folder over http on loopback, with byte ranges (Inspect's viewer reads ``.eval``
archives in ranges), for ``envsuite leaderboard --html DIR --serve``."""

from __future__ import annotations

import functools
import os
import re
import shutil
import threading
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class RangeRequestHandler(SimpleHTTPRequestHandler):
    """``SimpleHTTPRequestHandler`` plus single ``Range: bytes=a-b`` requests, quietly."""

    _remaining: int | None = None

    def send_head(self) -> BinaryIO | None:
        self._remaining = None
        match = _RANGE.match(self.headers.get("Range", "").strip())
        path = self.translate_path(self.path)
        if match is None or not os.path.isfile(path):
            return super().send_head()
        size = os.path.getsize(path)
        first, last = match.group(1), match.group(2)
        start = int(first) if first else max(0, size - int(last or 0))
        end = min(int(last), size - 1) if first and last else size - 1
        if start >= size or start > end:
            self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            self.send_header("Content-Range", f"bytes */{size}")
            self.end_headers()
            return None
        handle = open(path, "rb")  # noqa: SIM115  (the base class closes it after copyfile)
        handle.seek(start)
        self._remaining = end - start + 1
        self.send_response(HTTPStatus.PARTIAL_CONTENT)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(self._remaining))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        return handle

    def copyfile(self, source: BinaryIO, outputfile: BinaryIO) -> None:  # type: ignore[override]
        if self._remaining is None:
            shutil.copyfileobj(source, outputfile)
            return
        left = self._remaining
        while left > 0:
            chunk = source.read(min(left, 1 << 16))
            if not chunk:
                break
            outputfile.write(chunk)
            left -= len(chunk)

    def log_message(self, format: str, *args: object) -> None:
        pass


def start_server(directory: str | os.PathLike[str], port: int = 0) -> ThreadingHTTPServer:
    """Serve ``directory`` on 127.0.0.1 (``port=0``: any free port) from a daemon thread."""
    handler = functools.partial(RangeRequestHandler, directory=str(Path(directory)))
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, name="leaderboard-http", daemon=True).start()
    return server

"""Misbehaving servers on 127.0.0.1 for timeout tests (a thread each, no S3 behind them).

- ``SilentServer``: accepts connections and never answers.
- ``StallingServer``: answers every GET with the headers and first bytes of a
  big object, then stalls ("stall"), trickles a byte now and then ("trickle"),
  or sends the rest slowly but steadily ("slow").
- ``Proxy``: forwards to a real server until ``hang()``, then accepts and never
  answers (and drops the connections it had), until ``resume()``.
- ``WebServer``: a web server where S3 was expected: every request gets one status
  and an HTML page (or an empty body).

Closing a server closes every connection it holds, which ends any client
still waiting on it.
"""

from __future__ import annotations

import socket
import threading


class _Server:
    def __init__(self) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self._conns.append(conn)
            threading.Thread(target=self._serve_quietly, args=(conn,), daemon=True).start()

    def _serve_quietly(self, conn: socket.socket) -> None:
        try:
            self.serve(conn)
        except OSError:
            pass

    def serve(self, conn: socket.socket) -> None:
        self.closed.wait()

    def drop_connections(self) -> None:
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def close(self) -> None:
        self.closed.set()
        self._sock.close()
        self.drop_connections()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class SilentServer(_Server):
    """Accepts and never answers."""


def _read_request(conn: socket.socket) -> tuple[str, dict[str, str]]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            raise ConnectionError("client went away")
        buf += data
    head = buf.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    headers = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return head[0].split(" ", 1)[0], headers


class StallingServer(_Server):
    """Every GET: 200 with ``size`` bytes announced, ``first`` bytes sent, then per ``mode``."""

    def __init__(self, mode: str, size: int = 8 << 20, first: int = 64 << 10,
                 interval: float = 0.2, step: int = 1):
        self.mode, self.size, self.first, self.interval, self.step = mode, size, first, interval, step
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        # "slow" completes each body, so it serves the next request on the same
        # connection as any HTTP/1.1 server would: a client reuses a pooled one
        while self._answer(conn, *_read_request(conn)) and self.mode == "slow":
            pass
        self.closed.wait()

    def _answer(self, conn: socket.socket, method: str, headers: dict[str, str]) -> bool:
        """Answer one request; True if its whole body was sent."""
        size = self.size
        status = "200 OK"
        extra = ""
        if "range" in headers:  # bytes=a-b
            a, _, b = headers["range"].split("=", 1)[1].partition("-")
            lo, hi = int(a), min(int(b) if b else size - 1, size - 1)
            status, extra = "206 Partial Content", f"Content-Range: bytes {lo}-{hi}/{size}\r\n"
            size = hi - lo + 1
        conn.sendall((f"HTTP/1.1 {status}\r\nContent-Length: {size}\r\nETag: \"0123\"\r\n"
                      f"Content-Type: application/octet-stream\r\n{extra}\r\n").encode())
        if method == "HEAD":
            return False
        sent = min(self.first, size)
        conn.sendall(b"x" * sent)
        if self.mode == "stall":
            return False
        while sent < size and not self.closed.wait(self.interval):
            n = min(self.step, size - sent)
            conn.sendall(b"x" * n)
            sent += n
        return sent == size


class WebServer(_Server):
    """Answers every request with ``status`` and a page (``page=False``: no body)."""

    def __init__(self, status: int, page: bool = True):
        self.status, self.page = status, page
        super().__init__()

    def serve(self, conn: socket.socket) -> None:
        while True:
            method, headers = _read_request(conn)
            if headers.get("expect", "").lower() == "100-continue":
                conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")  # else the client waits 1 s to send
            todo = int(headers.get("content-length") or 0)
            while todo > 0:  # the request's body, before the answer
                data = conn.recv(min(todo, 1 << 16))
                if not data:
                    return
                todo -= len(data)
            body = b"<!DOCTYPE html><html><body>It works!</body></html>" if self.page else b""
            kind = "Content-Type: text/html\r\n" if self.page else ""
            conn.sendall(f"HTTP/1.1 {self.status} Whatever\r\nContent-Length: {len(body)}\r\n"
                         f"{kind}\r\n".encode() + (b"" if method == "HEAD" else body))


class Proxy(_Server):
    """TCP forwarder to ``target`` (host, port) that can be made to hang."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.hanging = threading.Event()
        super().__init__()

    def hang(self) -> None:
        self.hanging.set()
        self.drop_connections()  # pooled keep-alive connections must not bypass the hang

    def resume(self) -> None:
        self.hanging.clear()

    def serve(self, conn: socket.socket) -> None:
        if self.hanging.is_set():
            return self.closed.wait()
        up = socket.create_connection(self.target)
        try:
            t = threading.Thread(target=_pump, args=(up, conn), daemon=True)
            t.start()
            _pump(conn, up)
            t.join()
        finally:
            up.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            data = src.recv(1 << 16)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

"""A cap on a request's head (request line and headers) before uvicorn's httptools parser
builds it.

httptools joins a header value with `bytes +=` as its pieces arrive, so one anonymous
connection sending a never-ending header costs the event loop time that grows with the square
of its length: 200 MB of one header stalled every other request of the server for 28.6 s (the
adversarial pass at 7468bff, B1); h11, which uvicorn uses without httptools, caps a head at
16 KB. `HeadCappedProtocol` is uvicorn's httptools protocol that counts the bytes of the head
being read and answers 431 and closes the connection past MAX_HEAD_BYTES, so the parser never
holds more than that: the bytes of a head are counted before the parser sees them (up to the
blank line that ends it, found across reads), so a complete 100 KB head arriving in one read
is refused as a never-ending one is (the re-test at 9e12e10 had 70-150 KB heads answered).
A head must also finish within HEAD_TIMEOUT_S of its first byte (408 and closed): the re-test
held 50 connections open for 10 s at one byte per half second, none ever closed, each holding a
file descriptor; the clock starts at a head's first byte, so an idle keep-alive connection
(uvicorn closes those after 5 s) and a long streamed answer are not cut.
"""

from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)
MAX_HEAD_BYTES = 64 * 1024  # a request line and headers, cookies included; h11's default is 16 KB
HEAD_END = b"\r\n\r\n"  # the blank line after the last header
HEAD_TIMEOUT_S = 20.0  # nginx waits 60 s per read of a head; 20 s for a whole one is generous
TOO_LARGE = "The request's headers are larger than this server accepts (64 KB)."
TOO_SLOW = "The request's headers did not arrive in time; send them again."


class HeadCappedProtocol(HttpToolsProtocol):
    """uvicorn's httptools HTTP/1.1 protocol with the head of each request capped in size and
    in time."""

    head_timeout_s = HEAD_TIMEOUT_S

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        self._start_head()
        super().connection_made(transport)

    def _start_head(self) -> None:
        self._head_bytes = 0
        self._tail = b""  # the last bytes of the head so far: its end may span two reads
        self._reading_head = True
        self._head_deadline: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        if self._reading_head:
            if self._head_deadline is None:  # a head's first byte starts its clock
                self._head_deadline = self.loop.call_later(self.head_timeout_s, self._head_late)
            seen = self._tail + data
            end = seen.find(HEAD_END)
            self._head_bytes += len(data) if end < 0 else max(0, end + 4 - len(self._tail))
            self._tail = seen[-3:]
            if self._head_bytes > MAX_HEAD_BYTES:
                log.warning("request head over %d bytes refused", MAX_HEAD_BYTES)
                self._refuse_head(b"431 Request Header Fields Too Large", TOO_LARGE)
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._stop_head_clock()
        self._reading_head = False  # the body is capped per route (api/body_cap.py)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._start_head()  # the next request on this connection

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_clock()
        super().connection_lost(exc)

    def _stop_head_clock(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_late(self) -> None:
        self._head_deadline = None
        if self._reading_head and not self.transport.is_closing():
            log.warning("request head not finished in %.0f s refused", self.head_timeout_s)
            self._refuse_head(b"408 Request Timeout", TOO_SLOW)

    def _refuse_head(self, status: bytes, message: str) -> None:
        self._stop_head_clock()
        body = message.encode("ascii")
        self.transport.write(
            b"HTTP/1.1 " + status + b"\r\n"
            b"content-type: text/plain; charset=utf-8\r\n"
            + b"content-length: "
            + str(len(body)).encode("ascii")
            + b"\r\nconnection: close\r\n\r\n"
            + body
        )
        self.transport.close()
        self._reading_head = False

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
"""

from __future__ import annotations

import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)
MAX_HEAD_BYTES = 64 * 1024  # a request line and headers, cookies included; h11's default is 16 KB
HEAD_END = b"\r\n\r\n"  # the blank line after the last header
TOO_LARGE = "The request's headers are larger than this server accepts (64 KB)."


class HeadCappedProtocol(HttpToolsProtocol):
    """uvicorn's httptools HTTP/1.1 protocol with the head of each request capped."""

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        self._start_head()
        super().connection_made(transport)

    def _start_head(self) -> None:
        self._head_bytes = 0
        self._tail = b""  # the last bytes of the head so far: its end may span two reads
        self._reading_head = True

    def data_received(self, data: bytes) -> None:
        if self._reading_head:
            seen = self._tail + data
            end = seen.find(HEAD_END)
            self._head_bytes += len(data) if end < 0 else max(0, end + 4 - len(self._tail))
            self._tail = seen[-3:]
            if self._head_bytes > MAX_HEAD_BYTES:
                log.warning("request head over %d bytes refused", MAX_HEAD_BYTES)
                self._refuse_head()
                return
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._reading_head = False  # the body is capped per route (api/body_cap.py)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._start_head()  # the next request on this connection

    def _refuse_head(self) -> None:
        body = TOO_LARGE.encode("ascii")
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: text/plain; charset=utf-8\r\n"
            + b"content-length: "
            + str(len(body)).encode("ascii")
            + b"\r\nconnection: close\r\n\r\n"
            + body
        )
        self.transport.close()
        self._reading_head = False

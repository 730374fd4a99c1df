"""The one capped request-body reader (access/capped_body.py) that the /api/v1 body cap, the
upload route and the Gradio queue guard share."""

from __future__ import annotations

import asyncio

import pytest

from medheb_app.access.capped_body import ClientGone, declared_length, read_capped, replaying


def _receiver(*messages: dict):
    """A receive that hands out `messages` in order and counts how many were taken."""
    queue = list(messages)
    taken = []

    async def receive() -> dict:
        taken.append(queue[0])
        return queue.pop(0)

    return receive, taken


def _chunk(body: bytes, more: bool) -> dict:
    return {"type": "http.request", "body": body, "more_body": more}


def test_a_body_within_the_cap_comes_back_whole() -> None:
    receive, _ = _receiver(_chunk(b"abc", True), _chunk(b"de", False))
    assert asyncio.run(read_capped(receive, 5, cap=5)) == b"abcde"


def test_a_declared_length_past_the_cap_is_refused_before_any_read() -> None:
    receive, taken = _receiver(_chunk(b"x", False))
    assert asyncio.run(read_capped(receive, 6, cap=5)) is None
    assert taken == []


def test_a_streamed_body_past_the_cap_is_refused_at_the_chunk_that_passes_it() -> None:
    receive, taken = _receiver(_chunk(b"abc", True), _chunk(b"def", True), _chunk(b"g", False))
    assert asyncio.run(read_capped(receive, None, cap=5)) is None
    assert len(taken) == 2  # the third chunk is never read


def test_a_client_that_goes_away_raises_client_gone() -> None:
    receive, _ = _receiver(_chunk(b"abc", True), {"type": "http.disconnect"})
    with pytest.raises(ClientGone):
        asyncio.run(read_capped(receive, None, cap=5))


def test_the_declared_length_is_read_from_the_headers() -> None:
    assert declared_length({"headers": [(b"content-length", b"42")]}) == 42
    assert declared_length({"headers": [(b"content-length", b"-1")]}) is None
    assert declared_length({"headers": []}) is None


def test_the_replay_hands_the_body_once_then_defers() -> None:
    receive, _ = _receiver({"type": "http.disconnect"})
    replay = replaying(b"body", receive)

    async def two() -> list[dict]:
        return [await replay(), await replay()]

    first, second = asyncio.run(two())
    assert first == {"type": "http.request", "body": b"body", "more_body": False}
    assert second == {"type": "http.disconnect"}

"""Rate limits with lockout: the clock is injected, so no test sleeps."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from medheb_app.access.limits import RateLimiter, client_key, wait_words


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_five_attempts_then_a_lockout_with_a_message():
    clock = Clock()
    limiter = RateLimiter(max_events=5, window_s=60, lockout_s=300, clock=clock)
    assert all(limiter.hit("1.2.3.4").allowed for _ in range(5))
    refused = limiter.hit("1.2.3.4")
    assert not refused.allowed and refused.retry_after == 300
    assert refused.message("sign-in attempts") == (
        "Too many sign-in attempts from this browser; try again in 5 minutes."
    )
    clock.now += 299
    assert not limiter.hit("1.2.3.4").allowed  # still locked, and not extended
    clock.now += 2
    assert limiter.hit("1.2.3.4").allowed
    assert limiter.hit("5.6.7.8").allowed  # other clients are not affected


def test_two_hundred_guesses_in_thirty_seconds_get_five_through():
    clock = Clock()
    limiter = RateLimiter(max_events=5, window_s=60, lockout_s=900, clock=clock)
    allowed = 0
    for _ in range(200):
        allowed += limiter.hit("attacker").allowed
        clock.now += 0.15
    assert allowed == 5


def test_without_lockout_the_window_slides():
    clock = Clock()
    limiter = RateLimiter(max_events=2, window_s=10, clock=clock)
    assert limiter.hit("k").allowed and limiter.hit("k").allowed
    refused = limiter.hit("k")
    assert not refused.allowed and refused.retry_after == pytest.approx(10)
    clock.now += 10.01
    assert limiter.hit("k").allowed


def test_reset_forgets_a_client_and_memory_stays_bounded():
    clock = Clock()
    limiter = RateLimiter(max_events=1, window_s=10, lockout_s=60, clock=clock, max_keys=50)
    limiter.hit("k")
    assert not limiter.hit("k").allowed
    limiter.reset("k")
    assert limiter.hit("k").allowed
    for i in range(500):
        limiter.hit(f"client-{i}")
    assert len(limiter._events) <= 50


def test_wait_words_round_up():
    assert wait_words(0.2) == "1 second"
    assert wait_words(40) == "40 seconds"
    assert wait_words(61) == "2 minutes"
    assert wait_words(60) == "1 minute"


def _forwarded(*entries: str, peer: str = "10.9.9.9") -> SimpleNamespace:
    headers = {"x-forwarded-for": ", ".join(entries)} if entries else {}
    return SimpleNamespace(headers=headers, client=SimpleNamespace(host=peer))


def test_client_key_trusts_exactly_the_n_right_most_hops():
    """Issue 19 item 4: a forged entry at every position of X-Forwarded-For, for 0-3 trusted
    proxies. Behind N proxies the N-th entry from the right is the client; every entry to its
    left is the client's own writing and never counts."""
    real = ["203.0.113.7", "10.0.0.2", "10.0.0.3"]  # client, then what proxies 1..2 saw
    for hops in range(4):
        # what reaches the app behind `hops` proxies: the client's address written by the
        # outermost proxy, then one entry per inner proxy
        honest = real[: max(hops, 0)]
        expected = honest[0] if hops else "10.9.9.9"
        for n_forged in range(4):
            forged = [f"198.51.100.{i}" for i in range(n_forged)]
            assert client_key(_forwarded(*forged, *honest), hops) == expected, (hops, forged)
        # fewer entries than proxies: the request bypassed one, the peer address counts
        if hops:
            assert client_key(_forwarded(*honest[1:]), hops) == "10.9.9.9"
    assert client_key(_forwarded("1.1.1.1"), 0) == "10.9.9.9"  # no proxy: never believed
    assert client_key(None, 1) == "local"


def test_client_key_reads_repeated_headers_and_strips_ports():
    from starlette.datastructures import Headers

    headers = Headers(
        raw=[(b"x-forwarded-for", b"6.6.6.6, 7.7.7.7"), (b"x-forwarded-for", b"[2001:db8::1]:443")]
    )
    request = SimpleNamespace(headers=headers, client=SimpleNamespace(host="10.0.0.1"))
    assert client_key(request, 1) == "2001:db8::1"  # the appended line, not the forged first one
    assert client_key(request, 2) == "7.7.7.7"
    assert client_key(_forwarded("203.0.113.7:5123"), 1) == "203.0.113.7"


def test_trust_proxy_headers_is_a_count_read_once_in_settings():
    from medheb_app.settings import Settings, parse_proxy_hops

    assert [parse_proxy_hops(v) for v in ("", "0", "false", "1", "true", "yes", "2")] == [
        0, 0, 0, 1, 1, 1, 2,
    ]  # fmt: skip
    for bad in ("-1", "17", "all", "1.5"):
        with pytest.raises(ValueError, match="TRUST_PROXY_HEADERS"):
            parse_proxy_hops(bad)
    assert Settings().trusted_proxy_hops == 0

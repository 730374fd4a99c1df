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


def test_client_key_ignores_forwarded_headers_unless_trusted(monkeypatch):
    request = SimpleNamespace(
        headers={"x-forwarded-for": "9.9.9.9, 10.0.0.1"}, client=SimpleNamespace(host="127.0.0.1")
    )
    monkeypatch.delenv("TRUST_PROXY_HEADERS", raising=False)
    assert client_key(request) == "127.0.0.1"
    monkeypatch.setenv("TRUST_PROXY_HEADERS", "1")
    assert client_key(request) == "9.9.9.9"
    assert client_key(None) == "local"

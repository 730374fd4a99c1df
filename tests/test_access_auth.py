"""Signed cookies and the ADMIN_USERS check, in-process (the served routes are tested in
tests/test_web_security.py).

Gradio's local OAuth mock calls huggingface_hub.whoami(), which needs the network and a token,
and off a Space Gradio signs its session with a fixed public key; so the Hugging Face path is
tested here with a fake OAuth profile placed in the request's session, as Gradio's
SessionMiddleware would on a Space, and it is shown to be off everywhere else.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

from medheb_app.access.auth import (
    ADMIN_COOKIE,
    RATER_COOKIE,
    Authenticator,
    RaterClaim,
    Sealer,
    load_secret,
    oauth_available,
)

SECRET = b"x" * 32


def _request(cookies=None, session=None):
    """What gr.Request wraps: a Starlette request with cookies and an ASGI scope."""
    scope = {"type": "http"}
    if session is not None:
        scope["session"] = session
    return SimpleNamespace(request=SimpleNamespace(cookies=cookies or {}, scope=scope))


def _profile(name: str, expires_in: float = 3600) -> dict:
    return {
        "oauth_info": {
            "userinfo": {"preferred_username": name},
            "expires_at": time.time() + expires_in,
        }
    }


def test_sealed_claims_refuse_tampering_expiry_and_the_wrong_purpose():
    clock = [1000.0]
    sealer = Sealer(SECRET, clock=lambda: clock[0])
    value = sealer.seal({"sid": "abc"}, "admin")
    assert sealer.unseal(value, "admin", 60) == {"sid": "abc"}
    flipped = value[:10] + ("A" if value[10] != "A" else "B") + value[11:]
    assert sealer.unseal(flipped, "admin", 60) is None
    assert sealer.unseal(value, "rater", 60) is None  # an admin cookie is no rater cookie
    assert Sealer(b"y" * 32).unseal(value, "admin", 60) is None  # another server's key
    assert sealer.unseal("not base64 !", "admin", 60) is None
    clock[0] += 61
    assert sealer.unseal(value, "admin", 60) is None


def test_the_rater_cookie_is_opaque():
    """Issue 18: the cookie was readable base64 JSON holding the rater id (which, with the
    public code and a default seed, predicted which side each model was on)."""
    import base64

    auth = Authenticator(SECRET)
    claim = RaterClaim(3, 741, "resume-secret-value")
    cookie = auth.rater_cookie(claim)
    raw = base64.urlsafe_b64decode(cookie + "=" * (-len(cookie) % 4))
    for readable in (b"741", b"rater", b"resume-secret-value", b"study", b'{"c"'):
        assert readable not in raw
    assert cookie != auth.rater_cookie(claim)  # a fresh nonce and session each time


def test_admin_cookie_is_revoked_by_sign_out():
    auth = Authenticator(SECRET)
    cookie = auth.admin_cookie()
    request = _request({ADMIN_COOKIE: cookie})
    assert auth.is_admin(request) and not auth.is_admin(_request())
    auth.sign_out(request)
    assert not auth.is_admin(request)
    assert not auth.is_admin(_request({ADMIN_COOKIE: auth.admin_cookie()[:-3]}))


def test_rater_claim_round_trip_forgery_and_sign_out():
    auth = Authenticator(SECRET)
    claim = RaterClaim(3, 7, "resume-secret")
    request = _request({RATER_COOKIE: auth.rater_cookie(claim)})
    assert auth.rater(request) == claim and auth.rater_state(request) == "active"
    forged = Authenticator(b"z" * 32).rater_cookie(RaterClaim(3, 8, "guess"))
    assert auth.rater(_request({RATER_COOKIE: forged})) is None
    assert auth.rater_state(_request({RATER_COOKIE: forged})) == "unknown"
    assert auth.rater_state(_request()) == "none"
    auth.sign_out(request)
    assert auth.rater(request) is None and auth.rater_state(request) == "signed out"
    # the admin cookie's sealed session cannot stand in for a rater's
    admin_as_rater = _request({RATER_COOKIE: auth.admin_cookie()})
    assert auth.rater(admin_as_rater) is None


def test_admin_users_are_admins_through_hugging_face_on_a_space_only():
    on_space = Authenticator(SECRET, admin_users=("alice",), oauth=True)
    assert on_space.is_admin(_request(session=_profile("alice")))
    assert not on_space.is_admin(_request(session=_profile("mallory")))
    assert not on_space.is_admin(_request(session=_profile("alice", expires_in=-1)))
    assert not on_space.is_admin(_request(session={}))
    off_space = Authenticator(SECRET, admin_users=("alice",), oauth=False)
    assert not off_space.is_admin(_request(session=_profile("alice")))  # forgeable off a Space
    space = {
        "SYSTEM": "spaces",
        "SPACE_ID": "u/app",
        "OAUTH_CLIENT_ID": "i",
        "OAUTH_CLIENT_SECRET": "s",
        "OAUTH_SCOPES": "openid",
        "OPENID_PROVIDER_URL": "https://huggingface.co",
    }
    assert oauth_available(space)
    # SPACE_ID + a secret without the Space runtime is Gradio's mock login (issue 19)
    assert not oauth_available({"SPACE_ID": "u/app", "OAUTH_CLIENT_SECRET": "s"})
    assert not oauth_available({**space, "SYSTEM": "local"})


def test_the_session_secret_is_kept_private(tmp_path):
    first = load_secret(tmp_path)
    assert load_secret(tmp_path) == first and len(first) >= 32
    assert (tmp_path / ".session-secret").stat().st_mode & 0o077 == 0
    assert load_secret(tmp_path, "configured-secret") == b"configured-secret"


def test_an_admin_is_named_in_the_audit_by_user_or_by_sign_in_session():
    """Design note of the adversarial pass at 2e21a9a: admin actions done with the cookie were
    audited as plain `admin`, so two people sharing the password were one."""
    auth = Authenticator(SECRET)
    first, second = auth.admin_cookie(), auth.admin_cookie()
    one = auth.admin_identity(_request({ADMIN_COOKIE: first}))
    assert one.startswith("admin:session-") and len(one) == len("admin:session-") + 10
    assert one == auth.admin_identity_of_cookie(first)  # the sign-in row names the same session
    assert one != auth.admin_identity(_request({ADMIN_COOKIE: second}))
    sid = auth.sealer.unseal(first, "admin", 3600)["sid"]
    assert sid not in one  # a digest, never the session id a cookie could be rebuilt from
    assert auth.admin_identity(_request()) == "admin"
    on_space = Authenticator(SECRET, admin_users=("alice",), oauth=True)
    assert on_space.admin_identity(_request(session=_profile("alice"))) == "admin:alice"
    assert on_space.admin_identity(_request(session=_profile("mallory"))) == "admin"

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
    Signer,
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


def test_signatures_refuse_tampering_and_expiry():
    clock = [1000.0]
    signer = Signer(SECRET, clock=lambda: clock[0])
    value = signer.sign({"role": "admin"})
    assert signer.unsign(value, 60) == {"role": "admin"}
    body, mac = value.split(".")
    assert signer.unsign(body + "." + mac[:-2] + "AA", 60) is None
    assert Signer(b"y" * 32).unsign(value, 60) is None  # another server's key
    clock[0] += 61
    assert signer.unsign(value, 60) is None


def test_admin_cookie_is_revoked_by_sign_out():
    auth = Authenticator(SECRET)
    cookie = auth.admin_cookie()
    request = _request({ADMIN_COOKIE: cookie})
    assert auth.is_admin(request) and not auth.is_admin(_request())
    auth.revoke_admin(request)
    assert not auth.is_admin(request)


def test_rater_claim_round_trip_and_forgery():
    auth = Authenticator(SECRET)
    claim = RaterClaim(3, 7, "resume-secret")
    assert auth.rater(_request({RATER_COOKIE: auth.rater_cookie(claim)})) == claim
    forged = Authenticator(b"z" * 32).rater_cookie(RaterClaim(3, 8, "guess"))
    assert auth.rater(_request({RATER_COOKIE: forged})) is None


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

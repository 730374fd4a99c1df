"""Signed, HTTP-only cookies: the only credentials the web app accepts.

A Gradio session hash is chosen by the client and travels in URLs, so nothing may hang on it.
Admin and rater status live in cookies that only the server can mint (HMAC-SHA256 over the
claims with a server-side secret), that JavaScript cannot read (HttpOnly) and that the browser
sends only to this site (SameSite=Strict). Each Gradio handler re-reads them from `gr.Request`
on every call, so a second client reusing someone's session hash has no cookie and no rights.

Admin sign-ins are also recorded server-side (a random session id per sign-in), so signing out
revokes the cookie even if a copy of it was kept.

On a Hugging Face Space with OAuth (`hf_oauth: true`), users listed in ADMIN_USERS are admins
too once signed in with their Hugging Face account (Gradio's gr.LoginButton keeps the profile in
its signed session). Gradio runs the real OAuth flow only when `SYSTEM=spaces` (the Space
runtime) and the Space's OAuth variables are all set; anywhere else `/login/huggingface` is a
local mock that signs any visitor in as the owner of HF_TOKEN, with a session key derived from
a public constant. So ADMIN_USERS without the complete Space runtime is refused at start
(`check_oauth_setting`), never silently ignored and never served through the mock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ADMIN_COOKIE = "medheb_admin"
RATER_COOKIE = "medheb_rater"
# Behind HTTPS the cookies are named with the __Host- prefix: browsers then accept them only
# with Secure, Path=/ and no Domain, so no sibling subdomain or plain-http page can set or
# shadow them (RFC 6265bis, "cookie prefixes").
HOST_PREFIX = "__Host-"
ADMIN_MAX_AGE_S = 12 * 3600
RATER_MAX_AGE_S = 30 * 24 * 3600
SECRET_FILE = ".session-secret"


def load_secret(data_dir: Path, configured: str = "") -> bytes:
    """SESSION_SECRET when set, else a random secret kept in DATA_DIR (owner-only) so that
    cookies survive a restart."""
    if configured:
        return configured.encode()
    path = Path(data_dir) / SECRET_FILE
    if path.is_file():
        return path.read_bytes().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(48).encode()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as handle:
        handle.write(value)
    return value


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Signer:
    """Signs small JSON claims with a timestamp; `unsign` refuses tampered or expired values."""

    def __init__(self, secret: bytes, clock=time.time) -> None:
        if len(secret) < 16:
            raise ValueError("the session secret must be at least 16 bytes")
        self._key = hashlib.sha256(b"medheb-cookie:" + secret).digest()
        self._clock = clock

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest())

    def sign(self, claims: dict[str, Any]) -> str:
        body = _b64(json.dumps({"c": claims, "t": int(self._clock())}).encode())
        return f"{body}.{self._mac(body)}"

    def unsign(self, value: str | None, max_age_s: float) -> dict[str, Any] | None:
        if not value or value.count(".") != 1:
            return None
        body, mac = value.split(".")
        if not hmac.compare_digest(mac, self._mac(body)):
            return None
        try:
            decoded = json.loads(_unb64(body))
        except ValueError:
            return None
        if not isinstance(decoded, dict) or self._clock() - decoded.get("t", 0) > max_age_s:
            return None
        claims = decoded.get("c")
        return claims if isinstance(claims, dict) else None


def request_cookies(request: Any) -> dict[str, str]:
    """The cookies of a gr.Request (whose `.request` is Starlette's) or a Starlette request."""
    inner = getattr(request, "request", None)
    source = inner if inner is not None and hasattr(inner, "cookies") else request
    cookies = getattr(source, "cookies", None)
    return dict(cookies) if isinstance(cookies, dict) or hasattr(cookies, "items") else {}


@dataclass(frozen=True)
class RaterClaim:
    """Who a rater cookie says the browser is: a study, a rater and the rater's resume secret
    (checked against the store on every use, never shown on a page)."""

    study_id: int
    rater_id: int
    secret: str


# What Gradio 6 needs for its real Hugging Face OAuth routes (gradio.oauth.attach_oauth and
# _add_oauth_routes; gradio.utils.get_space() is SPACE_ID only when SYSTEM == "spaces").
OAUTH_VARIABLES = (
    "SPACE_ID",
    "OAUTH_CLIENT_ID",
    "OAUTH_CLIENT_SECRET",
    "OAUTH_SCOPES",
    "OPENID_PROVIDER_URL",
)


class StartupRefused(RuntimeError):
    """A configuration the server will not start with; the message tells the operator why
    and what to change (app.py prints it as one line and exits with status 2)."""


def oauth_missing(environ: Mapping[str, str] | None = None) -> list[str]:
    """What stands between this process and Gradio's real OAuth, as 'SYSTEM=spaces' and the
    names of unset variables; empty when the login would be real."""
    env = os.environ if environ is None else environ
    missing = [] if env.get("SYSTEM") == "spaces" else ["SYSTEM=spaces"]
    return missing + [name for name in OAUTH_VARIABLES if not env.get(name)]


def oauth_available(environ: Mapping[str, str] | None = None) -> bool:
    """True only in the Space runtime with its OAuth variables: the one place Gradio's
    session is signed with a real secret and `/login/huggingface` is the real login."""
    return not oauth_missing(environ)


def check_oauth_setting(
    admin_users: tuple[str, ...], environ: Mapping[str, str] | None = None
) -> bool:
    """Whether Hugging Face sign-in for ADMIN_USERS is on; raises StartupRefused when
    ADMIN_USERS is set where Gradio would mock the login (any visitor would become admin)."""
    if not admin_users:
        return False
    missing = oauth_missing(environ)
    if missing:
        raise StartupRefused(
            "ADMIN_USERS is set, but Hugging Face sign-in is real only on a Hugging Face Space "
            "with `hf_oauth: true` (elsewhere Gradio mocks the login and anyone would be "
            f"admin); missing here: {', '.join(missing)}. Unset ADMIN_USERS and use "
            "ADMIN_PASSWORD, or run on a Space with OAuth enabled."
        )
    return True


def oauth_username(request: Any) -> str | None:
    """The Hugging Face user name of a request's (unexpired) Gradio OAuth session, or None."""
    inner = getattr(request, "request", None) or request
    scope = getattr(inner, "scope", None)
    session = scope.get("session") if isinstance(scope, dict) else None
    if not isinstance(session, dict):
        return None
    from gradio.oauth import _get_valid_oauth_info_from_session

    info = _get_valid_oauth_info_from_session(session)
    user = (info or {}).get("userinfo") or {}
    name = user.get("preferred_username")
    return str(name) if name else None


class Authenticator:
    """Mints and checks the admin and rater cookies (and, on a Space, the ADMIN_USERS list)."""

    def __init__(
        self,
        secret: bytes,
        secure: bool = False,
        admin_users: tuple[str, ...] = (),
        oauth: bool = False,
    ) -> None:
        self.signer = Signer(secret)
        self.secure = secure
        prefix = HOST_PREFIX if secure else ""
        self.admin_cookie_name = prefix + ADMIN_COOKIE
        self.rater_cookie_name = prefix + RATER_COOKIE
        self.admin_users = frozenset(admin_users) if oauth else frozenset()
        self._admin_sessions: dict[str, float] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ admin
    def admin_cookie(self, who: str = "password") -> str:
        sid = secrets.token_urlsafe(24)
        with self._lock:
            self._admin_sessions[sid] = time.time() + ADMIN_MAX_AGE_S
        return self.signer.sign({"role": "admin", "sid": sid, "who": who})

    def is_admin(self, request: Any) -> bool:
        """True when the request carries a valid, not signed-out admin cookie, or (on a Space
        with OAuth) a Hugging Face session of a user in ADMIN_USERS."""
        if self.admin_users and oauth_username(request) in self.admin_users:
            return True
        claims = self.signer.unsign(
            request_cookies(request).get(self.admin_cookie_name), ADMIN_MAX_AGE_S
        )
        if not claims or claims.get("role") != "admin":
            return False
        with self._lock:
            return self._admin_sessions.get(str(claims.get("sid")), 0.0) > time.time()

    def revoke_admin(self, request: Any) -> None:
        claims = self.signer.unsign(
            request_cookies(request).get(self.admin_cookie_name), ADMIN_MAX_AGE_S
        )
        if claims:
            with self._lock:
                self._admin_sessions.pop(str(claims.get("sid")), None)

    # ------------------------------------------------------------ rater
    def rater_cookie(self, claim: RaterClaim) -> str:
        return self.signer.sign(
            {"study": claim.study_id, "rater": claim.rater_id, "secret": claim.secret}
        )

    def rater(self, request: Any) -> RaterClaim | None:
        """The rater claim of a request's cookie, or None (not checked against the store)."""
        claims = self.signer.unsign(
            request_cookies(request).get(self.rater_cookie_name), RATER_MAX_AGE_S
        )
        if not claims:
            return None
        try:
            return RaterClaim(int(claims["study"]), int(claims["rater"]), str(claims["secret"]))
        except (KeyError, TypeError, ValueError):
            return None

    # ------------------------------------------------------------ responses
    def set_cookie(self, response: Any, name: str, value: str, max_age: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            httponly=True,
            samesite="strict",
            secure=self.secure,
            path="/",
        )

    def clear_cookies(self, response: Any) -> None:
        for name in (self.admin_cookie_name, self.rater_cookie_name):
            response.delete_cookie(
                name, path="/", httponly=True, samesite="strict", secure=self.secure
            )

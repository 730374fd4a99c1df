"""Signed, HTTP-only cookies: the only credentials the web app accepts.

A Gradio session hash is chosen by the client and travels in URLs, so nothing may hang on it.
Admin and rater status live in cookies that only the server can mint (HMAC-SHA256 over the
claims with a server-side secret), that JavaScript cannot read (HttpOnly) and that the browser
sends only to this site (SameSite=Strict). Each Gradio handler re-reads them from `gr.Request`
on every call, so a second client reusing someone's session hash has no cookie and no rights.

Admin sign-ins are also recorded server-side (a random session id per sign-in), so signing out
revokes the cookie even if a copy of it was kept.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ADMIN_COOKIE = "medheb_admin"
RATER_COOKIE = "medheb_rater"
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


class Authenticator:
    """Mints and checks the admin and rater cookies."""

    def __init__(self, secret: bytes, secure: bool = False) -> None:
        self.signer = Signer(secret)
        self.secure = secure
        self._admin_sessions: dict[str, float] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ admin
    def admin_cookie(self, who: str = "password") -> str:
        sid = secrets.token_urlsafe(24)
        with self._lock:
            self._admin_sessions[sid] = time.time() + ADMIN_MAX_AGE_S
        return self.signer.sign({"role": "admin", "sid": sid, "who": who})

    def is_admin(self, request: Any) -> bool:
        """True only when the request carries a valid, not signed-out admin cookie."""
        claims = self.signer.unsign(request_cookies(request).get(ADMIN_COOKIE), ADMIN_MAX_AGE_S)
        if not claims or claims.get("role") != "admin":
            return False
        with self._lock:
            return self._admin_sessions.get(str(claims.get("sid")), 0.0) > time.time()

    def revoke_admin(self, request: Any) -> None:
        claims = self.signer.unsign(request_cookies(request).get(ADMIN_COOKIE), ADMIN_MAX_AGE_S)
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
        claims = self.signer.unsign(request_cookies(request).get(RATER_COOKIE), RATER_MAX_AGE_S)
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
        for name in (ADMIN_COOKIE, RATER_COOKIE):
            response.delete_cookie(name, path="/", httponly=True, samesite="strict")

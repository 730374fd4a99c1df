"""Sealed, HTTP-only cookies backed by server-side sessions: the only credentials the web app
accepts.

A Gradio session hash is chosen by the client and travels in URLs, so nothing may hang on it.
Admin and rater status live in cookies that only the server can mint and read (AES-256-GCM
under a key derived from the session secret: the rater id inside is not readable, a changed
byte is refused), that JavaScript cannot read (HttpOnly) and that the browser sends only to
this site (SameSite=Strict; medheb_app.access.origin closes the same-site gap). Each cookie
names a random session recorded in the database (medheb_app.access.sessions), and each Gradio
handler re-reads the cookie from `gr.Request` and looks its session up on every call: a second
client reusing someone's session hash has no cookie and no rights, and a signed-out cookie,
replayed on any replica, has none either.

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
import json
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from medheb_app.access.sessions import ACTIVE, MemorySessions, SessionRecord

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
    cookies survive a restart. Two processes starting at once on one DATA_DIR agree on one
    secret: the file appears whole or not at all (written aside, then hard-linked into place),
    and the one that loses the race reads the winner's."""
    if configured:
        return configured.encode()
    path = Path(data_dir) / SECRET_FILE
    if path.is_file():
        return path.read_bytes().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_urlsafe(48).encode()
    aside = path.with_name(f"{SECRET_FILE}.{secrets.token_hex(8)}")
    descriptor = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(value)
            handle.flush()
            os.fsync(handle.fileno())
        os.link(aside, path)
    except FileExistsError:
        return path.read_bytes().strip()
    finally:
        aside.unlink(missing_ok=True)
    return value


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


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


def session_name(sid: str) -> str:
    """An admin session's name in the audit log: a digest of its id, never the id itself."""
    return "admin:session-" + hashlib.sha256(sid.encode()).hexdigest()[:10]


class Sealer:
    """Seals small JSON claims with AES-256-GCM under a key derived from the session secret:
    the cookie is opaque (nobody without the key reads the rater id in it) and tamper-proof
    (a changed byte fails authentication). `purpose` is bound as associated data, so an admin
    cookie can never be unsealed as a rater cookie or the other way round."""

    def __init__(self, secret: bytes, clock=time.time) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if len(secret) < 16:
            raise ValueError("the session secret must be at least 16 bytes")
        self._aead = AESGCM(hashlib.sha256(b"medheb-cookie-aead:" + secret).digest())
        self._clock = clock

    def seal(self, claims: dict[str, Any], purpose: str) -> str:
        nonce = secrets.token_bytes(12)
        body = json.dumps({"c": claims, "t": int(self._clock())}).encode()
        return _b64(nonce + self._aead.encrypt(nonce, body, purpose.encode()))

    def unseal(self, value: str | None, purpose: str, max_age_s: float) -> dict[str, Any] | None:
        from cryptography.exceptions import InvalidTag

        if not value or len(value) > 4096:
            return None
        try:
            raw = _unb64(value)
            decoded = json.loads(self._aead.decrypt(raw[:12], raw[12:], purpose.encode()))
        except (InvalidTag, ValueError, TypeError):
            return None
        if not isinstance(decoded, dict) or self._clock() - decoded.get("t", 0) > max_age_s:
            return None
        claims = decoded.get("c")
        return claims if isinstance(claims, dict) else None


class Authenticator:
    """Mints and checks the admin and rater cookies (and, on a Space, the ADMIN_USERS list).

    A cookie is a sealed (encrypted and authenticated) session id plus, for raters, the claim
    the study layer checks; every use also looks the session id up in `sessions` (the database
    when served: medheb_app.access.sessions.StoreSessions), so sign-out ends a kept copy of the
    cookie on every replica, and sign-ins survive a restart."""

    def __init__(
        self,
        secret: bytes,
        secure: bool = False,
        admin_users: tuple[str, ...] = (),
        oauth: bool = False,
        sessions: Any = None,
    ) -> None:
        self.sealer = Sealer(secret)
        self.sessions = sessions if sessions is not None else MemorySessions()
        self.secure = secure
        prefix = HOST_PREFIX if secure else ""
        self.admin_cookie_name = prefix + ADMIN_COOKIE
        self.rater_cookie_name = prefix + RATER_COOKIE
        self.admin_users = frozenset(admin_users) if oauth else frozenset()

    def _claims(self, request: Any, kind: str) -> dict[str, Any] | None:
        name, max_age = (
            (self.admin_cookie_name, ADMIN_MAX_AGE_S)
            if kind == "admin"
            else (self.rater_cookie_name, RATER_MAX_AGE_S)
        )
        claims = self.sealer.unseal(request_cookies(request).get(name), kind, max_age)
        return claims if claims and isinstance(claims.get("sid"), str) else None

    # ------------------------------------------------------------ admin
    def admin_cookie(self, who: str = "password") -> str:
        sid = secrets.token_urlsafe(32)
        self.sessions.create(sid, SessionRecord("admin", who=who), ADMIN_MAX_AGE_S)
        return self.sealer.seal({"sid": sid}, "admin")

    def is_admin(self, request: Any) -> bool:
        """True when the request carries a valid, not signed-out admin cookie, or (on a Space
        with OAuth) a Hugging Face session of a user in ADMIN_USERS."""
        if self.admin_users and oauth_username(request) in self.admin_users:
            return True
        claims = self._claims(request, "admin")
        return bool(claims) and self.sessions.lookup(claims["sid"], "admin").state == ACTIVE

    def admin_identity(self, request: Any) -> str:
        """Who an admin request is, for the audit log: `admin:<user>` for a Hugging Face
        admin, `admin:session-<10 hex>` (a digest of the session id, never the id) for a
        password sign-in, so two people sharing the password are told apart per sign-in and
        each session's actions trace back to its audited sign-in; `admin` otherwise."""
        user = oauth_username(request) if self.admin_users else None
        if user in self.admin_users:
            return f"admin:{user}"
        claims = self._claims(request, "admin")
        return session_name(claims["sid"]) if claims else "admin"

    def admin_identity_of_cookie(self, value: str) -> str:
        """admin_identity of a freshly minted admin cookie (the sign-in's own audit row)."""
        claims = self.sealer.unseal(value, "admin", ADMIN_MAX_AGE_S)
        return session_name(claims["sid"]) if claims and "sid" in claims else "admin"

    def sign_out(self, request: Any, reason: str = "signed out") -> None:
        """End the request's admin and rater sessions on the server (every replica)."""
        for kind in ("admin", "rater"):
            claims = self._claims(request, kind)
            if claims:
                self.sessions.end(claims["sid"], reason)

    # ------------------------------------------------------------ rater
    def rater_cookie(self, claim: RaterClaim) -> str:
        sid = secrets.token_urlsafe(32)
        record = SessionRecord("rater", study_id=claim.study_id, rater_id=claim.rater_id)
        self.sessions.create(sid, record, RATER_MAX_AGE_S)
        sealed = {
            "sid": sid,
            "study": claim.study_id,
            "rater": claim.rater_id,
            "secret": claim.secret,
        }
        return self.sealer.seal(sealed, "rater")

    def rater(self, request: Any) -> RaterClaim | None:
        """The rater claim of a request's cookie while its session is active (not signed out,
        not expired), else None; the study layer then checks the claim against the study."""
        claims = self._claims(request, "rater")
        if not claims:
            return None
        record = self.sessions.lookup(claims["sid"], "rater")
        try:
            claim = RaterClaim(int(claims["study"]), int(claims["rater"]), str(claims["secret"]))
        except (KeyError, TypeError, ValueError):
            return None
        if record.state != "active" or (record.study_id, record.rater_id) != (
            claim.study_id,
            claim.rater_id,
        ):
            return None
        return claim

    def rater_state(self, request: Any) -> str:
        """Why a request is or is not a signed-in rater, for the rater page's wording:
        "active", "signed out" (or another recorded end), "expired", "unknown" (a cookie this
        server never issued or cannot read) or "none" (no rater cookie at all)."""
        if not request_cookies(request).get(self.rater_cookie_name):
            return "none"
        claims = self._claims(request, "rater")
        if not claims:
            return "unknown"
        return self.sessions.lookup(claims["sid"], "rater").state

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

"""The web server: one FastAPI app with the workbench Blocks at "/" and the raters' Blocks at
"/rate", plus the small cookie routes that sign admins and raters in and out.

Two Blocks, two queues: a rater's session can call only the rater page's handlers by
`fn_index`, never the analysis or the explorer. Credentials are signed HTTP-only cookies
(medheb_app.access.auth) minted by plain HTML forms here, so no Gradio component ever holds a
password and no session hash carries a right. Gradio's deep-link endpoint, which snapshots
every component value of a session into a file, is answered with nothing for both pages.
"""

from __future__ import annotations

import html
import logging
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr
from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from medheb_app.access.auth import (
    ADMIN_MAX_AGE_S,
    RATER_MAX_AGE_S,
    Authenticator,
    check_oauth_setting,
    load_secret,
)
from medheb_app.access.limits import RateLimiter, client_key
from medheb_app.access.origin import (
    OriginPolicy,
    SameOriginMiddleware,
    TrustedHostMiddleware,
    allowed_host_names,
)
from medheb_app.access.queue_guard import (
    QueueCallGuard,
    fair_queue,
    poll_gently,
    quiet_gradio_tracebacks,
)
from medheb_app.access.sessions import StoreSessions
from medheb_app.access.uploads import NoUploadedFilesServed, UploadIntake
from medheb_app.services import Services
from medheb_app.services.raters import SignInError
from medheb_app.ui import components as ui
from medheb_app.ui import evidence_view
from medheb_app.ui.analysis_tab import add_export_routes
from medheb_app.ui.rater_app import RATER_HEAD, build_rater_app
from medheb_app.ui.search_upload import TabLimits
from medheb_app.ui.shell import build_app

log = logging.getLogger(__name__)
RATER_PATH = "/rate"
BUSY_MESSAGE = "The server is busy right now; please try again in a minute."
MAX_FIELD_CHARS = 500


@dataclass
class Guards:
    """The authenticator and the per-client limits every sign-in goes through."""

    auth: Authenticator
    admin_limit: RateLimiter
    rater_limit: RateLimiter


def make_guards(services: Services) -> Guards:
    settings = services.settings
    secret = load_secret(settings.data_dir, settings.session_secret)
    oauth = check_oauth_setting(settings.admin_users)  # refuses ADMIN_USERS off a real Space
    return Guards(
        auth=Authenticator(
            secret,
            secure=settings.secure_cookies,
            admin_users=settings.admin_users,
            oauth=oauth,
            sessions=StoreSessions(services.store),  # survive restarts, shared by replicas
        ),
        # 5 password tries a minute per client, then 15 minutes locked out
        admin_limit=RateLimiter(max_events=5, window_s=60, lockout_s=900),
        # 10 rater sign-ins a minute per client, then 5 minutes locked out
        rater_limit=RateLimiter(max_events=10, window_s=60, lockout_s=300),
    )


# ---------------------------------------------------------------- plain HTML pages

_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title><style>
body{{font-family:system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem;
color:#1f2937}} label{{display:block;margin:.8rem 0 .2rem}} input,select{{width:100%;
padding:.5rem;font-size:1rem;box-sizing:border-box}} button{{margin-top:1rem;padding:.6rem 1.2rem;
font-size:1rem}} .error{{background:#fde2e1;padding:.6rem;border-radius:6px}}
.info{{background:#e0ecff;padding:.6rem;border-radius:6px}}</style></head>
<body><h1>{title}</h1>{body}</body></html>"""


def page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(_PAGE.format(title=html.escape(title), body=body), status_code=status)


def _notice(kind: str, text: str) -> str:
    return f'<p class="{kind}" role="alert">{html.escape(text)}</p>' if text else ""


def admin_form(message: str = "", kind: str = "error") -> str:
    return (
        f"{_notice(kind, message)}"
        '<form method="post" action="/auth/admin">'
        '<label for="password">Admin password</label>'
        '<input id="password" name="password" type="password" autocomplete="current-password"'
        " required autofocus>"
        '<button type="submit" id="admin-submit">Sign in</button></form>'
        '<p><a href="/">Back to the workbench</a></p>'
    )


def rater_form(services: Services, message: str = "", kind: str = "error") -> str:
    studies = [card for card in services.raters.public_studies() if card.open_enrolment]
    enrol = ""
    if studies:
        options = "".join(
            f'<option value="{card.id}">{html.escape(card.title)}</option>' for card in studies
        )
        enrol = (
            "<h2>Open studies</h2>"
            '<form method="post" action="/auth/rater">'
            f'<label for="study">Study</label><select id="study" name="study">{options}</select>'
            '<label for="label">Your name (a label for your votes; not a password)</label>'
            '<input id="label" name="label" maxlength="100">'
            '<button type="submit" id="rater-enrol">Start rating</button></form>'
        )
    return (
        f"{_notice(kind, message)}"
        "<p>Use the link from your invitation, or type its short code.</p>"
        '<form method="post" action="/auth/rater">'
        '<label for="code">Invitation code</label>'
        '<input id="code" name="code" autocomplete="off" required autofocus>'
        '<label for="code-label">Your name (optional; a label, not a password)</label>'
        '<input id="code-label" name="label" maxlength="100">'
        '<button type="submit" id="rater-submit">Sign in</button></form>'
        f"{enrol}"
    )


async def _form(request: Request) -> dict[str, str]:
    form = await request.form()
    return {key: str(value)[:MAX_FIELD_CHARS] for key, value in form.items()}


# ---------------------------------------------------------------- routes


def add_auth_routes(app: FastAPI, services: Services, guards: Guards) -> None:
    """Sign-in and sign-out for admins and raters; invitation links redeemed by redirect."""
    auth = guards.auth
    hops = services.settings.trusted_proxy_hops

    @app.get("/auth/admin", include_in_schema=False)
    def admin_page(request: Request) -> Response:
        if not services.admin_enabled:
            return page("Admin", _notice("error", "This server has no admin."), 404)
        if auth.is_admin(request):
            return RedirectResponse("/", status_code=303)
        return page("Admin sign-in", admin_form())

    @app.post("/auth/admin", include_in_schema=False)
    async def admin_sign_in(request: Request) -> Response:
        if not services.admin_enabled:
            return page("Admin", _notice("error", "This server has no admin."), 404)
        key = client_key(request, hops)
        decision = guards.admin_limit.hit(key)
        if not decision.allowed:
            response = page(
                "Admin sign-in", admin_form(decision.message("admin password attempts")), 429
            )
            response.headers["Retry-After"] = str(max(1, int(decision.retry_after)))
            return response
        password = (await _form(request)).get("password", "")
        if not services.check_admin(password):
            log.warning("admin sign-in refused for %s", key)
            return page("Admin sign-in", admin_form("Wrong admin password."), 401)
        guards.admin_limit.reset(key)
        response = RedirectResponse("/", status_code=303)
        cookie = auth.admin_cookie()
        who = auth.admin_identity_of_cookie(cookie)
        services.audit.admin("admin-sign-in", f"client {key}", route="/auth/admin", who=who)
        auth.set_cookie(response, auth.admin_cookie_name, cookie, ADMIN_MAX_AGE_S)
        return response

    @app.get("/auth/rater", include_in_schema=False)
    def rater_page(request: Request) -> Response:
        return page("Rater sign-in", rater_form(services))

    def _rater_signed_in(claim) -> Response:
        response = RedirectResponse(f"{RATER_PATH}/", status_code=303)
        auth.set_cookie(response, auth.rater_cookie_name, auth.rater_cookie(claim), RATER_MAX_AGE_S)
        return response

    def _rater_refused(request: Request, message: str, status: int) -> Response:
        return page("Rater sign-in", rater_form(services, message), status)

    @app.post("/auth/rater", include_in_schema=False)
    async def rater_sign_in(request: Request) -> Response:
        decision = guards.rater_limit.hit(client_key(request, hops))
        if not decision.allowed:
            return _rater_refused(request, decision.message("sign-in attempts"), 429)
        form = await _form(request)
        try:
            if form.get("code"):
                claim = services.raters.redeem(form["code"], form.get("label", ""))
            elif form.get("study"):
                claim = services.raters.enrol(
                    int(form["study"]), form.get("label", ""), client_key(request, hops)
                )
            else:
                return _rater_refused(request, "Type your invitation code.", 400)
        except (SignInError, ValueError) as error:
            return _rater_refused(request, str(error) or "That sign-in did not work.", 401)
        return _rater_signed_in(claim)

    @app.api_route("/auth/signout", methods=["GET", "POST"], include_in_schema=False)
    def sign_out(request: Request) -> Response:
        if request.method == "GET" and _from_another_page(request):
            # an <img> or link on another page (another port of this host counts as same-site)
            # must not end the session: ask, and sign out on the POST (origin-checked)
            form = (
                '<form method="post" action="/auth/signout">'
                '<button type="submit">Sign out</button></form>'
            )
            return page("Sign out?", _notice("info", "Sign out of this site?") + form)
        auth.sign_out(request)
        response = page("Signed out", _notice("info", "You are signed out.") + _links())
        auth.clear_cookies(response)
        return response

    def redeem_invitation_links(request: Request) -> Response | None:
        """GET /rate?invite=SECRET: redeem, set the cookie, and redirect to a clean /rate/ so
        the secret leaves the address bar and the history."""
        if "invite" in request.query_params:
            if _from_another_page(request) and auth.rater(request) is not None:
                # a link on another page must not silently swap a signed-in rater for the
                # invitation's (login CSRF, found by the adversarial pass): ask first
                return _confirm_other_invitation(request.query_params["invite"])
            decision = guards.rater_limit.hit(client_key(request, hops))
            if not decision.allowed:
                return _rater_refused(request, decision.message("sign-in attempts"), 429)
            try:
                claim = services.raters.redeem(request.query_params["invite"])
            except SignInError as error:
                return _rater_refused(request, str(error), 401)
            return _rater_signed_in(claim)
        if request.url.path == RATER_PATH:  # the raters' page lives at /rate/ (mounted app)
            return RedirectResponse(f"{RATER_PATH}/", status_code=307)
        return None

    app.add_middleware(RaterPathMiddleware, answer=redeem_invitation_links)

    for prefix in ("", RATER_PATH):

        @app.get(f"{prefix}/gradio_api/deep_link", include_in_schema=False)
        def no_deep_links() -> PlainTextResponse:
            """Deep links would snapshot a session's component values to a file: off."""
            return PlainTextResponse('""', media_type="application/json")


class RaterPathMiddleware:
    """Pure ASGI middleware: GET /rate and /rate/ first go to `answer(request)`, whose
    response (a redeemed invitation, the /rate -> /rate/ redirect) is sent instead of the page
    when it gives one. Every other request passes untouched, with none of the per-request
    task group and streams that Starlette's BaseHTTPMiddleware (@app.middleware) costs."""

    def __init__(self, app: Any, answer: Callable[[Request], Response | None]) -> None:
        self.app = app
        self.answer = answer

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if (
            scope.get("type") == "http"
            and scope.get("method") == "GET"
            and scope.get("path") in (RATER_PATH, f"{RATER_PATH}/")
        ):
            response = await run_in_threadpool(self.answer, Request(scope, receive))
            if response is not None:
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def add_upload_routes(app: FastAPI, services: Services) -> UploadIntake:
    """Both pages' upload routes, declared before Gradio's so they answer instead: the
    workbench's caps, renames and sweeps (medheb_app.access.uploads); the raters' page takes
    none. Uploaded files are never served back."""
    settings = services.settings
    intake = UploadIntake(
        settings.max_upload_bytes,
        ttl_s=settings.upload_ttl_s,
        # 12 upload bodies per 10 minutes per client (the page reads at most 6 of them)
        limiter=RateLimiter(max_events=12, window_s=600),
        proxy_hops=settings.trusted_proxy_hops,
    )
    intake.start_sweeper()

    @app.post("/gradio_api/upload", include_in_schema=False)
    async def upload(request: Request) -> Response:
        return await intake.receive(request)

    @app.post(f"{RATER_PATH}/gradio_api/upload", include_in_schema=False)
    def no_rater_uploads() -> PlainTextResponse:
        return PlainTextResponse("This page takes no uploads.", status_code=404)

    app.add_middleware(NoUploadedFilesServed, intake=intake)
    return intake


def _from_another_page(request: Request) -> bool:
    """Whether a browser sent this GET from another site's page, or another port of this
    host (Sec-Fetch-Site same-site / cross-site): such a GET must not change who is signed in."""
    return (request.headers.get("sec-fetch-site") or "").lower() in ("same-site", "cross-site")


def _confirm_other_invitation(secret: str) -> HTMLResponse:
    """The page a signed-in rater sees when a link from elsewhere carries an invitation."""
    link = f"{RATER_PATH}?invite={urllib.parse.quote(secret, safe='')}"
    body = _notice(
        "warning",
        "You are already signed in as a rater, and a link from another page carries a "
        "different invitation. Keep rating as you are, or open that invitation instead "
        "(it replaces your sign-in in this browser).",
    ) + (
        f'<p><a href="{RATER_PATH}/">Keep rating as I am</a> · '
        f'<a href="{html.escape(link)}">Use the other invitation</a></p>'
    )
    response = page("Another invitation?", body)
    response.headers["Cache-Control"] = "no-store"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


def _links() -> str:
    return f'<p><a href="{RATER_PATH}/">Raters\' page</a> · <a href="/">Workbench</a></p>'


# ---------------------------------------------------------------- composition


def bounded_queue(blocks: gr.Blocks, services: Services) -> gr.Blocks:
    """A queue of at most `queue_max_size` waiting events, `concurrency` at a time per handler,
    at most `queue_per_client` events per client (only that client is told it is busy), page
    loads never refused for a queue full of searches, a full queue answered with a plain
    'busy, try again' rather than Gradio's internals, and idle polling every `queue_poll_ms`
    (medheb_app.access.queue_guard)."""
    settings = services.settings
    blocks.queue(max_size=settings.queue_max_size, default_concurrency_limit=settings.concurrency)
    fair_queue(
        blocks,
        max_size=settings.queue_max_size,
        per_client=settings.queue_per_client,
        proxy_hops=settings.trusted_proxy_hops,
        busy=BUSY_MESSAGE,
    )
    poll_gently(blocks, settings.queue_poll_ms / 1000)
    return blocks


def build_server(services: Services, guards: Guards | None = None) -> FastAPI:
    """The FastAPI app: auth routes, the raters' Blocks at /rate, the workbench at /."""
    # deferred: starlette
    from medheb_app.api.app import mount_api

    guards = guards or make_guards(services)
    settings = services.settings
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    # No other origin may read an answer: Starlette's CORS with no allowed origin. Its presence
    # also turns Gradio's own CORS middleware off, which lets any localhost origin read a
    # localhost app's answers with the cookies (gradio.route_utils.CustomCORSMiddleware).
    app.add_middleware(CORSMiddleware, allow_origins=[], allow_credentials=False)
    # ... and none may change anything: POSTs from another origin, even same-site, are 403
    policy = OriginPolicy(
        proxy_hops=settings.trusted_proxy_hops,
        public_origins=settings.public_origins,
        https_only=settings.secure_cookies,
    )
    app.add_middleware(SameOriginMiddleware, policy=policy)
    app.state.guards = guards
    add_auth_routes(app, services, guards)
    intake = add_upload_routes(app, services)
    budget = TabLimits()  # one anonymous budget per client, whichever door it searches through
    mount_api(app, services, budget)  # /api/v1, before the page at "/" that catches every path
    add_export_routes(app, services, guards.auth)  # study CSVs: admin cookie checked per request
    common = {
        "footer_links": [],
        "show_error": False,
        "max_file_size": services.settings.max_upload_bytes,
        "run_history": False,
        # Gradio serves /monitoring/summary (per-handler call counts: on /rate, per vote
        # choice) to anyone unless monitoring is off; off, every /monitoring route is 403
        "enable_monitoring": False,
    }
    rater = bounded_queue(build_rater_app(services, guards.auth), services)
    app = gr.mount_gradio_app(app, rater, path=RATER_PATH, css=ui.CSS, head=RATER_HEAD, **common)
    main = bounded_queue(build_app(services, guards.auth, budget), services)
    # the evidence renderer's style and script are on "/" too, for any tab that uses it
    app = gr.mount_gradio_app(
        app,
        main,
        path="/",
        css=ui.CSS + evidence_view.CSS,
        head=f"<script>{evidence_view.SCRIPT}</script>",
        **common,
    )
    app.state.blocks = {"main": main, "rate": rater}
    # malformed queue calls and unknown fn_index: 400 and one log line, before Gradio
    app.add_middleware(QueueCallGuard, pages={"": main, RATER_PATH: rater})
    # outermost: nothing answers a loopback server's rebinding domain (access/origin.py)
    names = allowed_host_names(settings.host, settings.public_origins, settings.trusted_proxy_hops)
    if names is not None:
        app.add_middleware(TrustedHostMiddleware, names=names)
    quiet_gradio_tracebacks()
    app.state.uploads = intake
    return app

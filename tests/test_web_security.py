"""The served app attacked over raw HTTP, as issue 11 describes: queue calls by `fn_index` from
a rater's or an anonymous session, a second client reusing the admin's session hash, deep
links, password guessing, a full queue.

The app runs in-process (medheb_app.ui.server.build_server under uvicorn) with a temporary
DATA_DIR, an admin password and a study drawn from a stored benchmark run of random vs oracle.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import gradio as gr
import httpx
import pytest
from fastapi import FastAPI

from medheb_app.services import create_services
from medheb_app.ui.server import BUSY_MESSAGE, bounded_queue, build_server
from tests.run_fixtures import text_bench_run
from tests.web_client import QueueClient, fn_index, serve

PASSWORD = "web-admin-pass-7"
STUDY_NAME = "internal-name-secret"


def _bench_run(out_dir: Path, settings) -> object:
    from medheb_app.tasks.base import Item

    pairs = [(Item(f"q{i}", f"w{i} w{i + 1}"), Item(f"t{i}", f"w{i} target")) for i in range(8)]
    return text_bench_run("tt-web", pairs, out_dir, settings)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from medheb_app.settings import Settings
    from medheb_app.study.items import create_study

    root = tmp_path_factory.mktemp("web")
    settings = Settings.from_env(data_dir=root / "data", admin_password=PASSWORD)
    services = create_services(settings, start_bootstrap=False)
    summary = _bench_run(root / "bench", settings)
    study_id = create_study(
        services.store, STUDY_NAME, ["random", "oracle"], summary.out_dir, n_items=4, seed=0
    ).id
    app = build_server(services)
    with serve(app) as base:
        yield {
            "base": base,
            "app": app,
            "services": services,
            "run_id": summary.run_id,
            "study_id": study_id,
            "main": app.state.blocks["main"],
            "rate": app.state.blocks["rate"],
        }
    services.jobs.shutdown(wait=False)


def _admin(base: str, session_hash: str | None = None) -> QueueClient:
    client = QueueClient(base, session_hash)
    reply = client.post_form("/auth/admin", {"password": PASSWORD})
    assert reply.status_code == 303, reply.text
    return client


def _text(result: dict) -> str:
    return str(result["output"]) + result["text"]


# ---------------------------------------------------------------- A: unblinding


def test_rater_queue_holds_only_rater_handlers(site):
    """Attack A: /rate's queue answers only the raters' handlers, whatever fn_index is sent."""
    names = {fn.fn.__qualname__ for fn in site["rate"].fns.values() if fn.fn is not None}
    assert names and all("build_rater_app" in name for name in names), names
    analysis = fn_index(site["main"], "build_analysis_tab.<locals>._show")
    client = QueueClient(site["base"])
    result = client.call(analysis, [site["study_id"]], prefix="/rate")
    text = _text(result)
    assert "oracle" not in text and "Bradley" not in text and STUDY_NAME not in text


def test_analysis_and_export_refuse_non_admins_inside_the_handler(site):
    """Attack A: the study analysis handler called by fn_index without the admin cookie."""
    show = fn_index(site["main"], "build_analysis_tab.<locals>._show")
    refresh = fn_index(site["main"], "build_analysis_tab.<locals>._refresh")
    anonymous = QueueClient(site["base"])
    assert STUDY_NAME not in _text(anonymous.call(refresh, [None]))
    for study in (site["study_id"], None):  # the study id is refused by the empty picker too
        text = _text(anonymous.call(show, [study, 0]))
        assert "oracle" not in text and ".csv" not in text and STUDY_NAME not in text
    assert "admins only" in _text(anonymous.call(show, [None, 0]))
    admin = _admin(site["base"])  # the same calls with the cookie work: the test can fail
    assert STUDY_NAME in _text(admin.call(refresh, [None]))
    assert "votes" in _text(admin.call(show, [site["study_id"], 0]))


def test_explorer_refuses_ranked_lists_of_a_study_source_run(site):
    """Attack A: the explorer drill-down for the run the open study was drawn from."""
    load = fn_index(site["main"], "build_explorer_tab.<locals>._load")
    ranked = fn_index(site["main"], "build_explorer_tab.<locals>._ranked")
    queries = fn_index(site["main"], "build_explorer_tab.<locals>._queries")
    page_load = fn_index(site["main"], "build_app.<locals>.on_load")
    for client, allowed in ((QueueClient(site["base"]), False), (_admin(site["base"]), True)):
        assert f"Run {site['run_id']}:" in _text(client.call(page_load, []))  # fills pickers
        assert "Error" not in _text(client.call(load, [site["run_id"]]))
        listed = _text(client.call(queries, [None, "tt-web", ["random", "oracle"], True]))
        # per-model hit / miss marks (and the failures filter) would unblind the study too
        assert ("✓" in listed or "✗" in listed) is allowed, listed[-300:]
        text = _text(client.call(ranked, [None, "tt-web", "q0", ["random", "oracle"]]))
        assert ("<h4>oracle" in text) is allowed, text[-500:]
        assert ("open reader study" in text) is not allowed


def test_pages_show_no_internal_study_name_and_rate_does_not_link_home(site):
    anonymous = QueueClient(site["base"])
    for path in ("/config", "/rate/config", "/auth/rater"):
        assert STUDY_NAME not in anonymous.http.get(path).text
    rater_config = anonymous.http.get("/rate/config").text
    assert 'href=\\"/\\"' not in rater_config and 'href="/"' not in rater_config


# ---------------------------------------------------------------- B: session hash, deep link


def test_a_second_client_with_the_admins_session_hash_has_no_rights(site):
    """Attack B: reuse the admin's session hash without the admin's cookie."""
    from medheb_app.ui.admin_tab import NOT_ADMIN

    start = fn_index(site["main"], "build_admin_tab.<locals>._start.<locals>.handler")
    cancel = fn_index(site["main"], "build_admin_tab.<locals>._cancel")
    admin = _admin(site["base"])
    assert "Signed in as admin" in _text(admin.call(fn_index(site["main"], "on_load"), []))
    before = len(site["services"].jobs.history())
    # the admin's own call with its cookie
    note = _text(admin.call(cancel, [999]))
    assert NOT_ADMIN not in note
    thief = QueueClient(site["base"], session_hash=admin.session_hash)
    stolen = _text(thief.call(start, ["medheb-lite", ["random"], [], []]))
    assert NOT_ADMIN in stolen
    assert len(site["services"].jobs.history()) == before
    assert NOT_ADMIN in _text(thief.call(cancel, [1]))


def test_deep_links_return_nothing_and_no_file_holds_the_password(site):
    """Attack B: /gradio_api/deep_link snapshots a session's component values into a file."""
    from gradio.utils import get_upload_folder

    folders = [Path(get_upload_folder()) / "deep_links"]  # where Gradio writes snapshots

    def snapshots() -> set[Path]:
        return {path for folder in folders if folder.exists() for path in folder.rglob("*")}

    before = snapshots()
    admin = _admin(site["base"])
    admin.call(fn_index(site["main"], "build_admin_tab.<locals>._cancel"), [1])
    for prefix in ("", "/rate"):
        reply = admin.http.get(
            f"{prefix}/gradio_api/deep_link", params={"session_hash": admin.session_hash}
        )
        assert reply.json() == ""
        assert PASSWORD not in admin.http.get(f"{prefix}/config").text
    assert snapshots() == before  # no snapshot of the session was written
    for path in snapshots():
        assert path.is_dir() or PASSWORD not in path.read_text(errors="ignore")


def test_sign_out_revokes_a_kept_copy_of_the_admin_cookie(site):
    show = fn_index(site["main"], "build_analysis_tab.<locals>._show")
    admin = _admin(site["base"])
    kept = dict(admin.http.cookies)
    admin.call(fn_index(site["main"], "build_analysis_tab.<locals>._refresh"), [None])
    assert "votes" in _text(admin.call(show, [site["study_id"], 0]))
    admin.http.get("/auth/signout")
    replay = QueueClient(site["base"])
    replay.http.cookies.update(kept)
    assert "admins only" in _text(replay.call(show, [None, 0]))


def test_cookies_are_http_only_and_same_site_strict(site):
    client = QueueClient(site["base"])
    reply = client.post_form("/auth/admin", {"password": PASSWORD})
    cookie = reply.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and PASSWORD not in cookie
    forged = QueueClient(site["base"])
    forged.http.cookies.set("medheb_admin", cookie.split(";")[0].split("=", 1)[1][:-2] + "xx")
    show = fn_index(site["main"], "build_analysis_tab.<locals>._show")
    assert "admins only" in _text(forged.call(show, [None, 0]))


def test_cross_site_form_posts_are_refused(site):
    client = QueueClient(site["base"])
    reply = client.http.post(
        "/auth/admin", data={"password": PASSWORD}, headers={"origin": "https://evil.example"}
    )
    assert reply.status_code == 403 and "set-cookie" not in reply.headers


# ---------------------------------------------------------------- C: rate limits


def test_password_guessing_is_locked_out(tmp_path):
    """Attack C: 200 admin password guesses from one client."""
    from medheb_app.settings import Settings

    settings = Settings.from_env(data_dir=tmp_path / "data", admin_password=PASSWORD)
    services = create_services(settings, start_bootstrap=False)
    with serve(build_server(services)) as base:
        client = QueueClient(base)
        replies = [client.post_form("/auth/admin", {"password": f"guess-{i}"}) for i in range(200)]
        statuses = [reply.status_code for reply in replies]
        assert statuses.count(401) <= 5
        assert statuses.count(429) >= 195
        locked = replies[-1]
        assert "Too many admin password attempts" in locked.text
        assert "try again in 15 minutes" in locked.text and locked.headers["retry-after"]
        # the right password is refused too while locked out
        assert client.post_form("/auth/admin", {"password": PASSWORD}).status_code == 429
        for _ in range(30):
            client.post_form("/auth/rater", {"code": "not-a-code"})
        refused = client.post_form("/auth/rater", {"code": "not-a-code"})
        assert refused.status_code == 429 and "Too many sign-in attempts" in refused.text
    services.jobs.shutdown(wait=False)


# ---------------------------------------------------------------- H: bounded queue


def test_a_full_queue_answers_busy_try_again(settings):
    services = create_services(replace(settings, queue_max_size=1, concurrency=1), False)
    release = threading.Event()

    def slow(x):
        release.wait(30)
        return x

    with gr.Blocks() as blocks:
        box = gr.Textbox()
        box.submit(slow, box, box, api_name=False)
    app = gr.mount_gradio_app(FastAPI(), bounded_queue(blocks, services), path="/")
    with serve(app) as base:
        client = QueueClient(base)
        body = {"data": ["x"], "fn_index": 0, "session_hash": "s1"}
        statuses, texts = [], []
        for k in range(4):
            reply = client.http.post(
                "/gradio_api/queue/join", json={**body, "session_hash": f"s{k}"}
            )
            statuses.append(reply.status_code)
            texts.append(reply.text)
        assert 503 in statuses
        assert BUSY_MESSAGE in texts[statuses.index(503)]
        release.set()
    services.jobs.shutdown(wait=False)


def test_file_routes_serve_neither_the_database_nor_study_media(site):
    """No file route returns what maps a side to a model: the store, run files, media."""
    settings = site["services"].settings
    targets = [settings.data_dir / "medheb.sqlite", settings.data_dir / ".session-secret"]
    targets += [p for p in settings.data_dir.rglob("*") if p.is_file()][:20]
    client = QueueClient(site["base"])
    for prefix in ("", "/rate"):
        for target in targets:
            reply = client.http.get(f"{prefix}/gradio_api/file={target}")
            assert reply.status_code in (403, 404), (target, reply.status_code)


def test_the_app_binds_loopback_unless_host_is_set():
    import importlib.util

    from medheb_app.settings import PROJECT_ROOT

    spec = importlib.util.spec_from_file_location("app_main", PROJECT_ROOT / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.address({}) == ("127.0.0.1", 7860)
    assert module.address({"HOST": "0.0.0.0", "PORT": "8080"}) == ("0.0.0.0", 8080)


def test_invitations_are_issued_only_to_admins(site):
    from medheb_app.ui.admin_tab import NOT_ADMIN

    invite = fn_index(site["main"], "build_study_admin.<locals>._invite")
    studies = fn_index(site["main"], "build_study_admin.<locals>._studies")
    anonymous = QueueClient(site["base"])
    assert STUDY_NAME not in _text(anonymous.call(studies, []))
    assert "/rate?invite=" not in _text(anonymous.call(invite, [None, 1, "x"]))
    admin = _admin(site["base"])
    assert STUDY_NAME in _text(admin.call(studies, []))
    issued = str(admin.call(invite, [site["study_id"], 2, "pilot"])["output"])
    assert issued.count("/rate?invite=") == 2 and NOT_ADMIN not in issued
    thief = QueueClient(site["base"], session_hash=admin.session_hash)
    assert NOT_ADMIN in _text(thief.call(invite, [site["study_id"], 1, "stolen"]))

    from medheb_app.api.audit import events

    rows = events(site["services"].store)
    invited = [row for row in rows if row.action == "study-invite"][-1]
    signed_in = [row for row in rows if row.action == "admin-sign-in"]
    assert invited.who.startswith("admin:session-")  # this sign-in, not a bare "admin"
    assert invited.who in {row.who for row in signed_in}  # traced back to its sign-in row
    assert all(row.query.startswith("client ") for row in signed_in)


# ---------------------------------------------------------------- issue 19: same-origin


def _join(client: QueueClient, index: int, data: list, headers: dict, prefix: str = ""):
    body = {"data": data, "fn_index": index, "session_hash": client.session_hash}
    return client.http.post(f"{prefix}/gradio_api/queue/join", json=body, headers=headers)


def test_state_changing_requests_from_another_origin_are_refused(site):
    """Another port, another host name of the same server, `null`, a same-site fetch, an http
    origin: every queue join, upload and sign-in form from them is 403, with the cookie."""
    from medheb_app.study import list_invitations

    base = site["base"]
    port = base.rsplit(":", 1)[1]
    invite = fn_index(site["main"], "build_study_admin.<locals>._invite")
    admin = _admin(base)
    admin.call(fn_index(site["main"], "build_study_admin.<locals>._studies"), [])
    before = len(list_invitations(site["services"].store, site["study_id"]))
    foreign = [
        {"origin": "http://127.0.0.1:1"},  # another port, same host
        {"origin": f"http://localhost:{port}"},  # another host name for the same server
        {"origin": "http://evil.example"},
        {"origin": "null"},
        {"sec-fetch-site": "same-site"},  # a browser's fetch from a sibling subdomain
        {"origin": base, "sec-fetch-site": "cross-site"},
    ]
    for headers in foreign:
        reply = _join(admin, invite, [site["study_id"], 1, "x"], headers)
        assert reply.status_code == 403, (headers, reply.text)
        assert "this site's own page" in reply.text
        files = {"files": ("scan.png", b"\x89PNG\r\n", "image/png")}
        for prefix in ("", "/rate"):
            upload = admin.http.post(f"{prefix}/gradio_api/upload", files=files, headers=headers)
            assert upload.status_code == 403, (prefix, headers)
        signin = admin.http.post("/auth/admin", data={"password": PASSWORD}, headers=headers)
        assert signin.status_code == 403 and "set-cookie" not in signin.headers
    assert len(list_invitations(site["services"].store, site["study_id"])) == before
    own = _join(admin, invite, [site["study_id"], 1, "x"], {"origin": base})
    assert own.status_code == 200, own.text  # the page's own origin is served


def test_no_other_origin_may_read_answers(site):
    """Gradio's CORS let any localhost origin read a localhost app's answers with cookies."""
    admin = _admin(site["base"])
    for origin in ("http://127.0.0.1:1", "http://localhost:1", "http://evil.example"):
        for path in ("/config", "/rate/config", "/gradio_api/info", "/auth/rater"):
            reply = admin.http.get(path, headers={"origin": origin})
            assert "access-control-allow-origin" not in reply.headers, (origin, path)
            assert "access-control-allow-credentials" not in reply.headers
        preflight = admin.http.options(
            "/gradio_api/queue/join",
            headers={
                "origin": origin,
                "access-control-request-method": "POST",
                "access-control-request-headers": "content-type",
            },
        )
        assert preflight.headers.get("access-control-allow-origin") != origin


def test_cookies_are_host_prefixed_and_secure_behind_https(tmp_path):
    from medheb_app.settings import Settings

    settings = Settings.from_env(
        data_dir=tmp_path / "data", admin_password=PASSWORD, secure_cookies=True
    )
    services = create_services(settings, start_bootstrap=False)
    with serve(build_server(services)) as base:
        client = QueueClient(base)
        refused = client.http.post(  # behind HTTPS an http origin is another origin
            "/auth/admin", data={"password": PASSWORD}, headers={"origin": base}
        )
        assert refused.status_code == 403
        https = base.replace("http://", "https://")
        reply = client.http.post(
            "/auth/admin", data={"password": PASSWORD}, headers={"origin": https}
        )
        cookie = reply.headers["set-cookie"]
        assert cookie.startswith("__Host-medheb_admin="), cookie
        lowered = cookie.lower()
        assert "secure" in lowered and "path=/" in lowered and "domain=" not in lowered
        signed_out = client.http.get("/auth/signout").headers.get_list("set-cookie")
        assert any(c.startswith("__Host-medheb_admin=") for c in signed_out), signed_out
    services.jobs.shutdown(wait=False)


def test_monitoring_routes_are_closed_on_both_apps(site):
    """Issue 18: /monitoring/summary was public and counted calls per vote choice."""
    client = QueueClient(site["base"])
    client.call(fn_index(site["main"], "build_app.<locals>.on_load"), [])  # something to count
    for prefix in ("", "/rate"):
        for path in ("/monitoring", "/monitoring/summary", "/monitoring/guess-a-key"):
            reply = client.http.get(f"{prefix}{path}")
            assert reply.status_code in (403, 404), (prefix, path, reply.status_code)
            assert "on_load" not in reply.text and "fn_index" not in reply.text


def test_a_page_elsewhere_cannot_sign_an_admin_out(site):
    """The adversarial pass: <img src=".../auth/signout"> on another port of the same host (a
    same-site GET) ended the admin's session. Such a GET now only asks; the POST it offers is
    origin-checked, and a sign-out from the site itself still works."""
    show = fn_index(site["main"], "build_analysis_tab.<locals>._show")
    admin = _admin(site["base"])
    for fetched_from in ("same-site", "cross-site"):
        asked = admin.http.get("/auth/signout", headers={"Sec-Fetch-Site": fetched_from})
        assert asked.status_code == 200 and "Sign out?" in asked.text
        assert "set-cookie" not in asked.headers
    forged = admin.http.post(
        "/auth/signout", headers={"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": "same-site"}
    )
    assert forged.status_code == 403
    admin.call(fn_index(site["main"], "build_analysis_tab.<locals>._refresh"), [None])
    assert "votes" in _text(admin.call(show, [site["study_id"], 0]))  # still signed in
    own = admin.http.get("/auth/signout", headers={"Sec-Fetch-Site": "same-origin"})
    assert own.status_code == 200 and "You are signed out" in own.text
    assert "admins only" in _text(admin.call(show, [None, 0]))


def test_a_rebinding_domain_cannot_drive_a_loopback_server(site):
    """A page on evil.example, re-pointed by DNS at 127.0.0.1, is same-origin with itself:
    only its Host names it (the adversarial pass at 2e21a9a searched through it)."""
    port = site["base"].rsplit(":", 1)[1]
    evil = {"host": f"evil.example:{port}", "origin": f"http://evil.example:{port}"}
    with httpx.Client(base_url=site["base"], timeout=30) as http:
        for method, path, body in (
            ("get", "/", None),
            ("get", "/config", None),
            ("get", "/api/v1/indices", None),
            ("post", "/api/v1/search", {"text": "pleural effusion", "k": 1}),
            ("post", "/gradio_api/queue/join", {"data": [], "fn_index": 0}),
        ):
            reply = http.request(method, path, json=body, headers=evil)
            assert reply.status_code == 400, (path, reply.text)
            assert reply.text == "This server does not answer for that host name."
        for name in ("localhost", "LOCALHOST", "127.0.0.1", "[::1]"):
            assert http.get("/api/v1/indices", headers={"host": f"{name}:{port}"}).status_code in (
                200,
                503,
            ), name


def test_which_host_names_a_server_answers_for():
    from medheb_app.access.origin import allowed_host_names, host_name

    assert host_name("LocalHost:7860") == "localhost" and host_name("[::1]:80") == "::1"
    assert host_name("example.org") == "example.org"
    loopback = allowed_host_names("127.0.0.1", (), 0)
    assert loopback == {"127.0.0.1", "localhost", "::1"}
    named = allowed_host_names("127.0.0.1", ("https://owner-app.hf.space",), 0)
    assert named is not None and "owner-app.hf.space" in named
    assert allowed_host_names("0.0.0.0", (), 0) is None  # a container: the Host is not known
    assert allowed_host_names("127.0.0.1", (), 1) is None  # behind a proxy that sets it


def test_an_https_public_origin_alone_makes_the_cookies_secure(tmp_path, monkeypatch):
    """The adversarial pass (B6): with PUBLIC_ORIGIN=https://... and no SECURE_COOKIES, the
    admin cookie came without Secure and an http Origin could still post."""
    from medheb_app.settings import Settings

    monkeypatch.delenv("SECURE_COOKIES", raising=False)
    monkeypatch.setenv("PUBLIC_ORIGIN", "https://medheb.example")
    settings = Settings.from_env(data_dir=tmp_path / "data", admin_password=PASSWORD)
    services = create_services(settings, start_bootstrap=False)
    with serve(build_server(services)) as base:
        client = QueueClient(base)
        for origin in ("http://medheb.example", base):  # http is another origin here
            refused = client.http.post(
                "/auth/admin", data={"password": PASSWORD}, headers={"origin": origin}
            )
            assert refused.status_code == 403, origin
        reply = client.http.post(
            "/auth/admin",
            data={"password": PASSWORD},
            headers={"origin": "https://medheb.example"},
        )
        assert reply.status_code == 303
        cookie = reply.headers["set-cookie"]
        assert cookie.startswith("__Host-medheb_admin="), cookie
        assert "; secure" in cookie.lower(), cookie
    services.jobs.shutdown(wait=False)

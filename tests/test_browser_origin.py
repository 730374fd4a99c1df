"""Same-site is not same-origin (issue 19 item 3), attacked with a real browser.

The admin signs in on the workbench at http://app.site.test:PORT (chromium maps *.site.test to
127.0.0.1; `.test` is not a public suffix, so every *.site.test host is one *site*, as other
*.hf.space apps may be for a browser whose public-suffix list lacks hf.space). Then the admin's
browser opens an attacker's page on another port of the same host, and on another host name
of the same site. SameSite=Strict sends the admin's cookie with both pages' requests. Each page
tries to issue an invitation through Gradio's queue by `fn_index` (a CORS request with JSON and
a no-cors one with text/plain) and to read the answer's secret. Before the fix both pages
issued invitations and read their secrets (Gradio's CORS let them); after it, nothing is
issued and nothing is readable, while the same script on the app's own page still works.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from medheb_app.services import create_services
from medheb_app.settings import Settings
from tests.browser_harness import chromium, require_browser
from tests.run_fixtures import text_bench_run
from tests.web_client import fn_index, serve

PASSWORD = "origin-admin-pass-5"

ATTACK = """
async ([appBase, studiesIndex, inviteIndex, studyId, noCors]) => {
  const out = {};
  const body = (session, index, data) => JSON.stringify({
    data: data, fn_index: index, session_hash: session, event_data: null, trigger_id: null,
  });
  const read = async (session) => {
    try {
      const reply = await fetch(`${appBase}/gradio_api/queue/data?session_hash=${session}`,
                                {credentials: "include"});
      const reader = reply.body.getReader();
      const decoder = new TextDecoder();
      let text = "";
      const deadline = Date.now() + 15000;
      while (Date.now() < deadline && !text.includes("process_completed")) {
        const {done, value} = await reader.read();
        if (done) break;
        text += decoder.decode(value, {stream: true});
      }
      return text;
    } catch (error) { return "unreadable: " + error; }
  };
  // the picker's choices first (Gradio checks a dropdown's value against them), then issue
  const steps = [[studiesIndex, []], [inviteIndex, [studyId, 1, "csrf"]]];
  out.cors = [];
  for (const [index, data] of steps) {  // CORS requests with JSON: preflighted
    try {
      const joined = await fetch(`${appBase}/gradio_api/queue/join`, {
        method: "POST", credentials: "include",
        headers: {"Content-Type": "application/json"}, body: body("corsession01", index, data),
      });
      out.cors.push("status " + joined.status + " " + (await joined.text()));
      out.cors.push(await read("corsession01"));
    } catch (error) { out.cors.push("refused: " + error); }
  }
  for (const [index, data] of noCors ? steps : []) {  // simple no-cors requests: no preflight,
    // opaque answer
    try {
      await fetch(`${appBase}/gradio_api/queue/join`, {
        method: "POST", mode: "no-cors", credentials: "include",
        headers: {"Content-Type": "text/plain"}, body: body("nocorsess01", index, data),
      });
      await new Promise((done) => setTimeout(done, 2000));  // let the queued event run
    } catch (error) { out.nocors = "refused: " + error; }
  }
  return out;
}
"""


def _attacker() -> FastAPI:
    page = FastAPI()

    @page.get("/")
    def home() -> HTMLResponse:
        return HTMLResponse("<!doctype html><title>Cute cats</title><h1>Cats</h1>")

    return page


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[dict]:
    require_browser()
    from medheb_app.study import create_study
    from medheb_app.tasks.base import Item
    from medheb_app.ui.server import build_server

    root: Path = tmp_path_factory.mktemp("origin")
    # served as app.site.test: a server on every interface (HOST=0.0.0.0), which answers any
    # Host name, so the same-site origin checks themselves are what is tested here
    settings = Settings.from_env(data_dir=root / "data", admin_password=PASSWORD, host="0.0.0.0")
    services = create_services(settings, start_bootstrap=False)
    pairs = [(Item(f"q{i}", f"w{i} w{i + 1}"), Item(f"t{i}", f"w{i} target")) for i in range(6)]
    summary = text_bench_run("tt-origin", pairs, root / "bench", settings)
    study_id = create_study(
        services.store, "origin-study", ["random", "oracle"], summary.out_dir, n_items=3, seed=0
    ).id
    app = build_server(services)
    main = app.state.blocks["main"]
    invite = fn_index(main, "build_study_admin.<locals>._invite")
    studies = fn_index(main, "build_study_admin.<locals>._studies")
    with serve(app) as base, serve(_attacker()) as evil:
        yield {
            "port": base.rsplit(":", 1)[1],
            "evil_port": evil.rsplit(":", 1)[1],
            "services": services,
            "study_id": study_id,
            "indices": [studies, invite],
        }
    services.jobs.shutdown(wait=False)


@pytest.fixture(scope="module")
def browser(site):
    with chromium(["--host-resolver-rules=MAP *.site.test 127.0.0.1"]) as launched:
        yield launched


def _issued(site) -> int:
    from medheb_app.study import list_invitations

    return len(list_invitations(site["services"].store, site["study_id"]))


@pytest.mark.parametrize(
    "attacker_host",
    ["app.site.test", "evil.site.test"],
    ids=["another-port-same-host", "another-host-same-site"],
)
def test_a_same_site_page_cannot_drive_or_read_the_admin_handlers(site, browser, attacker_host):
    app_base = f"http://app.site.test:{site['port']}"
    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(60_000)
    page.goto(f"{app_base}/auth/admin")
    page.fill("#password", PASSWORD)
    page.click("#admin-submit")
    # redirected to the workbench; only its address is needed, not the page it would render
    page.wait_for_url(f"{app_base}/", wait_until="commit")
    assert any(c["name"] == "medheb_admin" for c in context.cookies())

    before = _issued(site)
    page.goto(f"http://{attacker_host}:{site['evil_port']}/")
    out = page.evaluate(ATTACK, [app_base, *site["indices"], site["study_id"], True])
    assert _issued(site) == before, out  # nothing was issued through the admin's cookie
    assert "/rate?invite=" not in str(out), out  # and no secret could be read
    assert all(step.startswith("refused") for step in out["cors"]), out

    # the same script on the app's own page works: the check does not break the app (its
    # CORS part is what issues; the no-cors part would only wait 4 s more)
    page.goto(f"{app_base}/auth/rater")
    own = page.evaluate(ATTACK, [app_base, *site["indices"], site["study_id"], False])
    assert "/rate?invite=" in str(own["cors"]), own
    assert _issued(site) > before
    context.close()

"""Reads over HTTP that the first API tests did not reach: a CXR-Retrieve run's summary and
per-query rankings (not only MedHEB's), the blinded-run refusal on such a run, and record reads
of a real index (its record and its image) each appended to the audit log."""

from __future__ import annotations

import pytest

from tests.api_site import running_site
from tests.test_api_http import assert_problem
from tests.test_cxr_cli import nih_fixture


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from medheb_app.eval.runner import run_suite
    from medheb_app.tasks.cxr_retrieve import CxrRetrieveSuite

    root = tmp_path_factory.mktemp("api-reads")
    with running_site(root, {"TRUST_PROXY_HEADERS": "1"}) as up:
        gallery = nih_fixture(root / "nih")
        suite = CxrRetrieveSuite(data=f"nih:{gallery}", split=None)
        up.runs["cxr"] = run_suite(suite, ["oracle", "random"], root / "cxr", up.settings).run_id
        yield up


def test_a_cxr_retrieve_run_summary_has_its_regimes_cis_and_no_server_path(site):
    run = site.runs["cxr"]
    with site.client("read") as client:
        listed = {row["id"]: row for row in client.get("/runs").json()}
        detail = client.get(f"/runs/{run}")
    assert listed[run]["started"].endswith("+00:00")  # as the run's own summary writes it
    assert listed[run]["suite"] == "cxr-retrieve" and set(listed[run]["models"]) == {
        "oracle",
        "random",
    }
    assert detail.status_code == 200, detail.text
    body = detail.json()
    assert body["kind"] == "cxr-retrieve" and body["blinded"] is False
    metrics = body["models"]["oracle"]["tasks"]["cxr-retrieve"]
    assert metrics["n_queries"] == 145 and "negation/HNRR@5" in metrics
    board = {row["model"]: row for row in body["leaderboard"]}
    for name, row in board.items():
        low, high = row["negation P@5_ci_low"], row["negation P@5_ci_high"]
        assert low <= row["negation P@5"] <= high, name
        assert row["negation P@5 95% CI"] == f"[{low:.1f}, {high:.1f}]"
    assert board["oracle"]["single P@1"] > board["random"]["single P@1"]
    assert body["tasks"][0]["source"] == "nih" and body["tasks"][0]["data"] == "nih"
    assert str(site.tmp.parent) not in detail.text  # the gallery's folder stays on the server


def test_a_cxr_retrieve_runs_queries_page_through_negation_failures(site):
    run = site.runs["cxr"]
    path = f"/runs/{run}/tasks/negation/queries"
    with site.client("read") as client:
        page = client.get(path, params={"limit": 2}).json()
        assert page["total"] == 90 and [q["id"] for q in page["queries"]] == ["neg-00", "neg-01"]
        first = page["queries"][0]
        assert " and no " in first["text"] and set(first["ranked"]) == {"oracle", "random"}
        top = first["ranked"]["oracle"][0]
        assert top["rank"] == 1 and top["id"].startswith("nih-") and top["gold"] is True
        failures = client.get(
            path, params={"failures_only": True, "models": ["random"], "limit": 100}
        ).json()
        assert 0 < failures["total"] < 90 and failures["models"] == ["random"]
        assert all(q["hit_at_1"] == {"random": False} for q in failures["queries"])
        missed = failures["queries"][0]["ranked"]["random"][0]
        assert missed["gold"] is False and (missed["violated"] or not missed["findings"])
        singles = client.get(f"/runs/{run}/tasks/single/queries", params={"limit": 1}).json()
        assert singles["total"] == 10
        assert_problem(client.get(f"/runs/{run}/tasks/tt-open/queries"), 404, "not-found")


def test_the_blinded_run_stays_refused_next_to_an_open_cxr_run(site):
    with site.client("read") as client:
        assert client.get(f"/runs/{site.runs['cxr']}/tasks/pair/queries").status_code == 200
        path = f"/runs/{site.runs['blinded']}/tasks/tt-blinded/queries"
        assert_problem(client.get(path), 403, "blinded")
        assert client.get(f"/runs/{site.runs['blinded']}").json()["blinded"] is True


def test_reading_a_real_studys_record_and_image_is_audited(site):
    with site.client("admin") as admin:
        mark = max([e["id"] for e in admin.get("/audit").json()] or [0])
    with site.client("read") as client:
        hit = client.post("/search", json={"text": "lungs", "index": "ward-cxr", "k": 1}).json()
        study = hit["results"][0]["id"]
        assert client.get(hit["results"][0]["links"]["record"][len("/api/v1") :]).status_code == 200
        image = client.get(f"/studies/ward-cxr/{study}/image", params={"max_size": 32})
        assert image.status_code == 200 and image.headers["content-type"] == "image/png"
        assert client.get("/studies/demo-cxr/phantom-cxr-000001").status_code == 200
    with site.client("admin") as admin:
        events = [e for e in admin.get("/audit").json() if e["id"] > mark]
    reads = [(e["action"], e["route"], e["index"], e["query"], e["count"]) for e in events
             if e["action"] == "record"]  # fmt: skip
    assert reads == [
        ("record", "GET /api/v1/studies/{index}/{id}", "ward-cxr", study, 1),
        ("record", "GET /api/v1/studies/{index}/{id}/image", "ward-cxr", study, 1),
    ]
    assert all(e["who"] == f"token:{site.token_ids['read']}" for e in events if e["count"] == 1)

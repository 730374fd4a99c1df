"""Skipped tasks in a table of their own: on the explorer for a stored run and in the admin
job view, with the reason; the real-data folder (MEDHEB_SHARED_DATA) is named to admins, never
shown as a server path to anonymous users (attack: the explorer's handler called by fn_index
without the admin cookie). The admin panel's estimate is refused to non-admins."""

from __future__ import annotations

import pytest

from medheb_app.services import create_services
from medheb_app.services.runs import SHARED_DATA_LABEL, public_reason, skipped_rows
from medheb_app.settings import Settings
from medheb_app.ui import admin_tab
from medheb_app.ui import explorer_tab as ex
from medheb_app.ui.server import build_server
from tests.web_client import QueueClient, fn_index, serve

PASSWORD = "skipped-admin-pass-3"
PARAMS = {"suite": "medheb-lite", "models": ["oracle"], "tasks": [], "families": ["T-T"]}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A served app whose real-data folder is an empty temp folder, with one stored run of
    the T-T family (IU reports, bundled, and PubMedQA, real data: skipped), run as an admin
    job."""
    root = tmp_path_factory.mktemp("skipped")
    empty = root / "empty-shared-data"
    empty.mkdir()
    settings = Settings(
        data_dir=root / "data", admin_password=PASSWORD, shared_data_dir=empty, demo_size=30
    )
    services = create_services(settings, start_bootstrap=False)
    job_id, note = admin_tab.start_job(services, True, "bench-run", dict(PARAMS))
    assert job_id is not None, note
    info = services.jobs.wait(job_id, timeout=600)
    assert info.status == "done", info.error
    app = build_server(services)
    with serve(app) as base:
        yield {
            "base": base,
            "services": services,
            "job_id": job_id,
            "run_id": info.result["run_id"],
            "empty": empty,
            "main": app.state.blocks["main"],
        }
    services.jobs.shutdown(wait=False)


def test_public_reasons_name_the_folder_not_the_path() -> None:
    roots = {"/srv/medheb/shared": SHARED_DATA_LABEL}
    reason = "labels.csv not found at /srv/medheb/shared/nih/labels.csv (see README)"
    assert (
        public_reason(reason, roots) == f"labels.csv not found at {SHARED_DATA_LABEL} (see README)"
    )
    assert public_reason("at /srv/medheb/shared2/x", roots) == "at a server path"
    assert public_reason("bow does not read 2d evidence", roots) == "bow does not read 2d evidence"
    skips = {"dual-lite@/srv/ckpt/img-task": "dual-lite@/srv/ckpt does not read 2d evidence"}
    [row] = skipped_rows(skips, roots, show_paths=False)
    assert row["task"] == "img-task" and "/srv" not in str(row)
    [row] = skipped_rows(skips, roots, show_paths=True)
    assert row["model"] == "dual-lite@/srv/ckpt"


def test_explorer_table_shows_the_skip_with_the_path_for_admins_only(site) -> None:
    services = site["services"]
    summary = ex.load_summary(services, site["run_id"])
    public = ex.skipped_frame(services, summary, is_admin=False)
    assert list(public.columns) == ["task", "model", "reason"]
    [row] = public.to_dict("records")
    assert row["task"] == "pubmedqa-q2context" and row["model"] == "all models"
    assert SHARED_DATA_LABEL in row["reason"] and str(site["empty"]) not in row["reason"]
    [admin_row] = services.runs.skipped(summary, is_admin=True)
    assert str(site["empty"]) in admin_row["reason"]


def _text(result: dict) -> str:
    return str(result["output"]) + result["text"]


def test_anonymous_queue_calls_never_see_the_server_path(site) -> None:
    """Attack: load the run in one's own session, then call the skipped-tasks handler by
    fn_index without the admin cookie. The reason arrives with the folder named, not shown."""
    load = fn_index(site["main"], "build_explorer_tab.<locals>._load")
    skipped = fn_index(site["main"], "build_explorer_tab.<locals>._skipped")
    page_load = fn_index(site["main"], "build_app.<locals>.on_load")
    anonymous = QueueClient(site["base"])
    anonymous.call(page_load, [])  # fills the run picker, as opening the page does
    anonymous.call(load, [site["run_id"]])
    text = _text(anonymous.call(skipped, [None]))
    assert "pubmedqa-q2context" in text and "MEDHEB_SHARED_DATA" in text
    assert str(site["empty"]) not in text and str(site["services"].settings.data_dir) not in text
    admin = QueueClient(site["base"])  # the same calls with the cookie show it: the test can fail
    assert admin.post_form("/auth/admin", {"password": PASSWORD}).status_code == 303
    admin.call(page_load, [])
    admin.call(load, [site["run_id"]])
    assert str(site["empty"]) in _text(admin.call(skipped, [None]))


def test_admin_job_view_lists_the_skipped_task(site) -> None:
    table = admin_tab.job_skipped_table(site["services"], site["job_id"])
    [row] = table.to_dict("records")
    assert row["task"] == "pubmedqa-q2context" and str(site["empty"]) in row["reason"]
    assert admin_tab.job_skipped_table(site["services"], None).empty


def test_estimate_is_for_admins_and_shows_a_total(site) -> None:
    services = site["services"]
    frame, note = admin_tab.estimate_view(services, False, "medheb-lite", ["random"], [], ["T-T"])
    assert frame.empty and "Sign in as admin" in note
    frame, note = admin_tab.estimate_view(
        services, True, "medheb-lite", ["oracle"], ["iu-findings2impression"], []
    )
    assert list(frame["task"]) == ["iu-findings2impression", "total"]
    assert {"items", "cached", "est. seconds"} <= set(frame.columns)
    frame, note = admin_tab.estimate_view(services, True, "medheb-lite", [], [], [])
    assert frame.empty and "Pick at least one model" in note
    frame, note = admin_tab.estimate_view(services, True, "medheb-lite", ["oracle"], ["nope"], [])
    assert frame.empty and "Unknown task" in note and "Error" not in note

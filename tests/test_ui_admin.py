"""Admin panel callbacks: the admin gate, a real background index build, study creation.
(Sign-in itself is the /auth/admin route: tests/test_web_security.py.)"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from medheb_app.services import create_services
from medheb_app.tasks.base import Item
from medheb_app.ui import admin_study, admin_tab, search_tab
from tests.run_fixtures import text_bench_run

PASSWORD = "correct horse"


@pytest.fixture
def services(settings):
    services = create_services(
        replace(settings, admin_password=PASSWORD, demo_size=30), start_bootstrap=False
    )
    yield services
    services.jobs.shutdown(wait=False)


def test_password_gate(services, settings):
    assert services.check_admin(PASSWORD) is True
    assert services.check_admin("wrong") is False
    assert services.check_admin("") is False
    public = create_services(settings, start_bootstrap=False)  # no ADMIN_PASSWORD
    assert not public.admin_enabled and public.check_admin("") is False
    public.jobs.shutdown(wait=False)


def test_non_admin_cannot_start_or_cancel_jobs(services):
    job_id, note = admin_tab.start_job(
        services, False, "bench-run", {"suite": "medheb-lite", "models": ["random"]}
    )
    assert job_id is None and "Sign in as admin" in note
    assert "Sign in as admin" in admin_tab.cancel_job(services, False, 1)
    assert services.jobs.history() == []
    job_id, note = admin_tab.start_job(services, True, "bench-run", {"suite": "", "models": []})
    assert job_id is None and "Fill in: suite, models" in note
    assert services.jobs.history() == []


@pytest.mark.slow
def test_index_build_job_runs_in_background_and_appears_in_the_picker(services):
    params = {"name": "ui-built", "model": "random", "corpus": "phantom-demo"}
    job_id, note = admin_tab.start_job(services, True, "index-build", params)
    assert job_id is not None and f"Started job {job_id}" in note
    info = services.jobs.wait(job_id, timeout=120)
    assert info.status == "done", info.error
    bar, log = admin_tab.job_detail(services, job_id)
    assert 'aria-valuenow="100"' in bar and "built ui-built: 30 items" in log
    table = admin_tab.job_table(services)
    assert table.loc[0, "status"] == "done" and table.loc[0, "kind"] == "index-build"
    assert "ui-built" in search_tab.index_choices(services)  # no restart needed
    assert "already finished" in admin_tab.cancel_job(services, True, job_id)


def test_create_study_from_a_stored_run(services, tmp_path):
    rng = np.random.default_rng(0)
    pairs = []
    for i in range(12):
        text = " ".join(rng.choice([f"w{j}" for j in range(20)], size=3, replace=False))
        pairs.append((Item(f"q{i}", text), Item(f"t{i}", text + " target")))
    summary = text_bench_run("tt", pairs, tmp_path / "run", services.settings)
    args = (summary.run_id, ["random", "oracle"], "Pilot", 5, 1, True, 0)
    assert "Sign in as admin" in admin_study.create_study(services, False, *args)
    assert services.raters.public_studies() == []
    note = admin_study.create_study(services, True, *args)
    assert "Created study" in note and "(5 items)" in note
    [card] = services.raters.public_studies()
    assert "Pilot" not in card.title  # raters see a public title, never the internal name
    again = admin_study.create_study(services, True, *args)
    assert "already exists" in again
    # the gold share is a fraction, as in the CLI's --gold-share (it was a percentage here)
    as_percent = admin_study.create_study(
        services, True, *args[:2], "Gold", *args[3:], "", False, 20
    )
    assert "a fraction from 0 to 0.5 (0.1 = 10%); got 20" in as_percent
    gold = admin_study.create_study(services, True, *args[:2], "Gold", *args[3:], "", False, 0.2)
    assert "(5 items + 1 gold (6 in all))" in gold


def test_a_job_reads_only_folders_under_the_server_source_roots(settings, tmp_path):
    """Adversarial pass at 2e21a9a: an admin token indexed `folder:/etc`. A job started from
    the panel or the API reads only the named roots and the shipped data (symbolic links
    followed); the CLI, run by the operator, still reads any path."""
    archive, outside = tmp_path / "pacs", tmp_path / "home"
    for folder in (archive / "ward", outside):
        folder.mkdir(parents=True)
    (archive / "ward" / "escape").symlink_to(outside, target_is_directory=True)
    rooted = create_services(
        replace(settings, admin_password=PASSWORD, source_roots=(("pacs", archive),)),
        start_bootstrap=False,
    )
    try:
        for source in (
            "folder:/etc",
            f"folder:{outside}",
            f"dicom:{archive / 'ward' / 'escape'}",
            f"folder:{archive}/../home",
            f"folder:{archive / 'ward'},labels={outside / 'labels.csv'}",
        ):
            params = {"name": "x", "model": "random", "source": source}
            job_id, note = admin_tab.start_job(rooted, True, "index-build", params)
            assert job_id is None and "only under its source roots (pacs, shared" in note
            assert str(outside) not in note and "/etc" not in note
        assert rooted.jobs.history() == []  # nothing queued
        params = {"name": "x", "model": "random", "source": f"folder:{archive / 'ward'}"}
        rooted.admin_jobs.start("index-build", params)  # under the root: queued
        assert len(rooted.jobs.history()) == 1
    finally:
        rooted.jobs.shutdown(wait=False)

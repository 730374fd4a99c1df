"""A researcher browses a CXR-Retrieve failure in a real browser (Playwright + Debian chromium).

A stored `cxr-retrieve` run (random vs oracle over a small NIH-layout gallery) is opened in the
explorer: the negation regime is shown, "Failures only" keeps the queries a model missed, and
the drill-down shows each model's top 10 as thumbnails with the violated constraint named.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser_harness import SCREENSHOTS
from tests.test_browser_app import _show_run
from tests.test_cxr_cli import nih_fixture

# one app with test_browser_search and test_browser_drilldown (oracle_workbench)
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser-oracle")]


@pytest.fixture(scope="module")
def app(oracle_workbench, request) -> Iterator[dict]:
    """The oracle workbench (tests/browser_harness.py) with a cxr-retrieve run (oracle, random)
    over a small NIH-layout gallery stored in it first: its newest run, shown first."""
    from medheb_app.eval.runner import run_suite
    from medheb_app.tasks.cxr_retrieve import CxrRetrieveSuite

    gallery = nih_fixture(oracle_workbench.root / "nih")
    suite = CxrRetrieveSuite(data=f"nih:{gallery}", split=None)
    out_dir = oracle_workbench.root / "cxr-run"
    summary = run_suite(suite, ["oracle", "random"], out_dir, oracle_workbench.settings)
    with oracle_workbench.serving(request) as url:
        yield {"url": url, "run": summary.run_id}


def test_a_negation_failure_shows_thumbnails_and_the_violated_constraint(app, page):
    label = f"Run {app['run']}: cxr-retrieve"  # the drill-down module stores a run here too
    _show_run(page, app["url"], label)
    page.wait_for_function(
        "() => document.querySelector('#explorer-task input')?.value === 'negation'"
    )
    # the query and its drill-down come last in a run's load chain: after a switch, the other
    # run's can show until then
    page.wait_for_function(
        "() => document.querySelector('#explorer-query input')?.value.includes(' and no ')"
    )
    page.locator("#explorer-ranked img").first.wait_for()
    assert page.locator("#explorer-run input").input_value().startswith(label)
    assert " and no " in page.locator("#explorer-query input").input_value()

    page.locator("#explorer-query input").click()
    every = page.get_by_role("option").all_inner_texts()
    page.keyboard.press("Escape")
    assert len(every) == 90 and any("✓✓" in text for text in every)

    page.locator("#explorer-failures input").check()
    failures: list[str] = []
    for _ in range(120):  # the list is replaced once the server answers
        page.wait_for_timeout(250)
        page.locator("#explorer-query input").click()
        page.wait_for_function("() => document.querySelectorAll('[role=option]').length > 0")
        failures = page.get_by_role("option").all_inner_texts()
        if failures and not any("✓✓" in text for text in failures):
            break
        page.locator("#explorer-task input").click()  # close the list
        page.keyboard.press("Escape")
    assert failures and not any("✓✓" in text for text in failures)  # only misses listed
    assert len(failures) < len(every)
    page.get_by_role("option").filter(has_text="✓✗").nth(1).click()  # random's miss
    failure = page.locator("#explorer-query input").input_value()
    assert failure.startswith("✓✗") and " and no " in failure  # oracle hit, random missed
    ranked = page.locator("#explorer-ranked")
    ranked.get_by_text("random · ✗ miss").wait_for()
    ranked.get_by_text("✗ VIOLATES").first.wait_for()
    random_column = ranked.locator(".dd-model").nth(1)
    assert random_column.locator("img").count() == 10
    assert "excludes" in ranked.locator(".dd-query").inner_text()  # the query with its labels
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "explorer-failure.png"), full_page=True)

"""The composed server: tabs present or absent by settings, and the raters' page served blind."""

from __future__ import annotations

import json

import pytest

from medheb_app.services import create_services
from medheb_app.settings import Settings
from medheb_app.ui.server import build_server
from tests.web_client import QueueClient, serve


@pytest.fixture(scope="module")
def served(tmp_path_factory, request):
    """The real server on a free port; the parameter is the admin password ('' = public).
    Module-scoped: the tests only read pages, so the two public ones share one server."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DATA_DIR", str(tmp_path_factory.mktemp("shell") / "data"))
        settings = Settings.from_env(admin_password=request.param)
        services = create_services(settings, start_bootstrap=False)
        with serve(build_server(services)) as base:
            yield QueueClient(base)
        services.jobs.shutdown(wait=False)


def _labels(config: str) -> set[str]:
    components = json.loads(config)["components"]
    return {str(c.get("props", {}).get("label")) for c in components}


@pytest.mark.parametrize("served", [""], indirect=True)
def test_public_demo_has_no_admin_and_a_blind_rater_page(served):
    main = served.http.get("/config").text
    labels = _labels(main)
    assert {"Query", "Run", "Study", "Model", "Index"} <= labels
    assert "Admin" not in labels and "/auth/admin" not in main
    rater = served.http.get("/rate/config").text
    assert "Query" not in _labels(rater) and "Run" not in _labels(rater)
    assert "vote-A" in rater and "rater-side-a" in rater
    for name in ("dual-lite", "oracle", "random"):  # pickers are filled on load, not baked in
        assert f'"{name}"' not in main and name not in rater
    assert served.http.get("/auth/admin").status_code == 404


@pytest.mark.parametrize("served", ["s3cret-pass"], indirect=True)
def test_admin_tab_exists_only_with_a_password_and_never_holds_it(served):
    main = served.http.get("/config").text
    assert "Admin" in _labels(main) or '"Admin"' in main
    assert "Admin password" not in _labels(main)  # typed into /auth/admin, not a component
    assert "s3cret-pass" not in main
    form = served.http.get("/auth/admin").text
    assert 'type="password"' in form and "s3cret-pass" not in form


@pytest.mark.parametrize("served", [""], indirect=True)
def test_pages_are_served_at_root_and_rate(served):
    assert served.http.get("/").status_code == 200
    page = served.http.get("/rate/")
    assert page.status_code == 200 and "vote-A" not in served.http.get("/").text

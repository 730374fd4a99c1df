"""The page's one public Gradio endpoint, /search, accepts the model and index names the page
shows (it refused them as "not in the list of choices" when the pickers were filled on load),
refuses a pair that is not offered in words, and every other event stays out of the API."""

from __future__ import annotations

import pytest

from tests.api_site import build_data
from tests.web_client import QueueClient, serve


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from medheb_app.services import create_services
    from medheb_app.ui.server import build_server

    settings = build_data(tmp_path_factory.mktemp("api-gradio"))
    services = create_services(settings, ensure_demo=lambda s, p: None)
    services.bootstrap.wait(10)
    app = build_server(services)
    with serve(app) as base:
        yield base, app.state.blocks["main"]
    services.jobs.shutdown(wait=False)


def _search_index(blocks) -> int:
    named = {
        d["api_name"]: d["id"]
        for d in blocks.get_config_file()["dependencies"]
        if d.get("api_visibility") == "public"
    }
    assert list(named) == ["search"]  # internal events are private
    return named["search"]


def test_search_endpoint_takes_the_names_the_page_shows(site):
    base, blocks = site
    client = QueueClient(base)
    try:
        data = ["cardiomegaly", None, "oracle", "demo-cxr", 4, "auto", False, "volume", 0]
        result = client.call(_search_index(blocks), data)
        output = result["output"]
        assert output["success"], result["text"]
        assert output["output"]["data"][2].count('class="sr-hit') == 4  # the list of 4 hits
        refused = client.call(
            _search_index(blocks),
            ["cardiomegaly", None, "random", "demo-cxr", 4, "auto", False, "volume", 0],
        )
        notice = refused["output"]["output"]["data"][1]
        assert "not offered" in notice and "Error" not in notice
    finally:
        client.close()

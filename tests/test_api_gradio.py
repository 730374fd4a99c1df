"""The page's Gradio API made honest: its one public endpoint, /search, is named for what it
does, takes the model and index names the page shows, and answers the REST search document
(ids, typed scores, findings, links) under named parameters; the page's own events (its
Search button's gallery among them) are private, so the listing (/gradio_api/info) shows
nothing anonymous (no `value_33`, no `false_12`). Driven over HTTP with gradio_client."""

from __future__ import annotations

import pytest

from tests.api_site import build_data
from tests.web_client import QueueClient, serve

PAGE_VALUES = ("cardiomegaly", None, "oracle", "demo-cxr", 4, "auto", False, "volume", 0)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from medheb_app.services import create_services
    from medheb_app.ui.server import build_server

    # the operator published the real index (MEDHEB_PUBLIC_INDICES), so the page may search it
    settings = build_data(tmp_path_factory.mktemp("api-gradio"), public_indices=("ward-cxr",))
    services = create_services(settings, ensure_demo=lambda s, p: None)
    services.bootstrap.wait(10)
    app = build_server(services)
    with serve(app) as base:
        yield base, app.state.blocks["main"], services
    services.jobs.shutdown(wait=False)


def _dependencies(blocks) -> list[dict]:
    return blocks.get_config_file()["dependencies"]


def test_the_listing_names_one_endpoint_its_parameters_and_nothing_anonymous(site):
    import httpx

    base, blocks, _ = site
    info = httpx.get(f"{base}/gradio_api/info", timeout=30).json()
    assert list(info["named_endpoints"]) == ["/search"] and info["unnamed_endpoints"] == {}
    search = info["named_endpoints"]["/search"]
    assert "JSON" in search["description"] and "/api/v1/search" in search["description"]
    parameters = {p["parameter_name"]: p for p in search["parameters"]}
    assert list(parameters) == ["query", "model", "index", "k", "ranking", "setting"]
    assert parameters["ranking"]["type"]["enum"] == ["auto", "similarity", "logic"]
    assert parameters["k"]["parameter_default"] == 10
    public = [d["api_name"] for d in _dependencies(blocks) if d["api_visibility"] == "public"]
    assert public == ["search"]
    names = [str(d["api_name"]) for d in _dependencies(blocks)]
    assert not any(name.startswith(("false", "value_")) for name in names), names
    assert "value_" not in httpx.get(f"{base}/gradio_api/info", timeout=30).text


def test_gradio_client_searches_with_the_names_the_page_shows(site):
    from gradio_client import Client

    base, _, _ = site
    client = Client(base, verbose=False)
    try:
        answer = client.predict(
            query="cardiomegaly and no edema", model="oracle", index="demo-cxr", k=4,
            api_name="/search",
        )  # fmt: skip
        defaults = client.predict(query="pneumothorax", api_name="/search")  # page's defaults
    finally:
        client.close()  # its heartbeat stream would hold the server's shutdown open
    assert answer["index"] == "demo-cxr" and answer["query"] == "cardiomegaly and no edema"
    assert [hit["rank"] for hit in answer["results"]] == [1, 2, 3, 4]
    first = answer["results"][0]
    assert first["id"].startswith("phantom-") and isinstance(first["score"], float)
    assert first["score_kind"] in ("cosine", "log_p")
    assert first["links"]["record"] == f"/api/v1/studies/demo-cxr/{first['id']}"
    assert "path" not in first and "/tmp" not in str(answer)
    assert defaults["index"] == "demo-cxr" and len(defaults["results"]) == 10


def test_a_pair_the_page_does_not_offer_is_refused_in_words(site):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    base, _, _ = site
    client = Client(base, verbose=False)
    try:
        with pytest.raises(AppError) as refused:
            client.predict(
                query="cardiomegaly", model="random", index="demo-cxr", api_name="/search"
            )
    finally:
        client.close()
    message = str(refused.value)
    assert "not offered" in message and "Error" not in message.split(":")[-1]


def test_the_page_search_button_still_renders_its_hit_list(site):
    base, blocks, _ = site
    page = next(d["id"] for d in _dependencies(blocks) if d["api_name"] == "search_page")
    client = QueueClient(base)
    try:
        result = client.call(page, list(PAGE_VALUES))
        assert result["output"]["success"], result["text"]
        assert result["output"]["output"]["data"][2].count('class="sr-hit') == 4  # 4 hits
    finally:
        client.close()


def _open_hit(client: QueueClient, index: int, position: int) -> dict:
    """The page's gallery click: the select event with the clicked position, same session."""
    import json

    body = {
        "data": [None],  # the hits are the session's state, never sent by the browser
        "fn_index": index,
        "session_hash": client.session_hash,
        "event_data": {"index": position, "value": None, "selected": True},
        "trigger_id": None,
    }
    event_id = client.http.post("/gradio_api/queue/join", json=body).json()["event_id"]
    with client.http.stream(
        "GET", "/gradio_api/queue/data", params={"session_hash": client.session_hash}
    ) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if message.get("event_id") == event_id and message["msg"] == "process_completed":
                    return message
    raise AssertionError("the select event did not complete")


def test_opening_a_hit_on_the_page_is_audited_on_real_indices_only(site):
    from medheb_app.api.audit import events
    from tests.web_client import fn_index

    base, blocks, services = site
    page = next(d["id"] for d in _dependencies(blocks) if d["api_name"] == "search_page")
    select = fn_index(blocks, "build_search_tab.<locals>._select")
    before = len(events(services.store))
    client = QueueClient(base)
    try:
        searched = client.call(page, ["lungs", None, "random", "ward-cxr", 3, "auto", False,
                                      "volume", 0])  # fmt: skip
        assert searched["output"]["success"], searched["text"]
        opened = _open_hit(client, select, 1)
        assert opened["success"] and "<h4>Report</h4>" in opened["output"]["data"][1]
        second_id = opened["output"]["data"][1].split(" · ")[1].split("</h3>")[0]
        assert _open_hit(client, select, 7)["output"]["data"][1] == ""  # no such hit: nothing
        demo = client.call(page, list(PAGE_VALUES))  # the synthetic demo: never logged
        assert demo["output"]["success"]
        assert _open_hit(client, select, 0)["output"]["data"][1]
    finally:
        client.close()
    logged = [
        (e.channel, e.action, e.index, e.query, e.count)
        for e in events(services.store)[before:]
        if e.action == "record"
    ]
    assert logged == [("ui", "record", "ward-cxr", second_id, 1)]
    assert all(e.who.startswith("anonymous:") for e in events(services.store)[before:])

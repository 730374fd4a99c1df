"""Issue 23 items 4 and 5 over HTTP (tests/api_site.py: the demo index, an unlabelled
folder index "ward-cxr"): each hit says whether the index's probes were fit on it and how
its p was obtained; a token may include training studies, an anonymous caller may not; a
finding the index has no labels for, and logic on an unlabelled index, are a 422
problem+json with the sentence."""

from __future__ import annotations

import pytest

from tests.api_site import running_site
from tests.test_api_http import assert_problem

QUERY = "pleural effusion and no cardiomegaly"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("honest-api")
    with running_site(root, {"TRUST_PROXY_HEADERS": "1"}, api_token_rate=60) as running:
        yield running


def test_hits_carry_the_training_mark_and_training_studies_are_left_out(site) -> None:
    body = {"text": QUERY, "k": 10, "ranking": "logic"}
    with site.client() as client:
        default = client.post("/search", json=body)
    assert default.status_code == 200, default.text
    answer = default.json()
    assert answer["ranking"] == "logic" and answer["results"]
    for hit in answer["results"]:
        assert hit["is_training_study"] is False and hit["p_fit"] == "held-out"
        assert hit["split"] != "train"
    assert any("left out" in warning for warning in answer["warnings"])

    with site.client("search") as client:
        shown = client.post("/search", json={**body, "include_training": True}).json()
    training = [hit for hit in shown["results"] if hit["is_training_study"]]
    assert training and {hit["p_fit"] for hit in training} == {"out-of-fold"}
    assert all(hit["split"] == "train" for hit in training)

    with site.client() as client:  # anonymous: the public page's results only
        refused = client.post("/search", json={**body, "include_training": True})
    problem = assert_problem(refused, 422, "search-refused", site)
    assert "signed-in users and API tokens" in problem["detail"]


def test_a_finding_without_labels_and_logic_on_an_unlabelled_index_are_422(site) -> None:
    with site.client() as client:
        emphysema = client.post("/search", json={"text": "emphysema and no effusion"})
    problem = assert_problem(emphysema, 422, "search-refused", site)
    assert "This index does not search by Emphysema" in problem["detail"]

    with site.client("search") as client:
        logic = client.post(
            "/search",
            json={"text": "pleural effusion", "index": "ward-cxr", "model": "random",
                  "ranking": "logic"},
        )  # fmt: skip
        similar = client.post(
            "/search", json={"text": "pleural effusion", "index": "ward-cxr", "model": "random"}
        )
    problem = assert_problem(logic, 422, "search-refused", site)
    assert "offers similarity search only" in problem["detail"]
    assert similar.status_code == 200, similar.text
    answer = similar.json()
    assert answer["ranking"] == "similarity" and answer["results"]
    assert all(hit["satisfies"] is None for hit in answer["results"])

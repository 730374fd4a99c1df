"""While a reader study is open, nobody but an admin searches with the models it compares.

The adversarial pass at 7468bff (B2) signed in as a rater, searched the public REST API with
the compared model over the same gallery (the task's own instruction prefix, or the item's
query image by upload) and matched the returned images to each side: 9 of 9 sides named
before voting. The page, its Gradio /search and the REST search now refuse a compared model
to every caller but an admin until the study closes (services.search.SearchService.blinded).
"""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
from PIL import Image

from medheb_app.models.registry import identity
from medheb_app.services.search import BLINDING_CHECK_S, SearchError
from medheb_app.study.items import close_study
from tests.api_site import running_site

QUERY = "pleural effusion and no cardiomegaly"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("blinding")
    with running_site(root, {}, study_pauses_search=True) as running:
        yield running


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((64, 64), 120, dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_an_open_study_pauses_its_models_for_everyone_but_admins(site):
    with site.client() as anonymous:
        refused = anonymous.post("/search", json={"text": QUERY, "k": 3})  # the default: oracle
        assert refused.status_code == 403
        assert refused.json()["type"].endswith("/problems/blinded")
        assert "open reader study" in refused.json()["detail"]
        upload = anonymous.post(
            "/search/image", files={"file": ("q.png", _png(), "image/png")}, data={"k": "3"}
        )
        assert upload.status_code == 403 and "open reader study" in upload.text
    for scope in ("search", "read", "resolve"):
        with site.client(scope) as client:
            assert client.post("/search", json={"text": QUERY, "k": 3}).status_code == 403
    with site.client("admin") as admin:  # the study's owner may still look
        assert admin.post("/search", json={"text": QUERY, "k": 3}).status_code == 200
    with pytest.raises(SearchError, match="open reader study") as caught:  # the page's search
        site.services.search.public(QUERY, None, None, "demo-cxr", 3, "auto")
    assert caught.value.field == "model"


def test_closing_the_study_gives_the_models_back(site):
    close_study(site.services.store, "api-study")
    try:
        time.sleep(BLINDING_CHECK_S + 0.2)  # the open studies are read again after this long
        with site.client() as anonymous:
            assert anonymous.post("/search", json={"text": QUERY, "k": 3}).status_code == 200
        assert site.services.search.public(QUERY, None, None, "demo-cxr", 3, "auto").results
    finally:
        close_study(site.services.store, "api-study", closed=False)


def test_an_alias_of_a_compared_model_is_the_same_model(site):
    settings = site.settings
    assert identity("dual-lite", settings) == identity("dual-lite@report", settings)
    assert identity(" oracle ", settings) == identity("oracle", settings)
    assert identity("dual-lite", settings) != identity("dual-lite@label-aware", settings)

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
from collections.abc import Iterator

import numpy as np
import pytest
from PIL import Image

from medheb_app.models.registry import identity, lineage
from medheb_app.services import search as search_service
from medheb_app.services.search import SearchError, SearchService
from medheb_app.store.db import Store
from medheb_app.store.study_tables import PreferenceStudy, utcnow
from medheb_app.study.identity import create_invitations
from medheb_app.study.items import close_study, list_studies, open_study_models
from tests.api_site import running_site

QUERY = "pleural effusion and no cardiomegaly"
# How long a read of the open studies' models is reused here: the service's BLINDING_CHECK_S
# (2 s) made each of the three waits for a fresh read 2.2 s of an idle worker.
RE_READ_S = 0.3


@pytest.fixture(scope="module", autouse=True)
def quick_re_read() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(search_service, "BLINDING_CHECK_S", RE_READ_S)
        yield


@pytest.fixture(scope="module")
def site(tmp_path_factory, quick_re_read):
    root = tmp_path_factory.mktemp("blinding")
    with running_site(root, {}, study_pauses_search=True) as running:
        study_id = next(
            s["id"] for s in list_studies(running.services.store) if s["name"] == "api-study"
        )
        create_invitations(running.services.store, study_id, 1)  # a rater can be in it now
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
        # each refused probe is in the audit log, with who asked (a synthetic index too)
        paused = [e for e in admin.get("/audit").json() if e["action"] == "search-paused"]
        assert {e["who"].split(":")[0] for e in paused} >= {"anonymous", "token"}, paused
        assert {e["route"] for e in paused} >= {"POST /api/v1/search", "POST /api/v1/search/image"}
        assert all(e["query"] == "model oracle" and e["index"] == "demo-cxr" for e in paused)
    with pytest.raises(SearchError, match="open reader study") as caught:  # the page's search
        site.services.search.public(QUERY, None, None, "demo-cxr", 3, "auto")
    assert caught.value.field == "model"


def test_closing_the_study_gives_the_models_back(site):
    close_study(site.services.store, "api-study")
    try:
        time.sleep(RE_READ_S + 0.2)  # the open studies are read again after this long
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


def test_a_checkpoint_trained_from_the_same_towers_is_the_same_family(site):
    """Adversarial pass at 65cb8e6: with dual-lite paused, dual-lite@label-aware (the page's
    default) matched a dual-lite side's images on 6 of 6 items; every checkpoint trained here
    from the shipped towers is now one family."""
    settings = site.settings
    family = lineage("dual-lite", settings)
    assert (
        lineage("dual-lite@label-aware", settings)
        == family
        == lineage("dual-lite@report", settings)
    )
    assert lineage("medemb-lite", settings) == family
    assert lineage("random", settings) != family != lineage("oracle", settings)
    assert lineage("random", settings) != lineage("oracle", settings)


def _study(session, name: str, models: list[str], **fields) -> PreferenceStudy:
    study = PreferenceStudy(
        name=name, models=models, n_queries=1, raters_per_item=1, reveal_after_vote=False, seed=0,
        **fields,
    )  # fmt: skip
    session.add(study)
    session.flush()
    return study


def test_only_a_study_a_rater_can_be_in_pauses_its_models_and_their_family(site, tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'studies.sqlite'}")
    with store.session() as session:
        _study(session, "nobody-can-enter", ["dual-lite", "random"])
    service = SearchService(site.settings, store)
    assert open_study_models(store) == set()  # e.g. the showcase study without an admin
    assert service.blinded("dual-lite@label-aware") is None
    with store.session() as session:
        invited = session.query(PreferenceStudy).filter_by(name="nobody-can-enter").one().id
    create_invitations(store, invited, 1)
    with store.session() as session:
        _study(session, "open-enrolment", ["oracle"], open_enrolment=True)
        _study(session, "closed", ["mllm:/nowhere"], open_enrolment=True, closed_at=utcnow())
    assert open_study_models(store) == {"dual-lite", "random", "oracle"}
    time.sleep(RE_READ_S + 0.2)  # the open studies are read again after this long
    for spec in ("dual-lite", "dual-lite@label-aware", " dual-lite@report", "random", "oracle"):
        assert "open reader study" in service.blinded(spec), spec
    assert service.blinded("mllm:/nowhere") is None

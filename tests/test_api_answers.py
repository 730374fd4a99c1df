"""The API's answer cache (medheb_app.api.answers) over HTTP against the real app: a repeated
text search is answered from it and still audited; a rebuilt index, another caller's rights or
a refused request never get a kept answer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from medheb_app.api.audit import events


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from tests.api_site import running_site

    with running_site(tmp_path_factory.mktemp("api-answers"), {"TRUST_PROXY_HEADERS": "1"}) as up:
        yield up


def _ranked(reply) -> list[tuple[str, float]]:
    assert reply.status_code == 200, reply.text
    return [(hit["id"], hit["score"]) for hit in reply.json()["results"]]


def _without_timings(reply) -> dict:
    body = reply.json()
    body.pop("timings_ms")
    return body


def test_a_repeated_search_is_answered_from_the_cache_and_audited_each_time(site):
    query = {"text": "w2 target lungs", "index": "ward-cxr", "k": 3, "ranking": "similarity"}
    mark = max((e.id for e in events(site.services.store)), default=0)
    with site.client("search") as client:
        first, second = client.post("/search", json=query), client.post("/search", json=query)
    assert "cached" not in first.json()["timings_ms"]
    assert second.json()["timings_ms"]["cached"] >= 0.0
    assert _without_timings(first) == _without_timings(second)
    logged = [
        (e.who, e.index, e.query, e.count)
        for e in events(site.services.store)
        if e.id > mark and e.action == "search"
    ]
    who = f"token:{site.token_ids['search']}"
    assert logged == [(who, "ward-cxr", "w2 target lungs", 3)] * 2


def test_a_rebuilt_index_is_never_answered_from_its_old_build(site, tmp_path):
    from medheb_app.evidence.phantoms.saved import corpora_root
    from medheb_app.index.build import build_from_source

    # one saved corpus's films: corpora of one seed share their first studies and file names,
    # so films drawn across corpora could give the two builds the same item ids
    by_corpus: dict[Path, list[Path]] = {}
    for png in sorted(corpora_root(site.settings).rglob("*.png")):
        by_corpus.setdefault(png.parent, []).append(png)
    pngs = max(by_corpus.values(), key=len)
    old, new = tmp_path / "old", tmp_path / "new"
    for folder, chosen in ((old, pngs[:5]), (new, pngs[10:14])):
        folder.mkdir()
        for png in chosen:
            shutil.copy(png, folder / f"{folder.name}-{png.name}")
    build_from_source(f"folder:{old}", "random", "ward-two", site.settings)
    query = {"text": "w1 lungs", "index": "ward-two", "k": 4, "ranking": "similarity"}
    with site.client("search") as client:
        before = _ranked(client.post("/search", json=query))
        assert client.post("/search", json=query).json()["timings_ms"].get("cached") is not None
        build_from_source(f"folder:{new}", "random", "ward-two", site.settings, replace=True)
        after = client.post("/search", json=query)
    assert "cached" not in after.json()["timings_ms"]
    rebuilt = {hit["id"] for hit in after.json()["results"]}
    assert rebuilt.isdisjoint(hit for hit, _ in before) and len(rebuilt) == 4


def test_another_callers_rights_never_get_a_kept_answer(site):
    training = {"text": "pleural effusion and no cardiomegaly", "k": 3, "include_training": True}
    with site.client("search") as token:
        assert token.post("/search", json=training).status_code == 200
        assert token.post("/search", json=training).json()["timings_ms"].get("cached") is not None
    with site.client() as anonymous:  # the token's kept answer is not the anonymous caller's
        refused = anonymous.post("/search", json=training)
        assert refused.status_code == 422 and "Training studies" in refused.text
        plain = {"text": "pleural effusion and no cardiomegaly", "k": 3}
        first = anonymous.post("/search", json=plain)
        assert "cached" not in first.json()["timings_ms"]  # kept for the token only
        assert "cached" in anonymous.post("/search", json=plain).json()["timings_ms"]
    with site.client("search") as token:
        assert "cached" not in token.post("/search", json=plain).json()["timings_ms"]


def test_answers_are_kept_per_model_object_and_logic_state_and_bounded():
    from types import SimpleNamespace

    from medheb_app.api.answers import AnswerCache
    from medheb_app.ranking import index_logic
    from medheb_app.search import PROBES_NOT_READY, Prepared, SearchRequest

    def request(text: str) -> SearchRequest:
        return SearchRequest(text, None, text, "m", "ix", 3, "main", "auto", True)

    class Model:
        card = SimpleNamespace(fingerprint="f1")

    class Build:
        directory = Path("/indices/ix/f1")

    model, build = Model(), Build()
    cache = AnswerCache(capacity=2)
    ask = Prepared(request("a"), model, build)  # type: ignore[arg-type]
    cache.put(ask, "anonymous", {"results": [1], "warnings": []}, b"{}")
    assert cache.get(ask, "anonymous").count == 1
    assert cache.get(ask, "search") is None  # another caller's rights
    assert cache.get(Prepared(ask.request, Model(), build), "anonymous") is None  # reloaded
    cache.put(ask, "anonymous", {"results": [], "warnings": []}, b"{}")
    assert cache.get(Prepared(ask.request, model, Build()), "anonymous") is None  # rebuilt
    cache.put(ask, "anonymous", {"results": [], "warnings": []}, b"{}")
    index_logic._generation += 1  # a logic state installed after the answer was made
    assert cache.get(ask, "anonymous") is None
    pending = Prepared(request("b"), model, build)  # type: ignore[arg-type]
    cache.put(pending, "anonymous", {"results": [], "warnings": [PROBES_NOT_READY]}, b"{}")
    assert cache.get(pending, "anonymous") is None  # made while probes were not ready
    for text in ("c", "d", "e"):
        cache.put(Prepared(request(text), model, build), "anonymous", {"results": []}, b"{}")
    kept = [cache.get(Prepared(request(t), model, build), "anonymous") for t in "cde"]
    assert [answer is not None for answer in kept] == [False, True, True]

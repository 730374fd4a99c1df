"""One index builder: the demo and `index build --source phantom` of one corpus answer alike,
and a CLI-built index is ready for a public logic-aware search as soon as the build ends."""

from __future__ import annotations

import json

import pytest

from medheb_app.cli import main
from medheb_app.demo import DEMO_CXR, ensure_demo
from medheb_app.index.catalog import load_index
from medheb_app.ranking import index_logic
from medheb_app.search import PROBES_NOT_READY, search
from medheb_app.settings import Settings

N = 60
QUERIES = (
    "pleural effusion and no cardiomegaly",
    "cardiomegaly with edema",
    "atelectasis, no pneumothorax",
)


@pytest.fixture
def both(settings: Settings, capsys: pytest.CaptureFixture[str]) -> tuple[Settings, dict]:
    ensure_demo(settings, n=N, models=["oracle"])
    args = ["index", "build", "--source", f"phantom:{N}", "--model", "oracle", "--name", "cli"]
    assert main([*args, "--json"]) == 0
    return settings, json.loads(capsys.readouterr().out)


def test_the_demo_and_the_cli_build_of_one_corpus_answer_alike(both) -> None:
    settings, report = both
    demo = load_index(DEMO_CXR, report_fingerprint(settings), settings)
    cli = load_index("cli", report_fingerprint(settings), settings)
    assert demo.info["vocabulary"] == cli.info["vocabulary"] == report["vocabulary"]
    assert len(report["vocabulary"]["names"]) == 10 and report["vocabulary"]["scheme"] == "coded"
    assert demo.info["corpus"]["dir"] == cli.info["corpus"]["dir"]  # one saved corpus
    for query in QUERIES:
        for ranking in ("logic", "similarity"):
            answers = [
                search(query_text=query, model_spec="oracle", index=name, k=10,
                       settings=settings, ranking=ranking)
                for name in (DEMO_CXR, "cli")
            ]  # fmt: skip
            assert answers[0].ranking == answers[1].ranking == ranking
            assert [h.id for h in answers[0].results] == [h.id for h in answers[1].results]
            assert [h.score for h in answers[0].results] == [h.score for h in answers[1].results]
            assert len(answers[0].results) == 10


def test_a_cli_built_index_answers_a_public_logic_search_right_after_the_build(both) -> None:
    settings, report = both
    assert report["logic"] is True and report["logic_note"] == ""
    index_logic._LOADED.clear()  # as a server process would: only what the build left on disk
    answer = search(query_text=QUERIES[0], model_spec="oracle", index="cli", k=10,
                    settings=settings, ranking="logic", public=True)  # fmt: skip
    assert answer.ranking == "logic" and PROBES_NOT_READY not in answer.warnings
    assert all(hit.satisfies for hit in answer.results)


def report_fingerprint(settings: Settings) -> str:
    from medheb_app.models.registry import load_embedder

    return load_embedder("oracle", settings).card.fingerprint

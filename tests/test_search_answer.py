"""The search service's answer is what a page shows: typed hits with text, boxes, form and a
typed score, from validate / rank / assemble called with a fake model and a real index."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from medheb_app.evidence.findings import CXR_RETRIEVE_10
from medheb_app.evidence.study import Box, Study
from medheb_app.index.catalog import load_index
from medheb_app.models.base import ModelCard, l2_normalise
from medheb_app.models.baselines import label_vector
from medheb_app.query.parser import parse_query
from medheb_app.search import SearchError, assemble, rank, validate
from medheb_app.settings import Settings
from tests.index_helpers import build_studies


class LabelEmbedder:
    """Images embed their labels, texts the findings they name: cosine follows the labels."""

    card = ModelCard(name="labels", version="1", dims=10, modalities=("text", "2d"), license="-")

    def encode(self, items: Sequence[object], instruction: str | None = None) -> np.ndarray:
        rows = []
        for item in items:
            if isinstance(item, Study):
                rows.append(label_vector(item.findings, CXR_RETRIEVE_10) + 0.01)
            else:
                named = set(parse_query(str(item)).positive)
                rows.append([1.0 if n in named else 0.01 for n in CXR_RETRIEVE_10])
        return l2_normalise(np.asarray(rows, dtype=np.float32))


def _corpus(n: int = 80) -> list[Study]:
    rng = np.random.default_rng(3)
    studies = []
    for i in range(n):
        effusion, heart = int(rng.random() < 0.4), int(rng.random() < 0.4)
        studies.append(
            Study(
                id=f"s{i:03d}",
                form="2d",
                pixels=np.full((16, 16), i / n, np.float32),
                text=f"Report {i}.",
                findings={"Pleural Effusion": effusion, "Cardiomegaly": heart},
                boxes=[Box("Pleural Effusion", 1, 2, 3, 4)] if effusion else [],
                split="train" if i % 4 else "test",
                source="toy",
            )
        )
    return studies


@pytest.fixture
def index(settings: Settings):
    model = LabelEmbedder()
    build_studies("toy", _corpus(), model, settings)
    return model, load_index("toy", model.card.fingerprint, settings)


def test_logic_hits_carry_text_boxes_form_and_a_typed_score(settings, index) -> None:
    model, loaded = index
    query = "pleural effusion and no cardiomegaly"
    # training studies included (issue 23: else left out), so the top 5 is not a handful
    request = validate(
        query, None, "labels", "toy", 5, settings, ranking="logic", include_training=True
    )
    answer = assemble(request, rank(request, model, loaded, settings), model, loaded)
    assert answer.ranking == "logic" and len(answer.results) == 5
    for hit in answer.results:
        assert hit.score_kind == "log_p" and hit.typed_score.kind == "log_p"
        assert hit.p_query == pytest.approx(math.exp(hit.score))
        p = hit.p_query
        if p < 1 - 1e-9:
            assert hit.log_odds == pytest.approx(math.log(p / (1 - p)), rel=1e-6)
        assert hit.text and hit.text.startswith("Report ") and hit.form == "2d"
        assert hit.boxes and hit.boxes[0]["finding"] == "Pleural Effusion"
        assert hit.satisfies is True
    payload = answer.to_json()["results"][0]
    assert {"id", "score", "findings", "source", "satisfies", "p_query", "log_odds"} <= set(payload)


def test_cosine_hits_say_so_and_have_no_probability(settings, index) -> None:
    model, loaded = index
    request = validate("cardiomegaly", None, "labels", "toy", 3, settings, ranking="similarity")
    answer = assemble(request, rank(request, model, loaded, settings), model, loaded)
    assert answer.ranking == "similarity"
    assert all(h.score_kind == "cosine" and h.p_query is None for h in answer.results)
    assert all(h.findings["Cardiomegaly"] == 1 for h in answer.results)


def test_validation_refuses_before_anything_is_loaded(settings) -> None:
    cases = {
        "k": dict(k="many"),
        "ranking": dict(ranking="fuzzy"),
        "query": dict(query_text="x" * 2000),
        "input": dict(query_text=None),
    }
    for field, change in cases.items():
        arguments = {"query_text": "edema", "k": 5, "ranking": "auto", **change}
        with pytest.raises(SearchError) as refused:
            validate(arguments["query_text"], None, "labels", "toy", arguments["k"], settings,
                     ranking=arguments["ranking"])  # fmt: skip
        assert refused.value.field == field
    with pytest.raises(SearchError, match="between 1 and 50"):
        validate("edema", None, "labels", "toy", 51, settings, public=True)

"""Training caption sampling (CXR-Retrieve sections 4.1 and 5.1)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from medheb_app.evidence.findings import CXR_RETRIEVE_10
from medheb_app.query.parser import parse_query
from medheb_app.train.captions import parse_mix, sample_caption, sample_captions

RICH = {"Atelectasis": 1, "Edema": 1, "Pneumonia": 0, "Fracture": 0, "Cardiomegaly": -1}


def test_mix_parsing() -> None:
    assert parse_mix("2:1:1") == (0.5, 0.25, 0.25)
    assert parse_mix((1, 0, 0)) == (1.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="single:pair:negation"):
        parse_mix("1:1")


def test_mix_proportions_on_a_rich_image() -> None:
    rng = np.random.default_rng(0)
    kinds = Counter(sample_caption(RICH, rng).kind for _ in range(4000))
    assert kinds["single"] / 4000 == pytest.approx(0.5, abs=0.03)
    assert kinds["pair"] / 4000 == pytest.approx(0.25, abs=0.03)
    assert kinds["negation"] / 4000 == pytest.approx(0.25, abs=0.03)


def test_caption_assertions_match_labels_and_text() -> None:
    rng = np.random.default_rng(1)
    index = {name: i for i, name in enumerate(CXR_RETRIEVE_10)}
    for _ in range(300):
        caption = sample_caption(RICH, rng)
        parsed = parse_query(caption.text)
        assert {n for n in CXR_RETRIEVE_10 if caption.y[index[n]] == 1} == set(parsed.positive)
        assert {n for n in CXR_RETRIEVE_10 if caption.y[index[n]] == -1} == set(parsed.negative)
        # positives are label 1, negated findings confirmed 0; uncertain is never used
        assert all(RICH.get(n) == 1 for n in parsed.positive)
        assert all(RICH.get(n) == 0 for n in parsed.negative)
        assert caption.y.dtype == np.int8 and caption.y.shape == (10,)


def test_fallbacks_and_images_without_positives() -> None:
    rng = np.random.default_rng(2)
    negation_only = (0, 0, 1)
    # one positive and no confirmed absence: only a single caption is possible
    only_single = {"Edema": 1, "Pneumonia": None}
    assert {sample_caption(only_single, rng, negation_only).kind for _ in range(50)} == {"single"}
    # two positives, no absence: negation falls back to a pair
    two = {"Edema": 1, "Atelectasis": 1}
    assert {sample_caption(two, rng, negation_only).kind for _ in range(50)} == {"pair"}
    assert sample_caption({"Edema": 0, "Pneumonia": -1}, rng) is None
    indices, captions = sample_captions([{"Edema": 0}, RICH, {}], rng)
    assert indices.tolist() == [1] and len(captions) == 1


def test_reproducible_by_seed() -> None:
    first = [sample_caption(RICH, np.random.default_rng(7)).text for _ in range(5)]
    again = [sample_caption(RICH, np.random.default_rng(7)).text for _ in range(5)]
    assert first == again

"""Saving and loading phantom corpora: every field and every pixel survives the round trip."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from medheb_app.evidence.phantoms import (
    generate_chest_corpus,
    generate_volume_corpus,
    load_corpus,
    save_corpus,
)
from medheb_app.evidence.study import EvidenceError


def _fields_except_pixels(study):
    values = dataclasses.asdict(study)
    values.pop("pixels")
    values.pop("path")
    return values


def test_round_trip_chest_and_volumes(tmp_path):
    studies = generate_chest_corpus(n=15, seed=3) + generate_volume_corpus(n_subjects=1, seed=3)
    manifest = save_corpus(studies, tmp_path / "demo")
    assert manifest.name == "manifest.jsonl" and manifest.is_file()
    assert len(list((tmp_path / "demo" / "images").glob("*.png"))) == 16
    assert len(list((tmp_path / "demo" / "volumes").glob("*.npy"))) == 3
    assert len(manifest.read_text().splitlines()) == len(studies)
    assert '"pixels"' not in manifest.read_text()

    loaded = load_corpus(tmp_path / "demo")
    assert len(loaded) == len(studies)
    for original, again in zip(studies, loaded, strict=True):
        assert again.pixels is None and again.path is not None
        assert _fields_except_pixels(again) == _fields_except_pixels(original)
        assert np.array_equal(again.load_pixels(), original.pixels), original.id
        assert again.evidence().forms == (("3d",) if original.form == "3d" else ("2d",))


def test_missing_corpus_is_explained(tmp_path):
    with pytest.raises(EvidenceError, match="demo build"):
        load_corpus(tmp_path)


def test_broken_manifest_line_is_explained(tmp_path):
    (tmp_path / "manifest.jsonl").write_text('{"id": "x", "form": "text"}\nnot json\n')
    with pytest.raises(EvidenceError, match="line 2"):
        load_corpus(tmp_path)

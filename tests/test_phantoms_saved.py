"""evidence/phantoms/saved.py: one saved copy per (kind, n, seed, generator), made once."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from medheb_app.evidence.phantoms import generate_chest_corpus, load_corpus, saved
from medheb_app.evidence.phantoms.corpus import quantise_image
from medheb_app.evidence.phantoms.saved import COMPLETE, CorpusKey, ensure_saved, saved_studies


def test_a_corpus_is_generated_once_and_read_back_pixel_for_pixel(tmp_path: Path) -> None:
    key = CorpusKey("cxr", 12, 3)
    directory, generated = ensure_saved(tmp_path, key)
    assert generated and directory.name == f"cxr-seed3-n12-g{saved.generator_version()}"
    assert (directory / COMPLETE).is_file()
    again, generated_again = ensure_saved(tmp_path, key)
    assert again == directory and not generated_again
    fresh = generate_chest_corpus(n=12, seed=3)
    loaded = load_corpus(directory)
    assert [s.id for s in loaded] == [s.id for s in fresh]
    assert np.array_equal(loaded[0].load_pixels(), quantise_image(fresh[0].pixels))


def test_concurrent_callers_generate_it_once(tmp_path: Path, monkeypatch) -> None:
    calls: list[CorpusKey] = []
    real = saved._generate

    def counting(key: CorpusKey):
        calls.append(key)
        return real(key)

    monkeypatch.setattr(saved, "_generate", counting)
    key = CorpusKey("cxr", 10, 0)
    results: list[tuple[Path, bool]] = []
    threads = [
        threading.Thread(target=lambda: results.append(ensure_saved(tmp_path, key)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and sorted(g for _, g in results) == [False, False, True]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".staging")]


def test_a_folder_without_its_marker_is_regenerated(tmp_path: Path) -> None:
    key = CorpusKey("volumes", 2, 0)
    half = saved.corpus_path(tmp_path, key)
    half.mkdir(parents=True)
    (half / "manifest.jsonl").write_text("")  # an interrupted writer of an older layout
    directory, generated = ensure_saved(tmp_path, key)
    assert generated and directory == half and len(load_corpus(directory)) > 0


def test_the_key_names_the_generator_and_rejects_nonsense(monkeypatch) -> None:
    monkeypatch.setattr(saved, "generator_version", lambda: "changed000")
    assert CorpusKey("cxr", 5, 1).folder_name == "cxr-seed1-n5-gchanged000"
    with pytest.raises(ValueError, match="kind"):
        CorpusKey("mri", 5, 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one"):
        CorpusKey("cxr", 0, 1)


def test_saved_studies_are_shared_per_folder(tmp_path: Path) -> None:
    key = CorpusKey("cxr", 10, 5)
    assert saved_studies(tmp_path, key) is saved_studies(tmp_path, key)

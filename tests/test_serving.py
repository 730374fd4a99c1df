"""serving.built_pairs / offered: memoised on the index and model folders' mtimes, re-read at
most every STAMP_FRESH_S seconds, so another process's new build is offered within that window,
and this process's at once; only public indices (synthetic, or published by the operator) are
offered to anonymous callers."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from medheb_app import serving
from medheb_app.evidence.study import Study
from medheb_app.settings import Settings
from tests.index_helpers import build_studies


def _studies(n: int = 6) -> list[Study]:
    return [
        Study(id=f"s{i}", form="2d", pixels=np.full((8, 8), i / 10, np.float32)) for i in range(n)
    ]


def test_built_pairs_read_the_catalog_once_until_an_index_folder_changes(
    settings: Settings, monkeypatch
) -> None:
    from medheb_app.models.registry import load_embedder

    oracle = load_embedder("oracle", settings)
    build_studies("first", _studies(), oracle, settings)
    reads: list[Path] = []
    real = serving.list_indices
    monkeypatch.setattr(serving, "list_indices", lambda s: reads.append(s.index_dir) or real(s))
    assert serving.built_pairs(settings) == {"first": ["oracle"]}
    assert serving.built_pairs(settings) == {"first": ["oracle"]}
    assert len(reads) == 1  # the second answer came from the memo
    build_studies("second", _studies(), oracle, settings)  # in this process: seen at once
    assert serving.built_pairs(settings) == {"first": ["oracle"], "second": ["oracle"]}
    assert len(reads) == 2


def test_only_synthetic_or_published_indices_are_offered(settings: Settings) -> None:
    from dataclasses import replace

    from medheb_app.models.registry import load_embedder
    from medheb_app.search import SearchError, check_offered

    oracle = load_embedder("oracle", settings)
    real = _studies()
    fake = [replace(study, id=f"f{i}", synthetic=True) for i, study in enumerate(_studies())]
    build_studies("ward", real, oracle, settings)
    build_studies("demo", fake, oracle, settings)
    build_studies("mixed", real[:3] + fake[:3], oracle, settings)  # one real study: not public
    assert serving.built_pairs(settings) == {n: ["oracle"] for n in ("demo", "mixed", "ward")}
    assert serving.offered(settings) == {"demo": ["oracle"]}
    published = replace(settings, public_indices=("ward",))
    assert sorted(serving.offered(published)) == ["demo", "ward"]
    assert sorted(serving.offered(replace(settings, public_indices=("*",)))) == [
        "demo",
        "mixed",
        "ward",
    ]
    try:  # the refusal names only what an anonymous caller may pick
        check_offered("oracle", "ward", settings)
    except SearchError as error:
        assert str(error) == "Index 'ward' is not offered here; pick one of: demo."
    else:
        raise AssertionError("an unpublished real index was offered")
    check_offered("oracle", "ward", settings, anonymous=False)  # a token's reach
    assert serving.default_model(settings, "ward") == "oracle"
    assert Settings.from_env(data_dir=settings.data_dir).public_indices == ()


def test_the_operator_publishes_indices_by_environment(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MEDHEB_PUBLIC_INDICES", " nih, ward ,")
    assert Settings.from_env(data_dir=tmp_path).public_indices == ("nih", "ward")


def test_a_burst_of_requests_takes_the_folder_stamp_once(settings: Settings, monkeypatch) -> None:
    taken: list[tuple] = []
    real = serving.folder_stamp
    monkeypatch.setattr(
        serving, "folder_stamp", lambda roots, depth: taken.append(roots) or real(roots, depth)
    )
    for _ in range(5):
        serving.offered(settings)
    assert len(taken) == 2  # the index folder and the model folders, once each
    time.sleep(serving.STAMP_FRESH_S)
    serving.offered(settings)
    assert len(taken) == 4


def test_the_folder_stamp_sees_a_new_sub_folder(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    before = serving.folder_stamp((tmp_path,), depth=1)
    (tmp_path / "a" / "b").mkdir()
    assert serving.folder_stamp((tmp_path,), depth=1) != before
    assert serving.folder_stamp((tmp_path / "missing",), depth=1) == ()

"""serving.offered: memoised on the index and model folders' mtimes, re-read at most every
STAMP_FRESH_S seconds, so another process's new build is offered within that window, and
this process's at once."""

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


def test_offered_reads_the_catalog_once_until_an_index_folder_changes(
    settings: Settings, monkeypatch
) -> None:
    from medheb_app.models.registry import load_embedder

    oracle = load_embedder("oracle", settings)
    build_studies("first", _studies(), oracle, settings)
    reads: list[Path] = []
    real = serving.list_indices
    monkeypatch.setattr(serving, "list_indices", lambda s: reads.append(s.index_dir) or real(s))
    assert serving.offered(settings) == {"first": ["oracle"]}
    assert serving.offered(settings) == {"first": ["oracle"]}
    assert len(reads) == 1  # the second answer came from the memo
    build_studies("second", _studies(), oracle, settings)  # in this process: seen at once
    assert serving.offered(settings) == {"first": ["oracle"], "second": ["oracle"]}
    assert len(reads) == 2


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

"""--engine ray: a Ray Data pipeline that gives the local engine's vectors and rankings."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from medheb_app.index.build import build_from_source
from medheb_app.index.catalog import load_index
from medheb_app.index.ray_engine import default_actors
from medheb_app.models.registry import load_embedder
from tests.test_index_command import png_folder

QUERIES = (
    "pleural effusion",
    "cardiomegaly and no pleural effusion",
    "pneumothorax without atelectasis",
)


def test_actor_pool_is_sized_to_the_cluster() -> None:
    assert default_actors({"CPU": 16.0}) == (16, 0.0)
    assert default_actors({"CPU": 1.0}) == (1, 0.0)
    assert default_actors({"CPU": 64.0, "GPU": 4.0}) == (4, 1.0)


@pytest.mark.slow
def test_ray_engine_matches_the_local_engine(settings, tmp_path, ray_cluster) -> None:
    root = png_folder(tmp_path / "pngs", n=24, corrupt=1)
    source = f"folder:{root}"
    settings = replace(settings, pseudonym_key="one lab's key")  # both data folders' ids agree
    local = build_from_source(source, "dual-lite", "lab", settings, shard_size=8)
    other = replace(settings, data_dir=tmp_path / "ray-data")  # its own embedding cache
    ray_report = build_from_source(
        source, "dual-lite", "lab", other, engine="ray", shard_size=8, batch_size=4,
        ray_actors=2,
    )  # fmt: skip
    assert ray_report.engine == "ray" and ray_report.embedded == 24 and ray_report.reused == 0
    assert ray_report.failed == local.failed == 1 and ray_report.n_items == local.n_items == 24
    fingerprint = load_embedder("dual-lite", settings).card.fingerprint
    a, b = load_index("lab", fingerprint, settings), load_index("lab", fingerprint, other)
    assert a.index.ids == b.index.ids
    assert np.abs(a.index.vectors() - b.index.vectors()).max() <= 1e-5
    assert a.items == b.items
    queries = load_embedder("dual-lite", settings).encode(list(QUERIES))
    assert (a.search(queries, 10)[1] == b.search(queries, 10)[1]).all()
    again = build_from_source(
        source, "dual-lite", "lab", other, engine="ray", shard_size=8, replace=True
    )
    assert again.reused == 24 and again.embedded == 0  # the driver's cache is the truth

"""--engine ray: a Ray Data pipeline that gives the local engine's vectors and rankings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from medheb_app.index import build as build_module
from medheb_app.index.build import build_from_source, local_engine
from medheb_app.index.catalog import load_index, query_vocabulary
from medheb_app.index.ray_engine import cluster_device, default_actors
from medheb_app.models.device import DeviceError, check_device_text
from medheb_app.models.registry import load_embedder
from medheb_app.ranking.index_logic import index_probe
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
    # 17 files (one corrupt): 3 shards of 8 and 5 batches of 4, one more than the 2 actors
    # hold in flight, so a batch is also sent as one comes back
    n = 16
    root = png_folder(tmp_path / "pngs", n=n, corrupt=1)
    source = f"folder:{root}"
    settings = replace(settings, pseudonym_key="one lab's key")  # both data folders' ids agree
    local = build_from_source(source, "dual-lite", "lab", settings, shard_size=8)
    other = replace(settings, data_dir=tmp_path / "ray-data")  # its own embedding cache
    ray_report = build_from_source(
        source, "dual-lite", "lab", other, engine="ray", shard_size=8, batch_size=4,
        ray_actors=2,
    )  # fmt: skip
    assert ray_report.engine == "ray" and ray_report.embedded == n and ray_report.reused == 0
    assert ray_report.failed == local.failed == 1 and ray_report.n_items == local.n_items == n
    fingerprint = load_embedder("dual-lite", settings).card.fingerprint
    a, b = load_index("lab", fingerprint, settings), load_index("lab", fingerprint, other)
    assert a.index.ids == b.index.ids
    assert np.abs(a.index.vectors() - b.index.vectors()).max() <= 1e-5
    assert a.items == b.items
    queries = load_embedder("dual-lite", settings).encode(list(QUERIES))
    assert (a.search(queries, 10)[1] == b.search(queries, 10)[1]).all()
    again = build_from_source(  # one actor: only the corrupt file is tried again
        source, "dual-lite", "lab", other, engine="ray", shard_size=8, replace=True, ray_actors=1
    )
    assert again.reused == n and again.embedded == 0  # the driver's cache is the truth


def test_a_ray_build_loads_the_model_for_an_unfitted_probe(settings, tmp_path, monkeypatch) -> None:
    """The Ray driver holds only the card; when the logic step must read a finding's name
    (too few positives to fit its probe) it loads the model instead of failing the build."""
    root = png_folder(tmp_path / "pngs", n=12, corrupt=0)  # 4 Nodule positives: a probe
    frame = pd.read_csv(root / "labels.csv")
    frame["Scar"] = [1] + [0] * (len(frame) - 1)  # one positive: no probe for Scar
    frame.to_csv(root / "labels.csv", index=False)
    loaded_here = []

    def actors_in_process(shards, spec, settings, batch_size, *_args):  # Ray's contract
        embedder = load_embedder(spec, settings)
        loaded_here.append(spec)
        return local_engine(shards, embedder, settings, batch_size)

    monkeypatch.setattr(build_module, "ray_engine", actors_in_process)
    settings = replace(settings, pseudonym_key="one lab's key")
    report = build_from_source(f"folder:{root}", "dual-lite", "lab", settings, engine="ray")
    assert loaded_here == ["dual-lite"] and report.engine == "ray" and report.n_items == 12
    assert report.logic and not report.logic_note
    fingerprint = load_embedder("dual-lite", settings).card.fingerprint
    index = load_index("lab", fingerprint, settings)
    embedder = load_embedder("dual-lite", settings)
    vocabulary = query_vocabulary(index)
    probe = index_probe(index, embedder, settings, index.index.vectors(), vocabulary, fit=False)
    fitted = dict(zip(probe.findings, probe.fitted, strict=True))
    assert fitted == {"Nodule": True, "Scar": False}  # the case that needs the text tower


def test_a_ray_build_takes_its_device_from_the_cluster() -> None:
    assert cluster_device("auto", {"CPU": 2.0}) == "cpu"
    assert cluster_device("auto", {"CPU": 64.0, "GPU": 4.0}) == "cuda"
    assert cluster_device("cuda:1", {"GPU": 2.0}) == "cuda:1"
    assert cluster_device("cpu", {"GPU": 2.0}) == "cpu"
    with pytest.raises(DeviceError, match="the Ray cluster has no GPU"):
        cluster_device("cuda", {"CPU": 2.0})
    assert check_device_text(" CUDA:0 ") == "cuda:0" and check_device_text(None) == "auto"
    with pytest.raises(DeviceError, match="Unknown device"):
        check_device_text("tpu")


BUILD_IN_A_FRESH_PROCESS = """
import json, sys
from pathlib import Path
from medheb_app.index.build import build_from_source
from medheb_app.settings import Settings
report = build_from_source(f"folder:{sys.argv[1]}", "dual-lite", "lab", Settings.from_env(),
                           engine="ray", ray_actors=1)
print(json.dumps({"n": report.n_items, "device": report.device, "torch": "torch" in sys.modules}))
"""


@pytest.mark.slow
def test_a_ray_build_driver_holds_no_torch(tmp_path) -> None:
    """The driver of a Ray build never imports torch (~450 MB of RSS beside the actors' own
    copies, BENCHMARKS.md "Ray engine memory"): not for the model, nor to ask for a GPU."""
    root = png_folder(tmp_path / "pngs", n=6, corrupt=0, labels=False)
    env = {"DATA_DIR": str(tmp_path / "data"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", BUILD_IN_A_FRESH_PROCESS, str(root)],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"n": 6, "device": "cpu", "torch": False}

"""`bench run --engine ray`: task x model pairs as Ray tasks, the local engine's files and rows.

The driver writes every result file and store row; workers only load models and score. The
two engines must agree on everything but timings, and the default engine never imports Ray.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from medheb_app.cli import main
from medheb_app.eval import runner
from medheb_app.eval.results import Summary
from medheb_app.index.cache import EmbeddingCache
from medheb_app.models import registry
from medheb_app.settings import Settings
from medheb_app.store.db import Store
from medheb_app.store.runs import list_runs, results_of
from tests.conftest import link_shared_corpora

TASKS = ("phantom-cxr-t2i", "phantom-cxr-i2label")
MODELS = ("oracle", "random", "dual-lite")


def without_timing(value: Any) -> Any:
    """A loaded result file with every clock reading dropped (they differ run to run)."""
    drop = {"timing", "timing_s", "created", "started", "finished", "run_id", "out_dir", "engine"}
    if isinstance(value, dict):
        return {k: without_timing(v) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [without_timing(v) for v in value]
    return value


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """Equal, but for floats within 1e-5: a worker runs torch on one thread, this process on
    all cores, and the sums of a matrix product may round differently in the last digit (the
    tolerance of the index engines' contract)."""
    if isinstance(a, float) and isinstance(b, float):
        assert abs(a - b) <= 1e-5, f"{where}: {a} != {b}"
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def result_files(out: Path) -> dict[str, Any]:
    """Every JSON file of a run folder, by relative path, timings dropped."""
    return {
        str(path.relative_to(out)): without_timing(json.loads(path.read_text()))
        for path in sorted(out.rglob("*.json"))
    }


@contextmanager
def one_unit_at_a_time(ray: Any) -> Iterator[None]:
    """All but one of the cluster's CPUs held by a placement group (resources, no process):
    a run's units then go one after another through ONE worker process, which loads
    dual-lite once (the registry memoises it) instead of two workers loading torch and the
    weights side by side (~9 CPU-seconds each). What a unit computes does not change."""
    from ray.util.placement_group import placement_group, remove_placement_group

    group = placement_group([{"CPU": 1}] * (int(ray.cluster_resources()["CPU"]) - 1))
    assert group.wait(60), "the placement group was never granted"
    try:
        yield
    finally:
        remove_placement_group(group)


def stored_rows(settings: Settings, run_id: int) -> tuple[Any, list[tuple]]:
    store = Store.open(settings.database_url)
    run = next(r for r in list_runs(store) if r.id == run_id)
    rows = [(r.model, r.task, r.family, r.split, r.metrics) for r in results_of(store, run_id)]
    return run, rows


@pytest.mark.slow
def test_ray_engine_writes_the_local_engines_files_and_store_rows(
    settings: Settings,
    tmp_path: Path,
    capsys,
    monkeypatch: pytest.MonkeyPatch,
    ray_cluster,
    shared_phantom_corpora: Path,
) -> None:
    from medheb_app.evidence.phantoms.saved import CorpusKey
    from medheb_app.tasks import medheb

    # the suite shrunk to the 240-study chest corpus other modules share (2,000 cost 20 s to
    # generate for this test alone); the driver builds the tasks, so the patch reaches the
    # workers through them. They read the images from DATA_DIR: the session's copy, linked.
    monkeypatch.setattr(medheb, "CHEST_N", 240)
    chest = CorpusKey("cxr", medheb.CHEST_N, medheb.CHEST_SEED)
    link_shared_corpora(shared_phantom_corpora, settings, chest)
    base = ["bench", "run", "--suite", "medheb-lite", "--json"]
    for task in TASKS:
        base += ["--task", task]
    for model in MODELS:
        base += ["--model", model]
    local_out, ray_out = tmp_path / "local", tmp_path / "ray"

    def not_here(*args: object, **kwargs: object) -> None:
        raise AssertionError("the driver loaded a model: the Ray workers must")

    with (
        monkeypatch.context() as patch,  # Ray workers import their own, unpatched modules
        one_unit_at_a_time(ray_cluster),
    ):
        patch.setattr(runner, "load_ranker", not_here)
        patch.setattr(registry, "load_embedder", not_here)
        code = main([*base, "--out", str(ray_out), "--engine", "ray"])
    assert code == 0, capsys.readouterr().err
    remote = json.loads(capsys.readouterr().out)
    assert EmbeddingCache(settings.cache_dir).count() > 0  # workers filled the cache
    # the local run must embed afresh, not read the Ray run's vectors
    for path in settings.cache_dir.glob("embeddings.sqlite*"):
        path.unlink()
    assert main([*base, "--out", str(local_out)]) == 0, capsys.readouterr().err
    local = json.loads(capsys.readouterr().out)

    assert set(remote["models"]) == set(MODELS)
    assert {t["name"] for t in remote["tasks"]} == set(TASKS)
    assert without_timing(remote) == without_timing(local)
    local_files, ray_files = result_files(local_out), result_files(ray_out)
    assert set(ray_files) == {"summary.json"} | {f"{m}/{t}.json" for m in MODELS for t in TASKS}
    assert_same(ray_files, local_files)  # rankings, metrics and ids exactly; scores to 1e-5
    assert remote["models"]["dual-lite"]["tasks"]["phantom-cxr-t2i"]["hit@1"] > 0
    assert set(Summary.from_disk(ray_out).timing) == set(Summary.from_disk(local_out).timing)
    assert remote["settings"]["engine"] == "ray" and "engine" not in local["settings"]

    local_run, local_rows = stored_rows(settings, local["run_id"])
    ray_run, ray_rows = stored_rows(settings, remote["run_id"])
    assert ray_run.status == local_run.status == "finished"
    assert ray_run.suite == local_run.suite and ray_run.models == local_run.models
    assert ray_rows == local_rows and len(ray_rows) == len(MODELS) * len(TASKS)


@pytest.mark.slow
def test_ray_engine_reports_an_unknown_model_in_one_line(
    settings: Settings, tmp_path: Path, capsys, ray_cluster
) -> None:
    from tests.test_tasks_manifest import write_fixture

    write_fixture(tmp_path / "tasks")
    args = ["bench", "run", "--suite", str(tmp_path / "tasks"), "--model", "nope"]
    code = main([*args, "--out", str(tmp_path / "x"), "--engine", "ray"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "nope" in err
    assert "Traceback" not in err and "RayTaskError" not in err
    store = Store.open(settings.database_url)
    assert [r.status for r in list_runs(store)] == ["failed"]


def test_ray_address_needs_the_ray_engine(settings: Settings, tmp_path: Path, capsys) -> None:
    args = ["bench", "run", "--model", "oracle", "--out", str(tmp_path), "--ray-address", "auto"]
    assert main(args) == 2
    assert "--ray-address needs --engine ray" in capsys.readouterr().err


def test_the_local_engine_imports_no_ray(settings: Settings, tmp_path: Path) -> None:
    from tests.test_tasks_manifest import write_fixture

    write_fixture(tmp_path / "tasks")
    script = (
        "import sys\n"
        "from medheb_app.cli import main\n"
        f"args = ['bench', 'run', '--suite', {str(tmp_path / 'tasks')!r}, '--model', 'oracle',"
        f" '--out', {str(tmp_path / 'run')!r}, '--json']\n"
        "assert main(args) == 0\n"
        "print('RAY' if 'ray' in sys.modules else 'NO RAY', file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "DATA_DIR": str(settings.data_dir)},
        cwd=Path(__file__).resolve().parent.parent,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "NO RAY"


@pytest.mark.slow
def test_ray_engine_runs_cxr_retrieve_one_model_per_ray_task(
    settings: Settings, tmp_path: Path, capsys, ray_cluster
) -> None:
    from tests.test_cxr_cli import nih_fixture

    data = nih_fixture(tmp_path / "nih")
    base = ["bench", "run", "--suite", "cxr-retrieve", "--data", f"nih:{data}", "--split", "all"]
    base += ["--model", "oracle", "--model", "random", "--json"]
    assert main([*base, "--out", str(tmp_path / "local")]) == 0, capsys.readouterr().err
    local = json.loads(capsys.readouterr().out)
    code = main([*base, "--out", str(tmp_path / "ray"), "--engine", "ray"])
    assert code == 0, capsys.readouterr().err
    remote = json.loads(capsys.readouterr().out)
    assert remote["kind"] == "cxr-retrieve" and list(remote["models"]) == ["oracle", "random"]
    assert without_timing(remote) == without_timing(local)
    assert_same(result_files(tmp_path / "ray"), result_files(tmp_path / "local"))
    assert stored_rows(settings, remote["run_id"])[1] == stored_rows(settings, local["run_id"])[1]


@pytest.mark.slow
def test_a_cancelled_ray_run_is_marked_cancelled(
    settings: Settings, tmp_path: Path, ray_cluster
) -> None:
    import threading

    from medheb_app.eval.runner import run_suite
    from medheb_app.tasks.medheb import get_suite
    from tests.test_tasks_manifest import write_fixture

    write_fixture(tmp_path / "tasks")
    stop = threading.Event()
    stop.set()
    with pytest.raises(InterruptedError):
        run_suite(get_suite(str(tmp_path / "tasks")), ["oracle"], tmp_path / "run", settings,
                  stop=stop, engine="ray")  # fmt: skip
    store = Store.open(settings.database_url)
    assert [r.status for r in list_runs(store)] == ["cancelled"]
    assert not list((tmp_path / "run").rglob("*.json"))


def test_a_ray_run_is_no_source_of_a_models_rate() -> None:
    """Its per-model seconds are the driver's waits on units that ran side by side."""
    from medheb_app.eval.estimate import DEFAULT_RATE_NOTE, measured_rate, new_vectors_key

    def summary(engine: str | None, seconds: float) -> Summary:
        return Summary(
            suite="s", models={}, tasks=[], skipped={}, out_dir="x", started="", finished="",
            settings={"engine": engine} if engine else {},
            timing={"m_s": seconds, new_vectors_key("m"): 100},
        )  # fmt: skip

    history = [(2, summary("ray", 1.0)), (1, summary(None, 50.0))]
    assert measured_rate("m", history).seconds_per_item == 0.5  # the local run's 50 s / 100
    assert measured_rate("m", [(2, summary("ray", 1.0))]).source == DEFAULT_RATE_NOTE

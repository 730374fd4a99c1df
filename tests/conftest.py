"""Shared test set-up: offline environment, an isolated DATA_DIR, real-data locations, and how
the suite splits over pytest-xdist workers (pyproject's addopts run two, one per core).

Under xdist each worker is its own process with its own basetemp (BASETEMP/popen-gwN), so its
session fixtures (the PostgreSQL server, the Ray cluster) are its own; the saved phantom corpora
are the one thing the workers share, in BASETEMP/phantoms, behind the saved-corpus file lock.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import uuid
from collections.abc import Iterator

os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
# A machine with PYTHONDONTWRITEBYTECODE=1 (ours) made every run re-rewrite and re-compile every
# test module in each worker and every app subprocess: collection took 38.8 s a worker instead of
# 19.3 s from the cache pytest keeps in __pycache__ (git-ignored). Read before the controller
# starts its workers, so they and their subprocesses write the cache too.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

from pathlib import Path

import pytest
from _pytest import unraisableexception  # its gc_collect_iterations_key: pytest's tests set it

from medheb_app.settings import SHARED_DATA_DIR, Settings
from medheb_app.startup_heap import NO_FULL_COLLECTIONS
from medheb_app.store.db import Store
from tests.browser_harness import (  # noqa: F401 (the browser tests' fixtures)
    browser,
    oracle_workbench,
    page,
)

sys.dont_write_bytecode = False  # this process too (see PYTHONDONTWRITEBYTECODE above)

# No automatic full collections in a test process: with torch, gradio, Ray and pandas loaded,
# a worker holds 1.2-2.1 million objects, and Python's cycle collector walked them all ~20
# times a run (0.5-2.4 s each): 31 CPU-s of GC in the two workers, 13% of their CPU
# (BENCHMARKS.md, "Test suite time: the cycle collector"). The young generations still run, so
# short-lived cycles are freed as before; what survives them waits for an explicit
# gc.collect() or the process's end. Peak RSS stayed within the default's range.
gc.set_threshold(*gc.get_threshold()[:2], NO_FULL_COLLECTIONS)

XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1"... in a worker, else None
if XDIST_WORKER is not None:
    # Two workers on two cores: torch's default of one OpenMP thread per core would put four
    # spinning threads on two cores (the imports above load no torch or numpy; an explicit
    # value wins).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")


def _exit_without_teardown() -> None:
    """A worker's last step at exit: every other exit handler runs as at any exit (Ray's
    shutdown, PostgreSQL's stop, logging's flush, finalizers), then the process ends without
    the interpreter's own teardown. The worker has sent its results and its controller has told
    it to stop; the teardown of a process that loaded torch, Ray and FAISS took 2-10 s, which the
    controller waited for (xdist kills a worker after 10 s) at the end of every run."""
    atexit.unregister(_exit_without_teardown)
    atexit._run_exitfuncs()  # the handlers registered before this one, in the usual order
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if XDIST_WORKER is not None:
    atexit.register(_exit_without_teardown)

NIH_DIR = SHARED_DATA_DIR / "nih-cxr14-1000"
PUBMEDQA_DIR = SHARED_DATA_DIR / "pubmedqa"
PROSTATE_DIR = SHARED_DATA_DIR / "prostate-mri"


def require_shared(path: Path) -> Path:
    """Skip (with the reason) when ../shared/data is not beside the checkout."""
    if not path.exists():
        pytest.skip(f"real data not available: {path} (see ../shared/data/README.md)")
    return path


@pytest.fixture(scope="session", autouse=True)
def shared_phantom_corpora(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One saved phantom corpus per (kind, n, seed) for the whole session: every test's demo,
    phantom source and MedHEB-lite suite read it (they never write into a corpus), so a corpus
    is generated once, not once per test's DATA_DIR. A test that checks generation itself is
    marked `own_phantoms` and gets its DATA_DIR's own folder back."""
    from medheb_app.evidence.phantoms import saved

    if XDIST_WORKER is None:
        root = tmp_path_factory.mktemp("phantoms")
    else:  # every worker's basetemp is BASETEMP/popen-gwN: the corpora live once beside them
        root = tmp_path_factory.getbasetemp().parent / "phantoms"
        root.mkdir(exist_ok=True)
    patch = pytest.MonkeyPatch()
    patch.setattr(saved, "corpora_root", lambda _settings: root)
    yield root
    patch.undo()


def link_shared_corpora(shared: Path, settings: Settings, *keys: object) -> None:
    """Make the session's saved corpora for `keys` (generated first when absent) appear in
    settings.demo_dir as links, for code in other processes (Ray workers, app.py) that the
    corpora_root patch does not reach: they find the corpus saved, not generate it again. The
    readers only read a corpus; a link is removed, not followed, when a DATA_DIR is deleted."""
    from medheb_app.evidence.phantoms import saved

    settings.demo_dir.mkdir(parents=True, exist_ok=True)
    for key in keys:
        directory, _ = saved.ensure_saved(shared, key)  # type: ignore[arg-type]
        link = saved.corpus_path(settings.demo_dir, key)  # type: ignore[arg-type]
        if not link.exists():
            link.symlink_to(directory, target_is_directory=True)


def pytest_configure(config: pytest.Config) -> None:
    """No forced full collections at the run's end either: pytest's unraisable-exception plugin
    runs gc.collect() twice as a process stops, 2.3-2.4 s each in a worker, and the run waits
    for its last worker. Unraisable exceptions are still reported after every test."""
    key = getattr(unraisableexception, "gc_collect_iterations_key", None)
    if key is not None:
        config.stash[key] = 0


def pytest_collection_finish(session: pytest.Session) -> None:
    """Everything collection imported (the package, torch, gradio, the test modules) lives as
    long as the process: out of the cycle collector's reach, explicit collections skip it."""
    gc.freeze()


def _group(item: pytest.Item | None) -> str | None:
    """The item's xdist group name (its `xdist_group` mark), None without one."""
    mark = item.get_closest_marker("xdist_group") if item is not None else None
    return (mark.kwargs.get("name") or mark.args[0]) if mark is not None else None


@pytest.hookimpl(wrapper=True)  # before every plain hook: xdist's turns the marks into node ids
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Iterator[None]:
    """Group the tests for `--dist loadgroup`: a module's tests run on one worker (so a
    module-scoped app, site or trained model is built once, as without xdist), and every module
    with a test on the session's Ray cluster runs on one worker (one cluster, not one a worker).

    xdist 3.8 names a test's group by setting `item._nodeid`, which pytest 9 no longer reads
    (its node ids live in `_id`): every test was its own unit, so both workers built the same
    module fixtures, Ray clusters and session runs. The group suffix is set here instead."""
    if config.pluginmanager.hasplugin("xdist"):
        group_tests(config, items)
    result = yield
    if getattr(config.option, "loadgroup", False):  # set in a worker under --dist loadgroup
        from _pytest.nodeid import coerce_node_id

        for item in items:
            group = _group(item)
            if group is not None and "@" not in item.nodeid.rsplit("]", 1)[-1]:
                item._id = coerce_node_id(f"{item.nodeid}@{group}")
    return result


def group_tests(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its xdist group; under workers, the longest groups first."""
    on_ray = {
        item.nodeid.split("::", 1)[0]
        for item in items
        if "ray_cluster" in getattr(item, "fixturenames", ())
    }
    group_of: dict[int, str] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("ray" if module in on_ray else module))
        group_of[id(item)] = str(_group(item))  # marked just above
    if XDIST_WORKER is not None:  # not numprocesses: xdist sets it to None in its workers
        longest_groups_first(items, group_of)


def longest_groups_first(items: list[pytest.Item], group_of: dict[int, str]) -> None:
    """Put the Ray group first, then browser groups, then groups with a slow test, the rest
    after, each group's tests together and in their order (pyproject's --no-loadscope-reorder
    keeps it): xdist's own order, most tests first, sent the Ray group and the browser modules
    (few tests, minutes of work) last, where one worker ran them while the other sat idle."""

    def rank(item: pytest.Item) -> int:
        if group_of[id(item)] == "ray":
            return 0
        if item.get_closest_marker("browser"):
            return 1
        return 2 if item.get_closest_marker("slow") else 3

    weight: dict[str, int] = {}
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        group = group_of[id(item)]
        weight[group] = min(weight.get(group, 3), rank(item))
        first.setdefault(group, index)
    order = {id(item): index for index, item in enumerate(items)}
    items.sort(key=lambda it: (weight[group_of[id(it)]], first[group_of[id(it)]], order[id(it)]))


@pytest.fixture(autouse=True)
def _own_phantoms(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("own_phantoms"):
        from medheb_app.evidence.phantoms import saved

        monkeypatch.setattr(saved, "corpora_root", lambda settings: settings.demo_dir)


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """A real PostgreSQL server for the session (pgserver ships the binaries as a wheel)."""
    pgserver = pytest.importorskip(
        "pgserver", reason="pgserver (requirements-dev.txt) not installed"
    )
    server = pgserver.get_server(tmp_path_factory.mktemp("pgdata"), cleanup_mode="stop")
    yield server
    server.cleanup()


@pytest.fixture
def postgres_url(postgres_server: object) -> str:
    """A fresh, empty PostgreSQL database on the session's server (one per test)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    postgres_server.psql(f"CREATE DATABASE {name};")  # type: ignore[attr-defined]
    return postgres_server.get_uri(name)  # type: ignore[attr-defined]


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, settings: Settings) -> str:
    """The store's URL on each supported backend: SQLite in DATA_DIR and a real PostgreSQL."""
    if request.param == "sqlite":
        return settings.database_url
    return request.getfixturevalue("postgres_url")


@pytest.fixture
def store(database_url: str) -> Store:
    """The store on SQLite and on a real PostgreSQL server (each test runs on both)."""
    return Store.open(database_url)


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings with a fresh DATA_DIR per test, so tests never touch each other's files."""
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "data"))
    return Settings.from_env()


@pytest.fixture(scope="session")
def medheb_lite_run(
    tmp_path_factory: pytest.TempPathFactory, shared_phantom_corpora: Path
) -> object:
    """The shrunk medheb-lite suite built and run (random, oracle) once per session, for the
    tests that draw a study over every family from it (tests.run_fixtures.medheb_lite_study).
    Their modules share one xdist group, so one worker builds it."""
    from tests.run_fixtures import medheb_lite_run as build

    return build(tmp_path_factory.mktemp("medheb-lite-run"))


@pytest.fixture
def ray_cluster() -> object:
    """ONE local Ray cluster (2 CPUs, no dashboard) for the tests of the Ray group, started by
    the first of them and stopped after the last (pytest_runtest_teardown below): idle, its
    daemons and worker processes took 4% of a core and their torch copies' memory from the
    rest of the session on that worker. As the engines start their own (ray_engine.connect):
    a small object store and no idle workers started ahead, each a Python process that no test
    used (the actors have a runtime_env, so they never take a pooled worker)."""
    ray = pytest.importorskip("ray", reason="ray[data] (requirements.txt) not installed")
    if not ray.is_initialized():
        from medheb_app.index.ray_engine import OBJECT_STORE_MB

        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            object_store_memory=OBJECT_STORE_MB * 2**20,
            _system_config={"enable_worker_prestart": False, "prestart_worker_first_driver": False},
        )
    return ray


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Stop the Ray cluster once the Ray group's last test is torn down (a later Ray test, as
    in a `-n 0` run in file order, starts it again)."""
    result = yield
    if _group(item) == "ray" and _group(nextitem) != "ray":
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            ray.shutdown()
    return result

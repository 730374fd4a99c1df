"""Shared test set-up: offline environment, an isolated DATA_DIR, and real-data locations."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from pathlib import Path

import pytest

from medheb_app.settings import SHARED_DATA_DIR, Settings
from medheb_app.store.db import Store

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

    root = tmp_path_factory.mktemp("phantoms")
    patch = pytest.MonkeyPatch()
    patch.setattr(saved, "corpora_root", lambda _settings: root)
    yield root
    patch.undo()


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
def ray_cluster() -> Iterator[object]:
    """ONE local Ray cluster for the whole test session (2 CPUs, no dashboard)."""
    ray = pytest.importorskip("ray", reason="ray[data] (requirements.txt) not installed")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()

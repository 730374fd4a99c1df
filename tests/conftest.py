"""Shared test set-up: offline environment, an isolated DATA_DIR, and real-data locations."""

from __future__ import annotations

import os

os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from pathlib import Path

import pytest

from medheb_app.settings import SHARED_DATA_DIR, Settings

NIH_DIR = SHARED_DATA_DIR / "nih-cxr14-1000"
PUBMEDQA_DIR = SHARED_DATA_DIR / "pubmedqa"
PROSTATE_DIR = SHARED_DATA_DIR / "prostate-mri"


def require_shared(path: Path) -> Path:
    """Skip (with the reason) when ../shared/data is not beside the checkout."""
    if not path.exists():
        pytest.skip(f"real data not available: {path} (see ../shared/data/README.md)")
    return path


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings with a fresh DATA_DIR per test, so tests never touch each other's files."""
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "data"))
    return Settings.from_env()

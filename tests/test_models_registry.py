"""Spec resolution: built-ins, dual-lite checkpoints by tag, memoisation, clear errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from medheb_app.models.baselines import OracleEmbedder, RandomEmbedder
from medheb_app.models.dual_lite import DualLiteEmbedder, HeadConfig, untrained
from medheb_app.models.registry import (
    UnknownModelError,
    list_models,
    load_embedder,
    valid_specs,
)
from medheb_app.settings import Settings


@pytest.fixture
def isolated(settings: Settings, tmp_path: Path) -> Settings:
    """Settings whose committed-models folder is empty, so only test checkpoints exist."""
    return dataclasses.replace(settings, models_dir=tmp_path / "models")


def _save(folder: Path, seed: int) -> DualLiteEmbedder:
    embedder = untrained(HeadConfig(embed_dim=32), seed=seed)
    embedder.save_checkpoint(folder, {"tag": folder.name})
    return embedder


def test_builtins_resolve_and_are_memoised(isolated: Settings) -> None:
    assert isinstance(load_embedder("random", isolated), RandomEmbedder)
    assert isinstance(load_embedder("oracle", isolated), OracleEmbedder)
    assert load_embedder("random", isolated) is load_embedder(" random ", isolated)


def test_unknown_spec_lists_valid_specs(isolated: Settings) -> None:
    _save(isolated.trained_models_dir / "mine", seed=1)
    with pytest.raises(UnknownModelError) as caught:
        load_embedder("clip-of-dreams", isolated)
    message = str(caught.value)
    for spec in ("dual-lite", "random", "oracle", "dual-lite@mine", "open_clip:"):
        assert spec in message
    with pytest.raises(UnknownModelError, match="No dual-lite checkpoint tagged 'nope'"):
        load_embedder("dual-lite@nope", isolated)


def test_missing_default_weights_say_how_to_rebuild(isolated: Settings) -> None:
    with pytest.raises(FileNotFoundError, match="train report --out models/dual-lite/report"):
        load_embedder("dual-lite", isolated)


def test_checkpoints_register_by_tag(isolated: Settings) -> None:
    _save(isolated.models_dir / "dual-lite" / "report", seed=0)
    _save(isolated.trained_models_dir / "fresh", seed=2)
    specs = valid_specs(isolated)
    assert specs[:3] == ["dual-lite", "random", "oracle"]
    assert specs.index("dual-lite@report") < specs.index("dual-lite@fresh")  # committed first
    default = load_embedder("dual-lite", isolated)
    assert default is load_embedder("dual-lite@report", isolated)
    fresh = load_embedder("dual-lite@fresh", isolated)
    assert fresh.card.version == "fresh"
    assert fresh.card.fingerprint != default.card.fingerprint
    listed = {entry["spec"]: entry["card"] for entry in list_models(isolated)}
    assert set(listed) == set(valid_specs(isolated))
    assert listed["dual-lite@fresh"]["fingerprint"] == fresh.card.fingerprint
    assert listed["oracle"]["dims"] == 10


def test_retrained_checkpoint_is_reloaded(isolated: Settings) -> None:
    folder = isolated.trained_models_dir / "again"
    _save(folder, seed=3)
    first = load_embedder("dual-lite@again", isolated)
    _save(folder, seed=4)
    second = load_embedder("dual-lite@again", isolated)
    assert second is not first
    assert second.card.fingerprint != first.card.fingerprint


def test_checkpoint_by_path(isolated: Settings, tmp_path: Path) -> None:
    folder = tmp_path / "elsewhere" / "ckpt"
    _save(folder, seed=5)
    assert load_embedder(f"dual-lite@{folder}", isolated).card.version == "ckpt"
    with pytest.raises(FileNotFoundError, match="not a dual-lite checkpoint"):
        load_embedder(f"dual-lite@{tmp_path}", isolated)


def test_mllm_and_open_clip_layers_are_reached(isolated: Settings, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="weights not found"):
        load_embedder(f"open_clip:ViT-B-32@{tmp_path / 'missing.pt'}", isolated)
    with pytest.raises((UnknownModelError, FileNotFoundError, ValueError)):
        load_embedder(f"mllm:{tmp_path / 'no-model'}", isolated)


def test_listing_models_never_imports_torch(tmp_path) -> None:
    """The registry reads checkpoint folders through the torch-free *_checkpoint modules; torch
    is imported when a torch model is first loaded (a fresh interpreter shows it)."""
    import subprocess
    import sys

    from medheb_app.settings import PROJECT_ROOT

    code = (
        "import sys\n"
        "from medheb_app.models import registry\n"
        "from pathlib import Path\n"
        "from medheb_app.settings import Settings\n"
        f"listed = registry.list_models(Settings(data_dir=Path({str(tmp_path)!r})))\n"
        "assert any(e['spec'] == 'dual-lite' for e in listed), listed\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"

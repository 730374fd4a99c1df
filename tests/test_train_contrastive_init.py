"""TrainerConfig.init: a run starts from a checkpoint's heads instead of fresh ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from medheb_app.cli import build_parser, main
from medheb_app.models.dual_lite import HeadConfig, checkpoint_sha256, untrained
from medheb_app.settings import Settings
from medheb_app.train.contrastive import TrainerConfig, build_embedder, init_folder
from medheb_app.train.label_aware import LabelAwareConfig


def _save_heads(folder: Path, seed: int, embed_dim: int = 32, hidden_dim: int = 0) -> Path:
    embedder = untrained(HeadConfig(embed_dim, hidden_dim), seed=seed)
    embedder.save_checkpoint(folder, {"tag": folder.name, "recipe": "test"})
    return folder


def _same_heads(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    left, right = a.state_dict(), b.state_dict()
    return left.keys() == right.keys() and all(torch.equal(left[k], right[k]) for k in left)


def test_init_copies_heads_of_the_checkpoint(tmp_path: Path) -> None:
    folder = _save_heads(tmp_path / "seed5", seed=5)
    fresh = build_embedder(TrainerConfig(embed_dim=32, seed=0))
    started = build_embedder(TrainerConfig(embed_dim=32, seed=0), init_folder(str(folder)))
    assert _same_heads(started.heads, untrained(HeadConfig(32), seed=5).heads)
    assert not _same_heads(started.heads, fresh.heads)


def test_init_refuses_other_head_shapes_and_adapters(tmp_path: Path) -> None:
    folder = _save_heads(tmp_path / "mlp", seed=1, hidden_dim=16)
    with pytest.raises(ValueError, match="hidden_dim=16"):
        build_embedder(TrainerConfig(embed_dim=32), folder)
    linear = _save_heads(tmp_path / "lora", seed=1)
    (linear / "adapter_text").mkdir()
    with pytest.raises(ValueError, match="LoRA adapters"):
        build_embedder(TrainerConfig(embed_dim=32), linear)


def test_init_resolves_folders_and_tags(settings: Settings, tmp_path: Path) -> None:
    assert init_folder("", settings) is None
    saved = _save_heads(settings.trained_models_dir / "warm", seed=2)
    assert init_folder("warm", settings) == saved
    assert init_folder("dual-lite@warm", settings) == saved
    assert init_folder(str(saved), settings) == saved
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not a dual-lite checkpoint"):
        init_folder(str(tmp_path / "empty"), settings)
    with pytest.raises(FileNotFoundError, match=r"known tags: .*warm"):
        init_folder("nowhere", settings)


def test_label_aware_cli_takes_init() -> None:
    args = build_parser().parse_args(
        ["train", "label-aware", "--init", "models/dual-lite/report", "--out", "x"]
    )
    assert args.init == "models/dual-lite/report"
    assert LabelAwareConfig(init="").init == ""


@pytest.mark.slow
def test_cli_run_starts_from_init_and_records_it(
    settings: Settings, capsys: pytest.CaptureFixture
) -> None:
    first = settings.trained_models_dir / "first"
    common = ["--n", "24", "--batch-size", "8", "--image-size", "64", "--embed-dim", "16"]
    assert main(["train", "report", "--epochs", "3", *common, "--out", str(first), "--json"]) == 0
    first_losses = json.loads(capsys.readouterr().out)["epoch_losses"]
    second = settings.trained_models_dir / "second"
    argv = ["train", "report", "--epochs", "1", *common, "--init", "dual-lite@first"]
    assert main([*argv, "--out", str(second), "--json"]) == 0
    warm_losses = json.loads(capsys.readouterr().out)["epoch_losses"]
    # a warm start resumes near where the first run ended, far below a fresh first epoch
    assert warm_losses[0] < first_losses[0]
    saved = json.loads((second / "config.json").read_text())
    assert saved["training"]["init"] == "dual-lite@first"
    assert saved["init"] == {
        "spec": "dual-lite@first",
        "folder": str(first.resolve()),  # outside the working directory: kept absolute
        "sha256": checkpoint_sha256(first),
    }
    bad = ["train", "report", "--epochs", "1", *common, "--embed-dim", "8"]
    assert main([*bad, "--init", str(first), "--out", str(second)]) == 2
    assert "embed_dim=16" in capsys.readouterr().err

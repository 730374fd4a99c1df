"""A tiny report-matching run: the loss falls, the checkpoint registers and reloads."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from medheb_app.cancellation import Cancelled
from medheb_app.cli import main
from medheb_app.evidence.phantoms import generate_chest_corpus
from medheb_app.evidence.study import Study
from medheb_app.models.dual_lite import checkpoint_sha256, untrained
from medheb_app.models.registry import load_embedder
from medheb_app.settings import Settings
from medheb_app.train.config import config_from_sources
from medheb_app.train.report import ReportTrainingConfig, train_report

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def studies() -> list[Study]:
    return generate_chest_corpus(48, seed=0, size=64)


def _config(**overrides: object) -> ReportTrainingConfig:
    values = {"epochs": 8, "batch_size": 16, "lr": 3e-3, "image_size": 64, "embed_dim": 32}
    return ReportTrainingConfig(**{**values, **overrides})


def test_tiny_run_learns_and_registers(studies: list[Study], settings: Settings) -> None:
    steps: list[tuple[int, int, float]] = []
    folder = settings.trained_models_dir / "tiny-report"
    result = train_report(_config(), folder, studies=studies, progress=lambda *a: steps.append(a))
    assert result.card is not None
    assert result.epoch_losses[-1] < result.epoch_losses[0]
    assert [s[0] for s in steps] == list(range(1, result.steps + 1))
    assert steps[-1][1] == result.steps
    config = json.loads((folder / "config.json").read_text())
    assert config["recipe"] == "report" and config["training"]["epochs"] == 8
    assert config["data"]["n_train"] == sum(s.split == "train" for s in studies)
    assert config["results"]["final_loss"] == pytest.approx(result.final_loss, abs=1e-5)

    loaded = load_embedder("dual-lite@tiny-report", settings)
    assert loaded.card.fingerprint == result.card.fingerprint
    assert loaded.card.fingerprint != untrained(seed=0).card.fingerprint
    vectors = loaded.encode([studies[0], studies[0].text or ""])
    assert vectors.shape == (2, 32)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_same_seed_same_weights(studies: list[Study], tmp_path: Path) -> None:
    studies = studies[:24]
    first = train_report(_config(epochs=2), tmp_path / "a", studies=studies)
    second = train_report(_config(epochs=2), tmp_path / "b", studies=studies)
    third = train_report(_config(epochs=2, seed=1), tmp_path / "c", studies=studies)
    assert checkpoint_sha256(first.folder) == checkpoint_sha256(second.folder)
    assert checkpoint_sha256(first.folder) != checkpoint_sha256(third.folder)


def test_stop_flag_cancels_without_saving(studies: list[Study], tmp_path: Path) -> None:
    stop = threading.Event()

    def progress(step: int, total: int, loss: float) -> None:
        if step == 2:
            stop.set()

    with pytest.raises(Cancelled, match="stopped after step 2 of"):
        train_report(_config(), tmp_path / "x", studies=studies, progress=progress, stop=stop)
    assert not (tmp_path / "x").exists()


def test_config_validation_and_json(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="batch_size must be at least 2"):
        ReportTrainingConfig(batch_size=1)
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({"epochs": 3, "lora_towers": ["text"]}))
    config = config_from_sources(ReportTrainingConfig, path, {"epochs": 5, "seed": None})
    assert config.epochs == 5 and config.lora_towers == ("text",) and config.seed == 0
    path.write_text(json.dumps({"epochz": 3}))
    with pytest.raises(ValueError, match="Unknown setting"):
        config_from_sources(ReportTrainingConfig, path)


def test_cli_train_report_json(settings: Settings, capsys: pytest.CaptureFixture) -> None:
    out = settings.trained_models_dir / "cli-run"
    argv = ["train", "report", "--n", "24", "--epochs", "2", "--batch-size", "8"]
    argv += ["--image-size", "64", "--embed-dim", "16", "--out", str(out), "--json"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    payload = json.loads(captured.out)
    assert payload["spec"] == "dual-lite@cli-run"
    assert payload["card"]["dims"] == 16
    assert len(payload["epoch_losses"]) == 2
    assert "step 1/" in captured.err
    assert main(["train", "report", "--epochs", "0", "--out", str(out)]) == 2
    assert "epochs must be at least 1" in capsys.readouterr().err


def test_lora_adapter_is_saved_and_merged_on_load(studies: list[Study], settings: Settings) -> None:
    folder = settings.trained_models_dir / "tiny-lora"
    config = _config(epochs=1, tune="lora", lora_towers=("text",), lora_rank=2)
    result = train_report(config, folder, studies=studies[:24])
    assert (folder / "adapter_text" / "adapter_config.json").is_file()
    assert not (folder / "adapter_image").exists()
    loaded = load_embedder("dual-lite@tiny-lora", settings)
    assert loaded.card.extra["adapters"] == "text"
    assert loaded.card.fingerprint == result.card.fingerprint
    shared = untrained(seed=0)
    assert loaded.image_tower is shared.image_tower  # untouched tower stays shared
    tuned_query = loaded.text_tower.net.encoder.layer[0].attention.self.query.weight
    base_query = shared.text_tower.net.encoder.layer[0].attention.self.query.weight
    assert not torch.equal(tuned_query, base_query)

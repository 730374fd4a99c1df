"""The label-aware recipe end to end on a tiny phantom corpus (slow: loads both towers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medheb_app.train.ablations import VARIANTS, anchor_settings, is_anchor, variant_key
from medheb_app.train.label_aware import LabelAwareConfig, loss_function


def test_config_validation() -> None:
    default = LabelAwareConfig()
    assert default.tune == "lora" and default.lora_rank == 12 and default.lora_towers == ("text",)
    assert default.init == "dual-lite@report" and default.hnm_weight == 0.3
    with pytest.raises(ValueError, match="single:pair:negation"):
        LabelAwareConfig(mix="1:2")
    with pytest.raises(ValueError, match="loss"):
        LabelAwareConfig(loss="triplet")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="hnm_weight"):
        LabelAwareConfig(hnm_weight=-1)


def test_loss_selection() -> None:
    from medheb_app.train import losses

    assert loss_function(LabelAwareConfig(loss="clip")) is losses.clip_loss_ignoring_labels
    assert loss_function(LabelAwareConfig(loss="attract")) is losses.label_aware_loss
    full = loss_function(LabelAwareConfig(hnm_weight=0.5))
    assert full.func is losses.label_aware_total and full.keywords == {"hnm_weight": 0.5}


def test_ablation_variants_share_the_anchor() -> None:
    anchor = anchor_settings("lora")
    keys = [variant_key(overrides, anchor) for _, _, overrides in VARIANTS]
    ours = [
        key
        for (_, name, overrides), key in zip(VARIANTS, keys, strict=True)
        if "(ours)" in name or is_anchor(overrides, anchor)
    ]
    assert len(ours) == 5 and len(set(ours)) == 1  # the "ours" row of each block: one model
    assert len(set(keys)) == 9
    frozen = anchor_settings("frozen")
    assert variant_key({}, frozen) != variant_key({}, anchor)
    assert is_anchor({"tune": "frozen"}, frozen) and not is_anchor({}, frozen)


@pytest.mark.slow
def test_train_tiny_and_load_through_registry(settings) -> None:
    from medheb_app.evidence.phantoms import generate_chest_corpus
    from medheb_app.models.registry import load_embedder
    from medheb_app.train.label_aware import train_label_aware

    studies = generate_chest_corpus(n=60, seed=3, size=128)
    config = LabelAwareConfig(epochs=2, batch_size=16, seed=1, tune="lora")
    out = settings.trained_models_dir / "la-tiny"
    result = train_label_aware(config, out, settings, studies=studies)
    assert result.card is not None and len(result.epoch_losses) == 2
    assert (out / "adapter_text").is_dir() and not (out / "adapter_image").exists()
    saved = json.loads((out / "config.json").read_text())
    assert saved["recipe"] == "label-aware" and saved["training"]["loss"] == "label-aware"
    assert Path(saved["init"]["folder"]).name == "report"  # the default warm start
    n_train = sum(s.split == "train" for s in studies)
    assert 0 < saved["data"]["n_train_images"] <= n_train
    embedder = load_embedder("dual-lite@la-tiny", settings)
    vectors = embedder.encode(["Edema and no pneumonia", "Edema"])
    assert vectors.shape == (2, embedder.card.dims)
    assert embedder.card.fingerprint == result.card.fingerprint

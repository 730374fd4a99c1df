"""The MedEmb recipe: pair sampling, batch planning, and short real runs on both backbones."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from medheb_app.evidence.study import Evidence
from medheb_app.models import registry
from medheb_app.train.batching import padded_cost
from medheb_app.train.medemb import (
    MedEmbConfig,
    Pair,
    evidence_key,
    plan_batches,
    same_target_matrix,
    sample_pairs,
    spec_for_card,
    train_medemb,
)

RNG = np.random.default_rng(0)


def _pairs(n: int = 8) -> list[Pair]:
    """Image -> label pairs with two repeated labels, plus a text -> text task."""
    labels = ["Edema", "Pneumothorax"]
    pairs = [
        Pair(
            "Represent the given image with the following question:",
            Evidence(image=RNG.random((48, 48)).astype(np.float32)),
            Evidence(text=labels[i % 2]),
            "i2label",
        )
        for i in range(n)
    ]
    pairs += [
        Pair("Find the answer of the given question:", Evidence(text=f"question {i}?"),
             Evidence(text=f"context number {i}"), "qa")
        for i in range(n // 2)
    ]  # fmt: skip
    return pairs


def test_config_is_validated():
    with pytest.raises(ValueError, match="medemb-lite or mllm"):
        MedEmbConfig(model="dual-lite")
    with pytest.raises(ValueError, match="nominal_batch"):
        MedEmbConfig(nominal_batch=0)
    with pytest.raises(ValueError):
        MedEmbConfig(batching="huge")


def test_pairs_are_capped_per_task_and_seeded():
    raw = [("inst", f"q{i}", f"t{i}", "a") for i in range(10)] + [("inst", "q", "t", "b")]
    first = sample_pairs(raw, per_task=3, seed=0)
    assert [p.task for p in first] == ["a", "a", "a", "b"]
    assert first == sample_pairs(raw, per_task=3, seed=0)
    assert len(sample_pairs(raw, per_task=0, seed=0)) == 11


def test_repeated_targets_are_recognised_whatever_the_object():
    keys = [evidence_key(Evidence(text=t)) for t in ("no", "yes", "no")]
    same = same_target_matrix(keys)
    assert same.tolist() == [[False, False, True], [False, False, False], [True, False, False]]
    image = RNG.random((4, 4)).astype(np.float32)
    assert evidence_key(Evidence(image=image)) == evidence_key(Evidence(image=image.copy()))


@pytest.mark.parametrize("batching", ["dynamic", "static"])
def test_planned_batches_cover_the_pairs_within_budget(batching):
    lengths = RNG.integers(5, 120, size=300).tolist()
    config = MedEmbConfig(batching=batching, nominal_batch=8, epochs=2)
    epochs, budget = plan_batches(lengths, config, np.random.default_rng(0))
    assert budget == 2 * 8 * max(lengths)
    for batches in epochs:
        rows = sorted(r for b in batches for r in b)
        assert len(rows) == len(set(rows)) and len(rows) >= 300 - 1
        if batching == "dynamic":
            assert all(padded_cost([lengths[i] for i in b]) <= budget for b in batches)
        else:
            assert all(len(b) <= 8 for b in batches)
    dynamic, _ = plan_batches(lengths, MedEmbConfig(nominal_batch=8), np.random.default_rng(0))
    assert len(dynamic[0]) <= len(epochs[0])


@pytest.mark.slow
def test_medemb_lite_trains_a_few_steps_and_loads_by_spec(settings, tmp_path):
    out = tmp_path / "medemb-lite-run"
    config = MedEmbConfig(nominal_batch=4, max_steps=3, lr=1e-3, max_text_tokens=16, align_steps=0)
    steps = []
    result = train_medemb(
        config, out, settings, pairs=_pairs(), progress=lambda step, total, loss: steps.append(loss)
    )
    assert result.steps == 3 and len(steps) == 3 and all(np.isfinite(steps))
    record = json.loads((out / "config.json").read_text())
    assert record["results"]["peak_memory_mb"] > 0 and record["training"]["margin"] == 0.1
    assert record["data"]["tasks"] == {"i2label": 8, "qa": 4}
    # the 8 image->label pairs share 2 labels, so same-target masking must have fired
    assert 0 < record["results"]["masked_share_same_target"] <= 1
    spec = spec_for_card(result.card.to_dict())
    registry.clear_cache()
    model = registry.load_embedder(spec, settings)
    vectors = model.encode([Evidence(image=RNG.random((48, 48)).astype(np.float32)), "Edema"])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.slow
def test_mllm_backbone_trains_with_lora_and_loads_as_an_adapter(settings, tmp_path):
    from tests.mllm_tiny import build_tiny_qwen2_vl

    base = build_tiny_qwen2_vl(tmp_path / "tiny")
    before = registry.load_embedder(f"mllm:{base}", settings).encode(["Edema"])
    config = MedEmbConfig(model=f"mllm:{base}", nominal_batch=4, max_steps=2, lr=5e-2)
    result = train_medemb(config, tmp_path / "adapter", settings, pairs=_pairs())
    assert result.steps == 2
    assert (tmp_path / "adapter" / "adapter_config.json").is_file()
    assert json.loads((tmp_path / "adapter" / "medemb.json").read_text())["results"]["steps"] == 2
    registry.clear_cache()
    tuned = registry.load_embedder(spec_for_card(result.card.to_dict()), settings)
    after = tuned.encode(["Edema"])
    assert after.shape == before.shape and float(after[0] @ before[0]) < 0.9999
    assert torch.isfinite(torch.from_numpy(after)).all()


def test_cli_flags_become_the_recipe_config(tmp_path):
    from medheb_app.cli import build_parser
    from medheb_app.train.config import config_from_sources

    args = build_parser().parse_args(
        ["train", "medemb", "--no-mask", "--batching", "static", "--pairs-per-task", "5",
         "--pooling", "mean", "--out", str(tmp_path / "run")]
    )  # fmt: skip
    config = config_from_sources(MedEmbConfig, None, vars(args))
    assert (config.mask, config.batching, config.pairs_per_task, config.pooling) == (
        False, "static", 5, "mean"
    )  # fmt: skip
    assert (config.temperature, config.margin, config.lora_rank, config.lora_alpha) == (
        0.01, 0.1, 8, 32
    )  # fmt: skip


def test_cli_refuses_a_backbone_the_recipe_cannot_train(tmp_path, settings, capsys):
    from medheb_app.cli import main

    assert main(["train", "medemb", "--model", "dual-lite", "--out", str(tmp_path / "x")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error:") and "medemb-lite or mllm" in error and "\n" not in error

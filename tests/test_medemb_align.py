"""Stage-1 projection alignment: the caption bank and a short run that moves only the projection."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from medheb_app.evidence.study import Evidence
from medheb_app.models.medemb_lite import MedEmbLiteConfig, MedEmbLiteEmbedder
from medheb_app.train.medemb import Pair
from medheb_app.train.medemb_align import align_projection, caption_bank

RNG = np.random.default_rng(0)
REPORTS = ["No acute abnormality.", "Large right pleural effusion.", "Mild pulmonary edema."]


def _pairs(n: int = 12) -> list[Pair]:
    """Image -> report pairs whose reports repeat, plus an image -> label pair to be ignored."""
    pairs = [
        Pair(
            "Represent the given chest X-ray image for radiology report retrieval:",
            Evidence(image=RNG.random((48, 48)).astype(np.float32) * (1 + i % 3) / 3),
            Evidence(text=REPORTS[i % 3]),
            "phantom-cxr-i2report",
        )
        for i in range(n)
    ]
    label = Pair("inst", Evidence(image=RNG.random((48, 48)).astype(np.float32)),
                 Evidence(text="Edema"), "phantom-cxr-i2label")  # fmt: skip
    return [*pairs, label]


def test_caption_bank_keeps_report_pairs_and_deduplicates_captions():
    bank = caption_bank(_pairs())
    assert len(bank.images) == 12 and [c.text for c in bank.captions] == REPORTS
    assert bank.positive == [i % 3 for i in range(12)]
    assert all(image.text is None and image.image is not None for image in bank.images)


@pytest.mark.slow
def test_alignment_trains_the_projection_and_leaves_the_backbone_alone():
    torch.manual_seed(0)
    model = MedEmbLiteEmbedder.untrained(
        MedEmbLiteConfig(image_size=64, frame_size=32, max_text_tokens=16), seed=0
    )
    backbone = {k: v.clone() for k, v in model.backbone.state_dict().items()}
    projection = model.projection.linear.weight.detach().clone()
    bank = caption_bank(_pairs())
    # 12 steps (6 passes over the 12 pairs): the loss is down from 2.5 to 0.5 by the fourth
    stats = align_projection(model, bank, steps=12, lr=5e-3, batch_size=6, temperature=0.05,
                             seed=0)  # fmt: skip
    assert stats["pairs"] == 12 and stats["captions"] == 3
    assert stats["final_loss"] < stats["first_loss"]
    assert not torch.equal(model.projection.linear.weight, projection)
    assert all(torch.equal(v, model.backbone.state_dict()[k]) for k, v in backbone.items())
    assert all(p.requires_grad for p in model.backbone.parameters())  # given back as it was
    stop = threading.Event()
    stop.set()
    assert align_projection(model, bank, 5, 1e-3, 6, 0.05, 0, stop=stop)["steps"] == 0
    with pytest.raises(ValueError, match="at least 2"):
        align_projection(model, caption_bank(_pairs()[-1:]), 1, 1e-3, 4, 0.05, 0)


@pytest.mark.slow
def test_recipe_runs_the_alignment_stage_first_and_records_it(settings, tmp_path):
    import json

    from medheb_app.train.medemb import MedEmbConfig, train_medemb

    config = MedEmbConfig(align_steps=4, align_batch=6, nominal_batch=4, max_steps=2,
                          max_text_tokens=16)  # fmt: skip
    stages = []
    result = train_medemb(config, tmp_path / "aligned", settings, pairs=_pairs(),
                          progress=lambda step, total, loss: stages.append(total))  # fmt: skip
    assert result.steps == 2 and stages[:4] == [4, 4, 4, 4]
    record = json.loads((tmp_path / "aligned" / "config.json").read_text())
    assert record["training"]["align_steps"] == 4
    assert record["results"]["alignment"]["pairs"] == 12
    with pytest.raises(ValueError, match="align-steps 0"):
        train_medemb(config, tmp_path / "none", settings, pairs=_pairs()[-1:] * 3)
    assert MedEmbConfig(model="mllm:/some/model", align_steps=10).align_steps == 0

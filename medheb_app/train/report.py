"""The report-matching recipe: each radiograph against its own report (CXR-Retrieve sec. 4).

This is the paper's baseline: plain CLIP-style training where an image's only positive is
its report and every other report in the batch is a negative, whatever findings they share.
The data is the synthetic chest phantom corpus (train split only; the val split gives a
held-out loss), so the resulting checkpoint is reproducible from (n, corpus_seed, trainer).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from medheb_app.evidence.phantoms import saved  # saved.corpora_root: tests redirect it
from medheb_app.evidence.phantoms.corpus import load_corpus
from medheb_app.evidence.phantoms.saved import CorpusKey, ensure_saved
from medheb_app.evidence.study import Study
from medheb_app.settings import Settings
from medheb_app.train.contrastive import (
    Pairs,
    Progress,
    TrainerConfig,
    TrainResult,
    data_fingerprint,
    train_contrastive,
)
from medheb_app.train.loop import check_stop, report_stage
from medheb_app.train.losses import clip_loss

VAL_SPLITS = ("val", "valid", "validation")


@dataclass
class ReportTrainingConfig(TrainerConfig):
    """Report matching on the phantom corpus; trainer settings plus the corpus to draw."""

    n: int = field(default=2000, metadata={"help": "phantom studies to generate"})
    corpus_seed: int = field(default=0, metadata={"help": "seed of the phantom corpus"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n < 4:
            raise ValueError(f"n must be at least 4 studies; got {self.n}")


def report_pairs(studies: Sequence[Study]) -> tuple[list[np.ndarray], Pairs]:
    """Images and the fixed (image i, report i) pairs of studies that have both."""
    usable = [s for s in studies if s.text and s.load_pixels() is not None]
    images = [np.asarray(s.pixels, dtype=np.float32) for s in usable]
    return images, Pairs(np.arange(len(usable)), [s.text or "" for s in usable])


def split_studies(studies: Sequence[Study]) -> tuple[list[Study], list[Study]]:
    """(train, validation) studies; anything not marked train or val (e.g. test) is unused."""
    train = [s for s in studies if s.split == "train"]
    val = [s for s in studies if s.split in VAL_SPLITS]
    if len(train) < 2:
        raise ValueError("The corpus has fewer than 2 studies in its train split.")
    return train, val


def train_report(
    config: ReportTrainingConfig,
    out: Path | str,
    studies: Sequence[Study] | None = None,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    cache_dir: Path | None = None,
    settings: Settings | None = None,
) -> TrainResult:
    """Train dual-lite by report matching and save the checkpoint folder `out`.

    `studies` defaults to the saved phantom chest corpus (config.n studies, config.corpus_seed;
    evidence.phantoms.saved) under `settings`' data folder, which also gives the job's device.
    `cache_dir` keeps frozen-tower features between runs (see train_contrastive).
    """
    source = "given"
    if studies is None:
        if settings is None:
            raise ValueError("train_report needs settings to find the saved phantom corpus.")
        report_stage(progress, f"drawing {config.n} phantom studies")
        key = CorpusKey("cxr", config.n, config.corpus_seed)
        studies = load_corpus(ensure_saved(saved.corpora_root(settings), key)[0])
        source = "phantom"
    check_stop(stop, "drawing the corpus")
    report_stage(progress, f"reading the pixels of {len(studies)} studies")
    train, val = split_studies(studies)
    images, pairs = report_pairs(train)
    check_stop(stop, "reading the pixels")
    val_images, val_pairs = report_pairs(val) if len(val) >= 2 else (None, None)
    run_info = {
        "tag": Path(out).name,
        "recipe": "report",
        "description": "Report matching (CLIP loss, CXR-Retrieve baseline) on "
        f"{len(images)} {source} studies",
        "data": {"source": source, "n_train": len(images), "n_val": len(val_images or [])},
        "data_fingerprint": data_fingerprint(pairs.texts, images, source=source),
    }
    return train_contrastive(
        images,
        lambda epoch, rng: pairs,
        clip_loss,
        config,
        out,
        run_info=run_info,
        val_pairs=val_pairs,
        val_images=val_images,
        progress=progress,
        stop=stop,
        cache_dir=cache_dir,
        settings=settings,
    )

"""Cancel is heard at once and obeyed within a batch; jobs name their stage from the start
(issue 22 item 4). Latency figures are measured by bench/bench_cancel.py, not here."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from medheb_app.evidence.phantoms import generate_chest_corpus
from medheb_app.jobs import STOP_ACK, JobRunner
from medheb_app.models.registry import spec_of_folder, valid_specs
from medheb_app.settings import Settings
from medheb_app.store.db import Store
from medheb_app.train import contrastive
from medheb_app.train.loop import TrainingProgress
from medheb_app.train.report import ReportTrainingConfig, train_report


@pytest.fixture
def runner(store: Store, settings: Settings):
    runner = JobRunner(store, settings)
    yield runner
    runner.shutdown()


def test_cancel_is_acknowledged_in_log_and_message_before_the_batch_ends(runner) -> None:
    in_batch, finish_batch = threading.Event(), threading.Event()

    def batches(params, progress, log, stop):
        for batch in range(100):
            if stop.is_set():
                raise InterruptedError(f"kept the {batch} batches already written")
            in_batch.set()
            finish_batch.wait(timeout=20)
            progress(batch / 100, f"batch {batch}")
        return {}

    job_id = runner.submit("batches", {}, batches)
    assert in_batch.wait(timeout=20)
    assert runner.cancel(job_id) is True
    # the job is still inside its batch, yet the log and the message already say so
    assert runner.status(job_id).status == "running"
    assert runner.logs(job_id) == [STOP_ACK]
    assert runner.status(job_id).message == STOP_ACK
    finish_batch.set()
    info = runner.wait(job_id, timeout=30)
    assert info.status == "cancelled"
    assert info.message == "cancelled: kept the 1 batches already written"
    assert runner.logs(job_id)[-1].endswith("kept the 1 batches already written")


def test_a_new_job_reports_its_first_stage_before_doing_anything(runner) -> None:
    release = threading.Event()
    job_id = runner.submit("slow", {}, lambda p, progress, log, stop: release.wait(20) and {})
    for _ in range(200):
        if runner.status(job_id).message:
            break
        threading.Event().wait(0.05)
    assert runner.status(job_id).message == "started"
    release.set()
    assert runner.wait(job_id, timeout=30).status == "done"


def test_an_unrequested_interrupt_is_a_failure_not_a_cancel(runner) -> None:
    def broken(params, progress, log, stop):
        raise InterruptedError("decoder gave up")

    info = runner.wait(runner.submit("broken", {}, broken), timeout=30)
    assert info.status == "failed" and "decoder gave up" in info.error


@pytest.mark.slow
def test_training_stops_within_one_chunk_of_feature_caching(tmp_path: Path, monkeypatch) -> None:
    """The 2,000-study job sat 10 minutes in uncancellable feature caching; now each chunk
    of images is a stage report and a stop check."""
    monkeypatch.setattr(contrastive, "FEATURE_CHUNK", 8)
    studies = generate_chest_corpus(48, seed=0, size=64)
    stop, stages, lines = threading.Event(), [], []

    def job_progress(fraction: float, message: str = "") -> None:
        stages.append(message)
        if message.startswith("caching image features 8/"):
            stop.set()

    config = ReportTrainingConfig(epochs=2, batch_size=16, image_size=64, embed_dim=32)
    with pytest.raises(InterruptedError, match="no checkpoint saved"):
        train_report(
            config,
            tmp_path / "x",
            studies=studies,
            progress=TrainingProgress(job_progress, lines.append),
            stop=stop,
        )
    assert stages[0] == "reading the pixels of 48 studies"
    assert stages[1].startswith("loading the towers for ")
    assert stages[2].startswith("caching image features 0/")
    assert stages[-1].startswith("caching image features 8/")  # stopped after that chunk
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_saved_spec_is_the_one_the_resolver_registers(settings: Settings) -> None:
    studies = generate_chest_corpus(12, seed=0, size=64)
    config = ReportTrainingConfig(epochs=1, batch_size=8, image_size=64, embed_dim=16)
    folder = settings.trained_models_dir / "ux-report"
    train_report(config, folder, studies=studies)
    assert spec_of_folder(folder, settings) == "dual-lite@ux-report"
    assert "dual-lite@ux-report" in valid_specs(settings)
    shadowed = settings.trained_models_dir / "report"  # the committed checkpoint's tag wins
    train_report(config, shadowed, studies=studies)
    assert spec_of_folder(shadowed, settings) is None

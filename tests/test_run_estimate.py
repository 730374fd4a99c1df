"""A run's estimate from the embedding cache's state, and CXR-Retrieve progress by work.

The estimate counts, per task and model, the items the run will embed by the rankers' own
cache keys: before a run none are cached, after a run of the same tasks all are, and the
estimate falls. The run records how many vectors each model computed, which gives the
measured seconds per item the next estimate uses.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from medheb_app.cli import main
from medheb_app.eval.estimate import (
    DEFAULT_SECONDS_PER_ITEM,
    Estimate,
    Rate,
    calibrate_rates,
    estimate_cxr,
    estimate_medheb,
    measured_rate,
    model_cards,
    new_vectors_key,
    rate_for,
    rates_from_store,
    samples_by_kind,
)
from medheb_app.eval.progress import WorkProgress
from medheb_app.eval.rankers import EmbeddingRanker
from medheb_app.eval.results import Summary
from medheb_app.eval.runner import run_suite
from medheb_app.index.cache import EmbeddingCache
from medheb_app.settings import Settings
from medheb_app.store.db import Store
from medheb_app.store.runs import list_runs
from medheb_app.tasks.base import Item
from medheb_app.tasks.builders.generic import paired_task
from medheb_app.tasks.cxr_retrieve import CxrRetrieveSuite
from tests.test_cxr_cli import nih_fixture
from tests.test_runner_suite import BagOfWords, meta, text_pairs


def test_medheb_estimate_goes_from_nothing_cached_to_all_cached(
    settings: Settings, tmp_path: Path
) -> None:
    tasks = [
        paired_task(meta("tt-a"), text_pairs(30, 3)),
        paired_task(meta("tt-b"), text_pairs(20, 4)),
    ]
    model = BagOfWords()
    cards = {"bow": model.card.to_dict()}
    cache = EmbeddingCache(settings.cache_dir)
    before = estimate_medheb("custom", tasks, ["bow", "oracle"], cards, cache, {})
    rows = {(c.task, c.model): c for c in before.cells}
    assert rows["tt-a", "bow"].items == 60 and rows["tt-a", "bow"].cached == 0
    assert rows["tt-b", "bow"].items == 40
    assert rows["tt-a", "oracle"].items == 0  # the baseline embeds nothing
    assert before.total_seconds == pytest.approx(100 * DEFAULT_SECONDS_PER_ITEM)
    assert before.rows()[-1] == {
        "task": "total",
        "model": "",
        "kind": "",
        "items": 100,
        "cached": 0,
        "est. seconds": before.total_seconds,
        "rate": "",
    }

    summary = run_suite(tasks, [EmbeddingRanker("bow", model, cache)], tmp_path / "run", settings)
    assert model.encoded == 100  # the estimate counted exactly what was embedded
    assert summary.timing[new_vectors_key("bow")] == 100

    rate = measured_rate("bow", [(summary.run_id, summary)])
    assert rate.seconds_per_item == pytest.approx(summary.timing["bow_s"] / 100)
    assert f"run {summary.run_id}" in rate.source
    stored = rates_from_store(Store.open(settings.database_url), ["bow", "logic:bow"])
    assert stored["bow"] == rate
    assert stored["logic:bow"] == rate  # not measured itself: its embedder's rate
    # the run also measured bow's text rate alone (embedding time over text vectors)
    assert summary.timing[new_vectors_key("bow/text")] == 100
    assert 0 < summary.timing["bow/text_s"] <= summary.timing["bow_s"]
    assert stored["bow/text"].quality == "kind"
    assert stored["bow/text"].seconds_per_item <= rate.seconds_per_item
    fresh = estimate_medheb("custom", tasks, ["bow"], cards, EmbeddingCache(tmp_path / "c"), stored)
    assert {c.kind for c in fresh.cells} == {"text"}
    # texts are priced by length: the run recorded the characters it embedded
    assert summary.timing["bow/text_new_chars"] > 0 and stored["bow/text"].per_char
    assert all(c.rate.per_char == stored["bow/text"].per_char for c in fresh.cells)
    assert all(c.rate.quality == "kind" and " per 1,000 characters" in c.rate.source
               for c in fresh.cells)  # fmt: skip
    low, high = fresh.range_seconds
    expected = sum(c.to_embed * c.rate.seconds_per_item for c in fresh.cells)
    assert low == pytest.approx(0.6 * expected, abs=0.01)  # a range, tight for a measured rate
    assert high == pytest.approx(1.6 * expected, abs=0.01)
    wide = estimate_medheb("custom", tasks, ["bow"], cards, EmbeddingCache(tmp_path / "d"), {})
    assert wide.range_seconds == (pytest.approx(0.2 * 30), pytest.approx(5.0 * 30))  # a guess
    after = estimate_medheb("custom", tasks, ["bow"], cards, cache, {"bow": rate})
    assert [(c.items, c.cached) for c in after.cells] == [(60, 60), (40, 40)]
    assert after.total_seconds == 0.0 < before.total_seconds


def _cli_estimate(data: Path, capsys: pytest.CaptureFixture) -> dict:
    args = ["bench", "run", "--suite", "cxr-retrieve", "--data", f"nih:{data}"]
    assert (
        main([*args, "--model", "random", "--model", "logic:random", "--estimate", "--json"]) == 0
    )
    return json.loads(capsys.readouterr().out)


def test_cli_estimate_runs_nothing_and_a_run_caches_every_item(
    settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    data = nih_fixture(tmp_path / "nih")
    before = _cli_estimate(data, capsys)
    cells = {(c["task"].split(": ")[1], c["model"]): c for c in before["cells"]}
    train = cells[next(k for k in cells if k[0].startswith("probe fit"))]
    gallery = cells[next(k for k in cells if k[0].endswith("gallery images + crops"))]
    plain = next(c for (what, spec), c in cells.items() if spec == "random" and "gallery" in what)
    assert gallery["items"] == 14 * plain["items"]  # whole image plus 2x2 and 3x3 crops
    assert train["model"] == "logic:random" and train["items"] % 14 == 0
    # nothing is stored yet; logic:random finds the whole images random embeds before it
    assert gallery["cached"] == plain["items"]
    assert [c["cached"] for c in before["cells"] if c is not gallery] == [0] * 4
    # the random embedder and the label oracle run no model: their items cost nothing
    assert before["total_seconds"] == 0 and before["range_seconds"] == [0, 0]
    assert {c["rate"]["quality"] for c in before["cells"]} == {"none"}
    assert list_runs(Store.open(settings.database_url)) == []  # --estimate ran nothing

    out = tmp_path / "run"
    args = ["bench", "run", "--suite", "cxr-retrieve", "--data", f"nih:{data}", "--out", str(out)]
    assert main([*args, "--model", "random", "--model", "logic:random"]) == 0
    capsys.readouterr()
    timing = Summary.from_disk(out).timing
    for spec in ("random", "logic:random"):  # the estimate counted what the run computed
        planned = [
            c["items"] - c["cached"]
            for c in before["cells"]
            if c["model"] == spec and "never cached" not in c["note"]
        ]
        assert timing[new_vectors_key(spec)] == sum(planned), spec
    after = _cli_estimate(data, capsys)
    # every gallery image, crop and cached query is now in the cache; the fit probe is on
    # disk, so its training images drop out of the estimate
    assert not any("probe fit" in c["task"] for c in after["cells"])
    for cell in after["cells"]:
        logic_queries = cell["model"] == "logic:random" and "queries" in cell["task"]
        assert cell["cached"] == (0 if logic_queries else cell["items"]), cell
    stored = rates_from_store(Store.open(settings.database_url), ["random"])
    assert stored["random"].quality == "model"  # measured, though a baseline never uses it
    human = main([*args[:6], "--model", "random", "--estimate"])
    assert human == 0 and "items  cached" in capsys.readouterr().out


def test_a_run_without_out_is_a_clear_error(settings: Settings, capsys) -> None:
    assert main(["bench", "run", "--family", "T-T", "--model", "random"]) == 2
    assert "needs --out" in capsys.readouterr().err


def test_work_progress_is_monotone_and_weighted() -> None:
    seen: list[float] = []
    meter = WorkProgress(lambda f, m: seen.append(f), [1.0, 9.0])
    meter.at(0, 0.5, "half of the cheap stage")
    meter.at(0, 0.2, "a late report from the same stage")  # never goes back
    meter.at(1, 0.0, "the expensive stage starts")
    meter.span(0, 1)(1.0, "all done")
    assert seen == pytest.approx([0.05, 0.05, 0.1, 1.0])
    assert WorkProgress(lambda f, m: None, [0.0, 0.0]).shares == [0.5, 0.5]


def test_cxr_retrieve_progress_follows_work_with_a_log_line_per_stage(
    settings: Settings, tmp_path: Path
) -> None:
    """oracle (the whole gallery once) then logic:oracle (probe fit on the train images and
    their 13 crops each, then the gallery with crops): progress after the cheap model is its
    small share of the work, never goes back, and ends at 1.0."""
    data = nih_fixture(tmp_path / "nih")
    suite = CxrRetrieveSuite(data=f"nih:{data}")
    specs = ["oracle", "logic:oracle"]
    gallery, train = suite.build(settings)
    plan: Estimate = estimate_cxr(
        suite,
        gallery,
        train,
        specs,
        settings,
        model_cards(settings),
        EmbeddingCache(settings.cache_dir),
        {},
    )
    total = sum(c.work for c in plan.cells)
    cheap = sum(c.work for c in plan.cells if c.model == "oracle") / total
    assert cheap < 0.25

    events: list[tuple[float, str]] = []
    lines: list[str] = []
    run_suite(
        suite,
        specs,
        tmp_path / "run",
        settings,
        progress=lambda f, m: events.append((f, m)),
        log=lines.append,
    )
    fractions = [f for f, _ in events]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    first_logic = next(i for i, (_, m) in enumerate(events) if m.startswith("logic:oracle"))
    assert events[first_logic - 1][1].startswith("oracle: scored 145 queries")
    assert events[first_logic - 1][0] == pytest.approx(cheap)  # exactly the oracle's share
    steps = [b - a for a, b in itertools.pairwise(fractions)]
    biggest_stage = max(c.work for c in plan.cells) / total
    assert max(steps) <= biggest_stage + 1e-9  # no step skips more than one stage's work
    stage_lines = [line for line in lines if ": cxr-retrieve: " in line]
    assert [line.split(": ")[0] for line in stage_lines] == [
        "oracle",
        "oracle",
        "logic:oracle",
        "logic:oracle",
        "logic:oracle",
    ]
    assert "probe fit" in stage_lines[2] and "0 cached" in stage_lines[2]


def test_a_never_measured_model_is_timed_on_a_calibration_batch(settings: Settings) -> None:
    import time

    class Slow:
        """Embeds a text in 2 ms and an image in 20 ms: ten times the work per image."""

        def encode(self, items):
            for item in items:
                time.sleep(0.002 if isinstance(item, str) else 0.02)

    loaded: list[str] = []

    def load(spec, _settings):
        loaded.append(spec)
        return Slow()

    from medheb_app.evidence.study import Evidence

    image = Evidence(image=np.zeros((8, 8), np.float32))
    entries = [Item(f"t{i}", f"text {i}") for i in range(6)] + [Item("i", image)] * 6
    samples = samples_by_kind(entries)
    assert {k: len(v) for k, v in samples.items()} == {"text": 4, "image": 4}
    measured = {"known": Rate(0.5, "run 1", "model")}
    rates = calibrate_rates(["slow", "oracle", "known"], samples, measured, settings, load)
    assert loaded == ["slow"]  # baselines and measured models are not loaded
    assert rates["slow/text"].quality == rates["slow/image"].quality == "calibrated"
    assert 0.002 <= rates["slow/text"].seconds_per_item < 0.02
    assert 0.02 <= rates["slow/image"].seconds_per_item < 0.2
    assert rates["known"] == measured["known"]


# ---------------------------------------------------------------- training estimate


class _Clock:
    """A fake perf_counter the fake trainer below advances: timings are exact, not slept."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _fake_recipe(clock: _Clock, fixed: float, per_study: float, step: float, batch: int):
    """A Recipe-like trainer whose setup costs fixed + per_study x n seconds, then
    epochs x ceil(n / batch) steps of `step` seconds each, stopping between steps on `stop`."""
    import dataclasses

    from medheb_app.train.recipes import Recipe

    @dataclasses.dataclass
    class Config:
        epochs: int = 5
        n: int = 2000

    def run(config, out, settings, progress, stop):
        clock.now += fixed + per_study * config.n
        total = config.epochs * -(-config.n // batch)
        for i in range(1, total + 1):
            if stop is not None and stop.is_set():
                return None
            clock.now += step
            progress(i, total, 0.5)
        return None

    recipe = Recipe("fake", "a fake recipe", "x:y", run, job_fields=("epochs", "n"))
    object.__setattr__(recipe, "config_class", lambda: Config)
    return recipe


def test_training_progress_times_setup_and_steps(monkeypatch) -> None:
    from medheb_app.train import loop

    clock = _Clock()
    monkeypatch.setattr(loop.time, "perf_counter", clock)
    watch = loop.TrainingProgress(lambda *a: None, lambda line: None)
    assert watch.timing() == {}
    watch.stage("drawing 120 phantom studies")
    clock.now += 20.0
    watch.stage("reading the pixels of 120 studies")
    clock.now += 5.0
    watch.stage("caching image features 0/120")
    clock.now += 5.0
    watch(0, 40, float("nan"))  # a step-0 report is not a step
    for step in range(1, 11):
        clock.now += 2.0
        watch(step, 40, 1.0)
    assert watch.timing() == {
        "setup_s": 30.0, "step_s": 2.0, "steps": 10, "total_steps": 40, "first_step_s": 32.0,
        "reusable_s": 25.0,  # drawing and caching: a rerun on the same data reads them
    }  # fmt: skip


def test_a_training_estimate_scales_the_last_job_of_its_recipe() -> None:
    from types import SimpleNamespace

    from medheb_app.eval.estimate import estimate_training, training_history

    def job(i, kind="train", status="done", timing=None, **params):
        timing = {"setup_s": 40.0, "step_s": 0.5, "steps": 200, "total_steps": 200,
                  "reusable_s": 30.0}  # fmt: skip
        return SimpleNamespace(id=i, kind=kind, status=status, params=params,
                               result={"timing": timing})  # fmt: skip

    jobs = [
        job(9, recipe="report", epochs=2, n=500, status="failed"),
        job(8, kind="bench-run", recipe="report", epochs=2, n=500),
        job(7, recipe="label-aware", epochs=10),
        job(6, recipe="report", epochs=2, n=500),
        SimpleNamespace(
            id=5,
            kind="train",
            status="done",
            params={"recipe": "report"},
            result={"spec": "dual-lite@old"},
        ),  # fmt: skip  (no timing: older job)
    ]
    history = training_history(jobs)
    assert [t.source for t in history] == ["job 7", "job 6"]
    same = estimate_training("report", 2, 500, history)  # same data: corpus, features on disk
    assert same.quality == "same" and same.seconds == 10.0 + 200 * 0.5
    assert "measured in job 6 (2 epochs, 500 studies); its corpus and features are on disk" in (
        same.summary_line()
    )
    bigger = estimate_training("report", 6, 1000, history)  # steps x3 x2, setup x2
    assert bigger.quality == "scaled" and bigger.steps == 1200 and bigger.setup_s == 80.0
    assert bigger.seconds == 80.0 + 1200 * 0.5 and bigger.range_seconds == (340.0, 1360.0)
    fixed_data = estimate_training("label-aware", 20, None, history, uses_n=False)
    assert fixed_data.steps == 400 and fixed_data.seconds == 10.0 + 400 * 0.5
    assert estimate_training("medemb", 5, None, history, uses_n=False) is None


def test_a_first_training_is_timed_on_two_small_calibration_runs(monkeypatch, tmp_path) -> None:
    """No earlier job: two calibration runs (1 step on 16 studies, 4 on 64) split the setup into
    its fixed and per-study parts; the planned job's seconds follow exactly for a trainer whose
    costs are linear, as this fake one's are."""
    from medheb_app.eval import estimate as est
    from medheb_app.train import loop

    clock = _Clock()
    monkeypatch.setattr(loop.time, "perf_counter", clock)
    recipe = _fake_recipe(clock, fixed=12.0, per_study=0.05, step=0.8, batch=16)
    settings = Settings.from_env(data_dir=tmp_path)
    found = est.calibrate_training(recipe, epochs=20, n=2000, settings=settings)
    assert found.quality == "calibrated"
    assert found.setup_s == pytest.approx(12.0 + 0.05 * 2000)
    assert found.steps == 20 * 2000 // 16 and found.step_s == pytest.approx(0.8)
    assert found.seconds == pytest.approx(112.0 + 2500 * 0.8, rel=1e-3)
    assert "calibration runs of 16 and 64 studies" in found.source
    spent = clock.now - 100.0  # what calibrating cost: two small setups and 5 steps
    assert spent == pytest.approx(2 * 12.0 + 0.05 * (16 + 64) + 5 * 0.8)


def test_the_training_estimate_is_for_admins_only() -> None:
    from medheb_app.ui.admin_tab import training_estimate_view

    refused = training_estimate_view(None, False, "report", 5, 2000)  # type: ignore[arg-type]
    assert "medheb-notice error" in refused and "admin" in refused.lower()


def test_texts_are_priced_by_their_length_where_it_was_measured() -> None:
    """CXR-Retrieve's 145 queries are short phrases; a text rate measured on reports (MedHEB
    i2report) priced them per item at 6x their cost (BENCHMARKS.md). A run records the
    characters of the texts it embedded, and the estimate prices texts per character."""
    timing = {
        "dual-lite/text_s": 150.0,
        new_vectors_key("dual-lite/text"): 1000,
        "dual-lite/text_new_chars": 300_000,
    }  # fmt: skip  (300 characters per report)

    def summary_of(timing: dict) -> Summary:
        return Summary("s", {}, [], {}, "", "", "", timing=timing)

    summary = summary_of(timing)
    rate = measured_rate("dual-lite", [(4, summary)], "text")
    assert rate.seconds_per_item == pytest.approx(0.15) and rate.per_char == pytest.approx(5e-4)
    short = rate_for({"dual-lite/text": rate}, "dual-lite", "text", chars=36.0)
    assert short.seconds_per_item == pytest.approx(36 * 5e-4) and short.quality == "kind"
    assert "0.500 s per 1,000 characters x 36 characters" in short.source
    both = {"dual-lite/text": rate, "dual-lite/image": rate}
    assert rate_for(both, "dual-lite", "image", chars=36.0) is rate  # texts only
    old = summary_of({**timing, "dual-lite/text_new_chars": 0})
    unmeasured = measured_rate("dual-lite", [(3, old)], "text")  # an older run: per item
    assert rate_for({"dual-lite/text": unmeasured}, "dual-lite", "text", 36.0) is unmeasured

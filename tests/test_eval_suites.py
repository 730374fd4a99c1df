"""Both suites through one runner: stored, listed in the explorer, and reloaded byte-for-byte.

`bench run --suite medheb-lite` and `bench run --suite cxr-retrieve` each land in the store as
a run; their result files load back into the same tables; the phantom gallery evaluated is
the saved demo corpus on disk (the PNGs the app indexes), not a regenerated copy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medheb_app.cli import main
from medheb_app.eval.cxr_tables import render_tables
from medheb_app.eval.reports import render_report
from medheb_app.eval.results import CxrRetrieveReport, Summary, TaskRun, load_cxr_reports
from medheb_app.services import create_services
from medheb_app.settings import Settings
from medheb_app.store.db import Store
from medheb_app.store.runs import list_runs, results_of
from medheb_app.ui import explorer_tab as ex
from tests.test_cxr_cli import nih_fixture


def _bench_cxr(tmp_path: Path, capsys: pytest.CaptureFixture, *flags: str) -> tuple[Path, Path]:
    """`bench run` of the cxr-retrieve suite (oracle and random) over a small NIH-layout gallery
    through the CLI; returns the gallery and the run folder, failing with the CLI's error if it
    exits non-zero."""
    data = nih_fixture(tmp_path / "nih")
    out = tmp_path / "cxr-run"
    args = ["bench", "run", "--suite", "cxr-retrieve", "--data", f"nih:{data}", "--split", "all"]
    code = main([*args, "--model", "oracle", "--model", "random", "--out", str(out), *flags])
    assert code == 0, capsys.readouterr().err
    return data, out


def _stored_run(settings: Settings, run_id: int):
    store = Store.open(settings.database_url)
    run = next(r for r in list_runs(store) if r.id == run_id)
    return run, results_of(store, run_id)


def test_cxr_retrieve_suite_is_stored_and_reloads_into_the_same_tables(
    tmp_path: Path, settings: Settings, capsys
) -> None:
    data, out = _bench_cxr(tmp_path, capsys, "--json")
    payload = json.loads(capsys.readouterr().out)
    assert payload["kind"] == "cxr-retrieve" and set(payload["models"]) == {"oracle", "random"}

    run, rows = _stored_run(settings, payload["run_id"])
    assert run.suite == "cxr-retrieve" and run.status == "finished"
    assert {r.model for r in rows} == {"oracle", "random"}
    assert {r.task for r in rows} == {"cxr-retrieve"}
    assert "negation/P@5" in rows[0].metrics

    summary = Summary.from_disk(out)
    reports = [summary.cxr_report(m) for m in summary.models]
    assert [r.model for r in reports] == ["oracle", "random"]
    assert all(r.code_version and r.created and r.gallery_revision for r in reports)
    # report.md was rendered from the in-memory run; the reloaded files give the same bytes
    assert (out / "report.md").read_text() == render_report(summary)
    assert render_tables(load_cxr_reports(out)) == render_tables(reports)
    # the thin front writes a file that loads into the same tables as the stored run
    cli_out = tmp_path / "cxr.json"
    front = ["cxr-retrieve", "eval", "--data", f"nih:{data}", "--split", "all", "--out"]
    assert main([*front, str(cli_out), "--model", "oracle", "--model", "random"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(render_tables(load_cxr_reports(cli_out)))
    assert render_tables(load_cxr_reports(cli_out)) == render_tables(reports)

    services = create_services(settings, start_bootstrap=False)
    assert payload["run_id"] in [value for _, value in ex.run_choices(services)]
    assert ex.load_summary(services, payload["run_id"]).kind == "cxr-retrieve"


def test_medheb_suite_is_stored_and_reloads_into_the_same_tables(
    tmp_path: Path, settings: Settings, capsys
) -> None:
    out = tmp_path / "medheb-run"
    args = ["bench", "run", "--suite", "medheb-lite", "--task", "iu-findings2impression"]
    assert main([*args, "--model", "oracle", "--model", "random", "--out", str(out)]) == 0
    capsys.readouterr()
    summary = Summary.from_disk(out)
    run, rows = _stored_run(settings, summary.run_id)
    assert run.suite == "medheb-lite" and {r.model for r in rows} == {"oracle", "random"}
    assert (out / "report.md").read_text() == render_report(summary)
    task_run = summary.task_run("oracle", "iu-findings2impression")
    reloaded = TaskRun.from_dict(json.loads(json.dumps(task_run.to_dict())))
    assert reloaded == task_run and reloaded.code_version
    services = create_services(settings, start_bootstrap=False)
    assert summary.run_id in [value for _, value in ex.run_choices(services)]


def test_a_result_file_of_another_schema_is_refused(tmp_path: Path) -> None:
    report = CxrRetrieveReport(
        model="m",
        source="phantom",
        split="test",
        setting="main",
        paraphrase=False,
        n_gallery=0,
        regimes={},
        settings={},
        without_relevant={},
        queries=[],
    )
    path = report.save(tmp_path / "r.json")
    assert CxrRetrieveReport.load(path) == report
    path.write_text(json.dumps({**report.to_dict(), "schema_version": 99}))
    with pytest.raises(ValueError, match="incompatible version"):
        CxrRetrieveReport.load(path)


def test_phantom_gallery_is_the_saved_corpus_on_disk(
    tmp_path: Path, settings: Settings, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The images evaluated are the demo corpus's PNG files, pixel for pixel."""
    from medheb_app.evidence.phantoms.saved import demo_corpus
    from medheb_app.tasks.cxr_retrieve import load_gallery

    monkeypatch.setenv("MEDHEB_DEMO_SIZE", "40")
    small = Settings.from_env()
    gallery = load_gallery("phantom", small, split=None)
    directory = demo_corpus(small)
    assert len(gallery) == 40
    for study in gallery.studies:
        path = Path(study.path)
        assert path.is_file() and path.parent.parent == directory
        on_disk = np.asarray(Image.open(path), dtype=np.float32)
        assert np.array_equal(np.asarray(study.load_pixels(), dtype=np.float32), on_disk / 255.0)
    # and the run records which files it ranked
    out = tmp_path / "run"
    args = ["bench", "run", "--suite", "cxr-retrieve", "--split", "all", "--model", "oracle"]
    code = main([*args, "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    report = Summary.from_disk(out).cxr_report("oracle")
    shown = {hit["path"] for query in report.queries for hit in query["top_k"]}
    assert shown and all(Path(p).parent.parent == directory for p in shown)


def test_cxr_drill_down_names_the_violated_constraint(
    tmp_path: Path, settings: Settings, capsys
) -> None:
    data, out = _bench_cxr(tmp_path, capsys)
    capsys.readouterr()
    summary = Summary.from_disk(out)
    report = summary.cxr_report("random")
    # a negation query whose random top 10 holds a hard negative (both findings present)
    record = next(
        q
        for q in report.queries
        if q["kind"] == "negation"
        and q["metrics_main"]["P@1"] == 0.0
        and any(hit["findings"].get(q["negatives"][0]) == 1 for hit in q["top_k"])
    )
    failures = ex.query_choices(summary, "negation", ["oracle", "random"], failures_only=True)
    assert record["id"] in [qid for _, qid in failures]
    label = dict((qid, text) for text, qid in failures)[record["id"]]
    assert label.startswith("✓✗") and record["text"] in label
    page = ex.ranked_lists_html(summary, "negation", record["id"], ["oracle", "random"])
    assert f"excludes {record['negatives'][0]}" in page  # the query with its labels
    random_column = page.split("random · ✗ miss")[1]
    marks = [part.split("</span>")[0] for part in random_column.split("✗ VIOLATES: ")[1:]]
    assert any(f"has {record['negatives'][0]}" in mark for mark in marks), marks
    assert random_column.count('src="data:image/png;base64,') == 10  # thumbnails, inlined
    assert str(data) not in page  # inlined pixels, never a file path
    assert "medheb-chip violates" in random_column  # the broken finding chip in red


def test_bench_job_logs_each_task_and_every_skip_with_its_reason(
    tmp_path: Path, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from medheb_app.services.admin_jobs import bench_job
    from medheb_app.services.runs import shared_data_line

    missing = tmp_path / "no-shared-data"
    monkeypatch.setenv("MEDHEB_SHARED_DATA", str(missing))
    here = Settings.from_env()
    lines: list[str] = []
    fractions: list[float] = []
    params = {
        "suite": "medheb-lite",
        "models": ["oracle"],
        "tasks": [],
        "families": ["T-T"],  # IU reports (bundled) and PubMedQA (real data, absent here)
    }
    result = bench_job(here)(
        params, lambda f, m: fractions.append(f), lines.append, threading.Event()
    )
    assert any(str(missing) in line for line in lines)  # where real data was looked for
    assert any(line.startswith("oracle on iu-findings2impression: hit@1 100.0") for line in lines)
    skip = next(line for line in lines if line.startswith("skipped pubmedqa-q2context: "))
    assert str(missing) in skip, skip  # the reason names the folder looked in
    assert set(result["skipped"]) == {"pubmedqa-q2context"}
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert "MISSING" in shared_data_line(here)
    services = create_services(here, start_bootstrap=False)
    estimate = services.runs.estimate("medheb-lite", ["oracle", "random"], families=["T-T"])
    assert [(c.task, c.model) for c in estimate.cells] == [
        ("iu-findings2impression", "oracle"),
        ("iu-findings2impression", "random"),
    ]
    assert estimate.total_seconds == 0.0  # baselines embed nothing
    assert str(missing) in estimate.skipped["pubmedqa-q2context"]
    with pytest.raises(ValueError, match="Unknown task"):
        bench_job(here)(
            {**params, "tasks": ["nope"], "families": []},
            lambda f, m: None,
            print,
            threading.Event(),
        )

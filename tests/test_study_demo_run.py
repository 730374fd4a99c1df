"""The demo's own run (DATA_DIR/runs/demo-showcase, suite "custom": its tasks are made in code)
seeds a study from the CLI as the docs say, with its images and their SYNTHETIC marks; a run of
a suite this app cannot rebuild gives a clear error when --payloads tasks is asked for; and the
run files' inline thumbnails (region crops, slices held in memory) are shown (issue 22 item 6).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import select

from medheb_app.cli import main
from medheb_app.eval.medheb_scoring import item_payload
from medheb_app.evidence.study import Evidence
from medheb_app.settings import Settings
from medheb_app.store.db import Store
from medheb_app.store.study_tables import StudyItem
from medheb_app.study.payloads import Renderer, render_check
from medheb_app.study.run_outputs import load_task_output


@pytest.fixture
def demo_run(settings: Settings) -> Path:
    """The bootstrap's showcase run over a 120-phantom demo corpus, random against oracle."""
    from medheb_app.demo_showcase import SHOWCASE_RUN, ensure_showcase
    from medheb_app.evidence.phantoms.saved import demo_corpus

    corpus = demo_corpus(settings, 120)
    ensure_showcase(settings, corpus, 120, 0, models=["random", "oracle"])
    return settings.runs_dir / SHOWCASE_RUN


def _payloads(store: Store, study_id: int) -> list[dict]:
    with store.session() as session:
        rows = session.scalars(select(StudyItem).where(StudyItem.study_id == study_id)).all()
        found = []
        for row in rows:
            found.append(row.query_payload)
            found += [entry["payload"] for entry in (*row.top_a, *row.top_b)]
    return found


def test_the_demo_run_seeds_a_study_with_its_images_marked_synthetic(
    demo_run: Path, settings: Settings, capsys
) -> None:
    assert json.loads((demo_run / "summary.json").read_text())["suite"] == "custom"
    code = main(
        ["study", "create", "--run", str(demo_run), "--model", "random", "--model", "oracle",
         "--n", "6", "--name", "from-demo", "--gold-share", "0.2", "--json"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    created = json.loads(out)
    assert created["withheld"] == [] and created["n_items"] == 6 and created["n_gold"] >= 1
    payloads = _payloads(Store.open(settings.database_url), created["id"])
    images = [p for p in payloads if p["form"] == "image"]
    assert len(images) >= 6 and all(p["synthetic"] is True for p in images)
    assert all(render_check(p) is None for p in payloads)
    assert all(Path(p["image"]).is_relative_to(settings.data_dir / "study-media") for p in images)


def test_cli_and_ui_count_a_studys_items_the_same_way(
    demo_run: Path, settings: Settings, capsys
) -> None:
    """`study list` said "items=8+2 gold" for 8 rows of which 2 gold; create said 6 + 2."""
    from medheb_app.ui.analysis_tab import study_options

    assert main(
        ["study", "create", "--run", str(demo_run), "--model", "random", "--model", "oracle",
         "--n", "6", "--name", "counted", "--gold-share", "0.25"]
    ) == 0  # fmt: skip
    created = capsys.readouterr().out
    assert "6 items + 2 gold (8 in all) comparing random, oracle" in created
    assert main(["study", "list", "--json"]) == 0
    listed = {s["name"]: s for s in json.loads(capsys.readouterr().out)["studies"]}
    store = Store.open(settings.database_url)
    rows = _payloads(store, listed["counted"]["id"])
    assert (listed["counted"]["n_items"], listed["counted"]["n_gold"]) == (6, 2)
    with store.session() as session:
        n_rows = len(session.scalars(select(StudyItem).where(
            StudyItem.study_id == listed["counted"]["id"])).all())  # fmt: skip
    assert n_rows == 8 and rows
    assert main(["study", "list"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "counted" in x)
    assert "6 items + 2 gold (8 in all)" in line
    from medheb_app.services.studies import Studies

    services = type("S", (), {"store": store, "studies": Studies(settings, store)})()
    label = next(text for text, sid in study_options(services) if sid == listed["counted"]["id"])
    assert "6 items + 2 gold (8 in all)" in label


def test_tasks_payloads_on_a_suite_that_cannot_be_rebuilt_is_a_clear_error(
    demo_run: Path, capsys
) -> None:
    code = main(
        ["study", "create", "--run", str(demo_run), "--model", "random", "--model", "oracle",
         "--n", "2", "--name", "x", "--payloads", "tasks"]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert "made in code (suite 'custom')" in err and "--payloads auto" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_run_files_inline_thumbnail_is_shown_marked_synthetic(tmp_path: Path) -> None:
    crop = np.linspace(0, 1, 40 * 30, dtype=np.float32).reshape(40, 30)
    raw = item_payload(Evidence(image=crop))
    assert raw["thumbnail"].startswith("data:image/png;base64,") and "image" not in raw
    shown = Renderer(tmp_path / "media").from_run({**raw, "synthetic": True}, "t:crop")
    assert shown["form"] == "image" and shown["synthetic"] is True
    assert (shown["height"], shown["width"]) == (40, 30) and render_check(shown) is None
    with pytest.raises(ValueError, match="cannot be decoded"):
        Renderer(tmp_path / "media").from_run({"thumbnail": "data:image/png;base64,AAAA"}, "k")


def test_a_synthetic_tasks_older_run_file_marks_every_payload(tmp_path: Path) -> None:
    """Runs written before payloads carried the flag: the task's metadata marks them."""
    path = tmp_path / "t.json"
    path.write_text(
        json.dumps(
            {
                "task": {"name": "t", "family": "I-I", "split": "ID", "synthetic": True},
                "queries": [{"id": "q", "query": {"image": "q.png"}, "ranked": ["c"],
                             "positives": ["c"]}],
                "payloads": {"c": {"image": "c.png"}},
            }
        )
    )  # fmt: skip
    task = load_task_output(path)
    assert task.queries["q"].payload["synthetic"] is True
    assert task.candidates["c"]["synthetic"] is True

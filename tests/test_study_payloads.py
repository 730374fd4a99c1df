"""What raters are shown: one schema payload per evidence form, real content for every task
family of medheb-lite, and items that cannot be rendered withheld at study creation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from medheb_app.evidence.study import Evidence, Study
from medheb_app.store.db import Store
from medheb_app.store.study_tables import StudyItem
from medheb_app.study import create_study, describe_with_tasks, render_check
from medheb_app.study.payloads import Renderer, Unrenderable, locate
from medheb_app.tasks.base import Item, Query, Task, TaskMetadata
from tests.run_fixtures import medheb_lite_study

# one worker builds the session's medheb-lite run (tests/conftest.py) for the three modules
pytestmark = pytest.mark.xdist_group("medheb-lite-run")


def assert_real_content(payload: dict[str, Any]) -> str:
    """The payload shows something: files decode to non-empty pixels, a volume has >= 2
    frames, texts are non-empty, a region's box lies inside its image. Returns the form."""
    form = payload["form"]
    if form == "text":
        assert payload["text"].strip()
    elif form == "mixed":
        assert payload["text"].strip()
        assert assert_real_content(payload["media"]) in ("image", "volume", "region")
    elif form in ("image", "volume", "region"):
        pixels = np.asarray(Image.open(payload["image"]))
        assert pixels.size and pixels.shape[:2] == (payload["height"], payload["width"])
        if form == "volume":
            frames = np.load(payload["frames"])
            assert frames.ndim == 3 and 2 <= len(frames) <= 16 and frames.dtype == np.uint8
            assert np.asarray(Image.open(payload["montage"])).size
            assert payload["n_frames"] == len(frames) and payload["depth"] >= len(frames)
        if form == "region":
            x0, y0, x1, y1 = payload["box"]
            assert 0 <= x0 < x1 <= payload["width"] and 0 <= y0 < y1 <= payload["height"]
            crop = np.asarray(Image.open(payload["crop"]))
            assert crop.shape[:2] == (y1 - y0, x1 - x0)
            assert np.array_equal(crop, pixels[y0:y1, x0:x1])
    else:
        raise AssertionError(f"unknown form {form!r}")
    assert render_check(payload) is None
    return form


def meta(name: str, family: str, form: str = "2d") -> TaskMetadata:
    return TaskMetadata(
        name=name, family=family, form=form, split="ID", anatomy="chest", source="unit",
        qry_inst="Find it.", synthetic=True,
    )  # fmt: skip


def test_every_form_renders_to_its_schema(tmp_path: Path):
    xray = np.tile(np.linspace(0, 1, 32, dtype=np.float32), (24, 1))
    xray[5:15, 8:20] = np.linspace(0.1, 0.9, 120, dtype=np.float32).reshape(10, 12)
    volume = np.stack([xray * (d / 20) for d in range(21)])
    on_disk = tmp_path / "nih" / "00000001_000.png"
    on_disk.parent.mkdir()
    Image.fromarray((xray * 255).astype(np.uint8)).save(on_disk)
    crop = xray[5:15, 8:20].copy()
    task = Task(
        metadata=meta("unit-vg", "VG"),
        queries=[Query("q0", Evidence(text="left upper zone", image=xray), positives=("crop",))],
        candidates=[
            Item("crop", Evidence(image=crop)),
            Item("ct", Study(id="s1", form="3d", modality="CT", pixels=volume)),
            Item("file", Study(id="s2", form="2d", path=str(on_disk))),
            Item("text", "Right pleural effusion."),
            Item("vol+text", Evidence(text="CT chest", volume=volume)),
        ],
    )
    render = describe_with_tasks([task], tmp_path / "media")
    forms = {key: assert_real_content(render("unit-vg", key)) for key in ("q0", "crop", "ct")}
    forms |= {key: assert_real_content(render("unit-vg", key)) for key in ("file", "text")}
    forms["vol+text"] = assert_real_content(render("unit-vg", "vol+text"))
    assert forms == {
        "q0": "mixed",
        "crop": "region",
        "ct": "volume",
        "file": "image",
        "text": "text",
        "vol+text": "mixed",
    }
    assert render("unit-vg", "crop")["box"] == [8, 5, 20, 15]
    ct = render("unit-vg", "ct")
    assert (ct["depth"], ct["n_frames"]) == (21, 16)
    middle = np.asarray(Image.open(ct["image"]))
    assert middle.max() == round(255 * 10 / 20)  # slice 10 of 21
    # a file on disk is copied under a salted name: its path names no source or item
    assert render("unit-vg", "file")["image"] != str(on_disk)
    for path in tmp_path.joinpath("media").iterdir():
        assert len(path.stem) == 24 and "unit" not in path.name
    # unknown ids fall back on the run file's payload, or cannot be shown
    assert render("unit-vg", "other", {"text": "abstract"}) == {"form": "text", "text": "abstract"}
    with pytest.raises(Unrenderable):
        render("unit-vg", "other-2", {"ref": "x"})
    with pytest.raises(Unrenderable):
        render("unit-vg", "other-3", {"form": "3d"})  # what the runner writes for volumes
    with pytest.raises(Unrenderable, match="two slices"):
        render.writer.volume(volume[:1], "flat", True)


def test_run_file_volume_paths_become_volume_payloads(tmp_path: Path):
    volume = np.random.default_rng(0).random((6, 16, 16)).astype(np.float32)
    path = tmp_path / "vol.npy"
    np.save(path, volume)
    render = Renderer(tmp_path / "media")
    payload = render("t", "v", {"form": "3d", "volume": str(path)})
    assert assert_real_content(payload) == "volume" and payload["depth"] == 6
    assert render_check({"form": "region", "image": payload["image"], "crop": payload["image"],
                         "box": [0, 0, 99, 4], "width": 16, "height": 16}) == (
        "a region box outside its image"
    )  # fmt: skip
    assert render_check({"form": "image", "image": str(tmp_path / "gone.png")})
    assert render_check({"form": "text", "text": "  "}) == "empty text"


def test_locate_finds_a_crop_only_where_it_was_cut():
    image = np.random.default_rng(1).random((40, 50)).astype(np.float32)
    assert locate(image[7:19, 30:45], image) == (30, 7, 45, 19)
    assert locate(np.zeros((5, 5), np.float32), image) is None
    assert locate(image, image[:10, :10]) is None


def test_unrenderable_queries_are_withheld_and_replaced(tmp_path: Path, settings):
    from test_study_items import write_run

    run = write_run(tmp_path / "run", models=("oracle", "random"), payloads=True)
    for model in ("oracle", "random"):  # the text tasks' query 0 has nothing to show
        path = run / model / "pubmedqa-t-t.json"
        data = json.loads(path.read_text())
        data["queries"][0]["query"] = {"form": "3d"}
        path.write_text(json.dumps(data))
    store = Store.open(settings.database_url)
    created = create_study(
        store, "s", ["oracle", "random"], run, n_items=12, describe=Renderer(tmp_path / "m")
    )
    assert created.withheld == [
        {
            "task": "pubmedqa-t-t",
            "query_id": "pubmedqa-t-t:q0",
            "reason": "the run file has no text or media to show for this id",
        }
    ]
    # 12 queries were asked for; pubmedqa has only 2, so the withheld one is not replaced
    assert created.n_items == 11
    with store.session() as session:
        items = session.query(StudyItem).all()
        assert "pubmedqa-t-t:q0" not in {item.query_id for item in items}
        for item in items:
            for payload in [item.query_payload] + [e["payload"] for e in item.top_a + item.top_b]:
                assert_real_content(payload)


@pytest.mark.slow
def test_a_study_from_every_medheb_lite_task_shows_real_content(
    tmp_path: Path, settings, medheb_lite_run
):
    """Attack: 7 of 30 items of a medheb-lite study (volumes, region crops) showed "item ?"
    with empty galleries, and votes on them were stored."""
    tasks, store, created = medheb_lite_study(
        medheb_lite_run, settings, tmp_path, items_per_task=2, gold_share=0.1
    )
    families = {task.metadata.family for task in tasks}
    assert {"MB-VR", "VG", "I-I", "I-Lab", "I-Rep", "T-I", "VQA"} <= families
    assert created.withheld == [], created.withheld
    assert created.n_items == 2 * len(tasks) and created.n_gold >= 1
    forms: set[str] = set()
    with store.session() as session:
        items = session.query(StudyItem).all()
    assert {item.task for item in items} == {task.name for task in tasks}
    for item in items:
        for payload in [item.query_payload] + [e["payload"] for e in item.top_a + item.top_b]:
            form = assert_real_content(payload)
            forms.add(form)
            if form == "mixed":
                forms.add(f"mixed:{payload['media']['form']}")
    assert {"text", "image", "volume", "region", "mixed", "mixed:image"} <= forms

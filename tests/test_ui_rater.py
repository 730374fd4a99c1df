"""The rater page's pieces in-process: one renderer per evidence form (real pixels, never a
placeholder), the instruction line per family, and a study over every medheb-lite family
rendered as the raters' page renders it."""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medheb_app.evidence.study import Evidence, Study
from medheb_app.study import describe_with_tasks
from medheb_app.tasks.base import Item, Query, Task
from medheb_app.ui import evidence_view, rater_app
from medheb_app.ui.evidence_view import Unrenderable, render_payload
from tests.run_fixtures import medheb_lite_study, task_meta

# one worker builds the session's medheb-lite run (tests/conftest.py) for the three modules
pytestmark = pytest.mark.xdist_group("medheb-lite-run")

DATA_URI = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def _pictures(markup: str) -> list[np.ndarray]:
    """Every inlined image decoded back to pixels: what the browser would show."""
    import base64
    import io

    return [
        np.asarray(Image.open(io.BytesIO(base64.b64decode(data))))
        for data in DATA_URI.findall(markup)
    ]


@pytest.fixture
def payloads(tmp_path: Path) -> dict[str, dict]:
    xray = np.tile(np.linspace(0, 1, 32, dtype=np.float32), (24, 1))
    xray[5:15, 8:20] = np.linspace(0.1, 0.9, 120, dtype=np.float32).reshape(10, 12)
    volume = np.stack([xray * (d / 20) for d in range(21)])
    task = Task(
        metadata=task_meta("unit-vg", "VG"),
        queries=[Query("q0", Evidence(text="left upper zone", image=xray), positives=("crop",))],
        candidates=[
            Item("crop", Evidence(image=xray[5:15, 8:20].copy())),
            Item("ct", Study(id="s1", form="3d", modality="CT", pixels=volume)),
            Item("img", Evidence(image=xray)),
            Item("text", "Right pleural effusion."),
        ],
    )
    render = describe_with_tasks([task], tmp_path / "media")
    return {key: render("unit-vg", key) for key in ("q0", "crop", "ct", "img", "text")}


def test_every_form_renders_real_pixels_or_text(payloads):
    image = render_payload(payloads["img"])
    [pixels] = _pictures(image)
    assert pixels.shape[:2] == (24, 32) and pixels.std() > 0  # the image itself, not a blank
    assert "ev-zoomable" in image  # click to zoom
    region = render_payload(payloads["crop"])
    [outlined] = _pictures(region)
    x0, y0, x1, _y1 = payloads["crop"]["box"]
    assert outlined.shape[:2] == (24, 32)  # the whole image, with the box drawn on it
    assert (outlined[y0, x0:x1] == (255, 200, 0)).all()
    volume = render_payload(payloads["ct"])
    frames = _pictures(volume)
    assert len(frames) == 16 + 1  # 16 slider frames and the montage
    assert 'class="ev-slider"' in volume and re.search(r"ev-slice\">slice 1[0-2] of 21", volume)
    assert volume.count('style="display:none"') == 15  # only the middle slice shows at first
    mixed = render_payload(payloads["q0"])
    assert "left upper zone" in mixed and len(_pictures(mixed)) == 1
    assert "Right pleural effusion." in render_payload(payloads["text"])


def test_synthetic_mark_sits_outside_the_pixels(payloads):
    synthetic = dict(payloads["img"], synthetic=True)
    markup = render_payload(synthetic)
    [pixels] = _pictures(markup)
    plain = _pictures(render_payload(dict(payloads["img"], synthetic=False)))[0]
    assert np.array_equal(pixels, plain)  # nothing burnt over the image (lung apices)
    assert markup.index("</figure>") > markup.index('class="ev-mark">SYNTHETIC')
    assert markup.index("<img") < markup.index("ev-mark")


def test_what_cannot_be_shown_is_refused_not_replaced(payloads, tmp_path, caplog):
    missing = dict(payloads["img"], image=str(tmp_path / "gone.png"))
    for bad in (missing, {"form": "text", "text": "  "}, {"form": "3d"}, {"ref": "x"}, {}):
        with pytest.raises(Unrenderable):
            render_payload(bad)
    with pytest.raises(Unrenderable):
        evidence_view.render_list([payloads["text"], missing], "A")
    assert evidence_view.try_render(missing, "hit 3") is None
    assert "hit 3 withheld" in caplog.text


def test_instruction_line_names_what_better_means_per_family(payloads):
    text, image = payloads["text"], payloads["img"]
    cases = {
        "VG": (payloads["q0"], [payloads["crop"]]),
        "MB-VR": (payloads["ct"], [payloads["ct"]]),
        "I-I": (image, [image]),
        "I-Lab": (image, [{"form": "text", "text": "Effusion"}]),
        "I-Rep": (image, [{"form": "text", "text": "Findings: " + "normal lungs " * 10}]),
        "T-I": (text, [image]),
        "T-T": (text, [text]),
        "VQA": ({"form": "mixed", "text": "Is there effusion?", "media": image}, [text]),
    }
    for family, (query, candidates) in cases.items():
        assert rater_app.family_of(query, candidates) == family
        line = html.escape(rater_app.INSTRUCTIONS[family])
        assert line in rater_app.instruction_for(family)
    assert "answers the question" in rater_app.INSTRUCTIONS["VQA"]
    assert "region" in rater_app.INSTRUCTIONS["VG"]
    assert "same patient's other scan" in rater_app.INSTRUCTIONS["MB-VR"]  # a pairing family


@pytest.mark.slow
def test_a_study_over_every_medheb_lite_family_renders_on_the_rater_page(
    tmp_path, settings, medheb_lite_run
):
    """Issue 11: items with volumes or region crops rendered as 'item ?' with empty galleries.
    Every item of a medheb-lite study must render (query and both top-3 lists) with pixels
    for every image, volume and region."""
    from medheb_app.study import next_item, record_vote, sign_in_open

    tasks, store, created = medheb_lite_study(
        medheb_lite_run, settings, tmp_path, items_per_task=1, open_enrolment=True
    )
    rater = sign_in_open(store, created.id, "renderer")
    families, n_pictures = set(), 0
    while (view := next_item(store, created.id, rater.rater_id)) is not None:
        query, side_a, side_b = rater_app.render_view(view)
        for payload, markup in ((view.query, query),):
            if payload["form"] != "text":
                assert _pictures(markup), payload["form"]
        n_pictures += len(_pictures(query + side_a + side_b))
        families.add(rater_app.family_of(view.query, [*view.side_a, *view.side_b]))
        record_vote(store, view.token, rater.rater_id, "tie")
    assert {"MB-VR", "VG", "I-I", "T-I", "VQA"} <= families, families
    assert n_pictures > 3 * len(tasks)


def _luminance(hex_colour: str) -> float:
    """WCAG 2.x relative luminance of #rrggbb."""
    channels = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def test_synthetic_tags_vote_bar_and_query_size_are_legible():
    """Issue 18 item 6: the SYNTHETIC tag had dark text on dark red (the theme's text colour
    won), the vote bar fell below a tall 3-D item on desktop, the query showed at about 90 px
    beside 175 px candidates."""
    import re

    css = rater_app.RATER_CSS
    mark = re.search(r"\.ev-mark\{color:(#[0-9a-f]{6}) !important;background:(#[0-9a-f]{6})", css)
    assert mark, "the rater page pins the tag's colours over the theme's"
    fg, bg = (_luminance(c) for c in mark.groups())
    ratio = (max(fg, bg) + 0.05) / (min(fg, bg) + 0.05)
    assert ratio >= 4.5, ratio  # WCAG AA for normal text
    desktop = css.split("@media")[0]
    assert "#rater-votes{position:fixed !important" in desktop  # on every width, not phones only
    query = re.search(r"\.rater-query \.ev-figure img\{width:min\(100%, (\d+)px\)", desktop)
    assert query and int(query.group(1)) >= 260  # at least a candidate's 260 px cap


def test_the_keys_line_offers_undo_only_where_a_vote_can_be_withdrawn():
    """Reveal on, one rater per item: final at once. Several raters per item: names come once
    all have voted, so undo works until then. Reveal off: undo (issue 22 item 6d)."""
    from medheb_app.ui.rater_app import keys_line

    assert "U = undo" not in keys_line(False) and "Each vote is final" in keys_line(False)
    assert "U = undo (within 30 s of a vote, until the systems are named)" in keys_line(True, True)
    assert "U = undo (within 30 s of a vote)" in keys_line(True) and "final" not in keys_line(True)

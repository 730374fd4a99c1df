"""Shared rendering helpers: SYNTHETIC overlay, volume slices, finding chips, notices."""

from __future__ import annotations

import numpy as np
import pytest

from medheb_app.ui import components as ui


def test_synthetic_label_is_burnt_into_the_top_band_only():
    image = np.full((200, 160), 0.5, dtype=np.float32)
    plain = ui.render_image(image, synthetic=False)
    labelled = ui.render_image(image, synthetic=True)
    assert plain.shape == labelled.shape == (200, 160, 3) and plain.dtype == np.uint8
    band = max(12, 200 // 10)
    top_changed = np.abs(labelled[:band].astype(int) - plain[:band]).sum(axis=-1) > 0
    assert top_changed.mean() > 0.9  # the band covers the top rows
    assert (labelled[band + 2 :] == plain[band + 2 :]).all()  # the anatomy below is untouched
    white = (labelled[:band] > 240).all(axis=-1)
    assert white.sum() > 30  # the word itself is drawn in white


def test_volume_shows_the_chosen_slice_clamped_to_range():
    volume = np.stack([np.full((8, 8), i / 10, dtype=np.float32) for i in range(5)])
    assert ui.render_image(volume, False)[0, 0, 0] == round(0.2 * 255)  # middle slice
    assert ui.render_image(volume, False, slice_index=4)[0, 0, 0] == round(0.4 * 255)
    assert ui.render_image(volume, False, slice_index=99)[0, 0, 0] == round(0.4 * 255)
    rgb = np.zeros((4, 4, 3), dtype=np.float32)
    assert ui.render_image(rgb, False).shape == (4, 4, 3)  # colour image, not a volume
    with pytest.raises(ValueError):
        ui.to_rgb_uint8(np.zeros((2, 2, 2, 2)))


def test_chips_mark_violations_and_skip_blank_findings():
    findings = {"Pleural Effusion": 1, "Cardiomegaly": 1, "Edema": 0, "Fracture": None}
    page = ui.finding_chips_html(findings, positive=["Pleural Effusion"], negative=["Cardiomegaly"])
    assert 'violates" title="present">Cardiomegaly' in page
    assert 'present" title="present">Pleural Effusion' in page
    assert "Edema: absent" in page and "Fracture" not in page
    missing = ui.finding_chips_html({"Edema": 0}, positive=["Pneumothorax"])
    assert "Pneumothorax: not reported" in missing


def test_violation_words():  # the gallery captions are pinned in test_ui_search_results
    words = ui.violation_words({"Cardiomegaly": "present", "Pleural Effusion": "missing"})
    assert words == ["has Cardiomegaly", "lacks Pleural Effusion"]


def test_notices_escape_html_and_progress_clamps():
    assert "&lt;script&gt;" in ui.notice_html("error", "<script>x</script>")
    assert ui.notice_html("error", "") == ""
    assert 'aria-valuenow="100"' in ui.progress_html(1.7, "done")
    assert 'aria-valuenow="0"' in ui.progress_html(-1, "start")
    parsed = ui.constraints_html(["Edema"], [], ["blorp"])
    assert (
        'Must show:</b> <span class="medheb-chip present">Edema</span>' in parsed
        and "Must not show:</b> none" in parsed
    )
    assert "Did you mean" not in parsed and "Read:" not in parsed


def test_constraints_show_corrections_suggestions_and_why_a_query_was_not_read():
    parsed = ui.constraints_html(
        ["Pleural Effusion"],
        [],
        ["pneumo"],
        corrections={"efusion": "effusion"},
        suggestions={"pneumo": ["pneumonia", "pneumothorax"], "<b>x": ["<i>"]},
    )
    assert "<b>Read:</b> 'efusion' as 'effusion'" in parsed
    assert "<b>Did you mean</b> 'pneumonia' or 'pneumothorax' for 'pneumo'?" in parsed
    assert "&lt;b&gt;x" in parsed and "<i>" not in parsed
    refused = ui.constraints_html([], [], error="The query is 1,200 characters long; <limit>")
    assert "Not read:</b> The query is 1,200" in refused and "&lt;limit&gt;" in refused
    assert "Must show" not in refused
    assert "Uncertain" not in parsed
    left_open = ui.constraints_html([], ["Edema"], uncertain=["Pleural Effusion"])
    assert (
        'Uncertain (hedged or unclear):</b> <span class="medheb-chip uncertain">Pleural Effusion'
        in left_open
    )

"""Shared rendering helpers: SYNTHETIC band under an image, volume slices, chips, notices."""

from __future__ import annotations

import numpy as np
import pytest

from medheb_app.ui import components as ui


def test_synthetic_label_is_a_band_under_the_pixels_never_over_them():
    image = np.full((200, 160), 0.5, dtype=np.float32)
    plain = ui.render_image(image, synthetic=False)
    labelled = ui.render_image(image, synthetic=True)
    assert plain.shape == (200, 160, 3) and plain.dtype == np.uint8
    band = max(14, 200 // 10)
    assert labelled.shape == (200 + band, 160, 3)
    assert (labelled[:200] == plain).all()  # every pixel of the image is untouched
    under = labelled[200:]
    assert (np.abs(under.astype(int) - (122, 16, 32)).sum(axis=-1) == 0).mean() > 0.5
    white = (under > 240).all(axis=-1)
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


def test_warnings_of_one_kind_collapse_into_one_line():
    """14 probe notes of the same kind (ranking/index_logic.probe_notes' wording, one per
    finding, numbers differing) become one box listing the findings; other kinds stay apart."""
    names = [f"Finding {chr(65 + i)}" for i in range(14)]
    probe = [
        f"{name}: too few labelled training studies in this index to fit a probe ({i} positive "
        "of 40); it is scored by each image's similarity to the word instead, which is weak."
        for i, name in enumerate(names)
    ]
    other = "No known finding in the query, so results are ranked by similarity only."
    warnings = [probe[0], other, *probe[1:], other]
    kinds = ui.warning_kinds(warnings)
    assert [len(members) for _, members in kinds] == [14, 1]
    line = kinds[0][0]
    assert line.startswith("14 findings (Finding A, Finding B, ") and "Finding N)" in line
    assert line.endswith(
        "too few labelled training studies in this index to fit a probe; it is "
        "scored by each image's similarity to the word instead, which is weak."
    )
    page = ui.warnings_html(warnings)
    assert page.count('class="medheb-notice warning"') == 2
    assert page.count("<summary>") == 1 and page.count("<li>") == 14  # details one click away
    assert "(13 positive of 40)" in page
    single = ui.warnings_html([probe[0]])
    assert single.count("medheb-notice warning") == 1 and "<details>" not in single

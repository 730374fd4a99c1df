"""The search page's reading block (issue 20 item 5): chips per state, words not understood,
and for a pasted report the sentence each constraint came from."""

from __future__ import annotations

from medheb_app.evidence.findings import CXR_RETRIEVE_10
from medheb_app.query.parser import parse_query
from medheb_app.query.provenance import sentences, sources
from medheb_app.ui.components import constraints_html
from medheb_app.ui.query_reading import reading_html

REPORT = (
    "There is minimal opacity in the left lung base. The lungs are otherwise clear. "
    "No pneumothorax. Possible small effusion; heart size 1.5 cm wider."
)


def _payload(text: str) -> dict:
    parsed = parse_query(text, CXR_RETRIEVE_10)
    return {"constraints": parsed.constraints(), "unknown_terms": list(parsed.unknown)}


def test_sentences_split_at_the_parsers_ends_not_at_a_decimal_point() -> None:
    spans = [REPORT[a:b] for a, b in sentences(REPORT)]
    assert spans[0] == "There is minimal opacity in the left lung base."
    assert spans[-1] == "heart size 1.5 cm wider."
    assert len(spans) == 5


def test_each_constraint_names_the_sentence_it_came_from() -> None:
    by_finding = {r.finding: r for r in sources(parse_query(REPORT))}
    opacity = by_finding["Lung Opacity"]
    assert opacity.state == "required"
    assert [(s.sentence, s.state) for s in opacity.sources] == [
        ("There is minimal opacity in the left lung base.", "required"),
        ("The lungs are otherwise clear.", "excluded"),
    ]
    assert by_finding["Pneumothorax"].sources[0].sentence == "No pneumothorax."
    assert by_finding["Pleural Effusion"].state == "uncertain"
    start = by_finding["Pneumothorax"].sources[0].start
    assert REPORT[start : start + 16] == "No pneumothorax."


def test_the_parsed_view_shows_chips_and_the_reading_block_the_sentences() -> None:
    payload = _payload(REPORT)
    constraints = payload["constraints"]
    parsed = constraints_html(
        constraints["positive"],
        constraints["negative"],
        payload["unknown_terms"],
        uncertain=constraints["uncertain"],
    )
    assert '<b>Must show:</b> <span class="medheb-chip present">Lung Opacity</span>' in parsed
    assert '<span class="medheb-chip uncertain">Pleural Effusion</span>' in parsed
    assert '<span class="medheb-chip absent">Pneumothorax</span>' in parsed
    shown = reading_html(REPORT, payload)
    assert "There is minimal opacity in the left lung base." in shown
    assert "<th>From</th>" in shown
    assert "Must show" not in shown and "Not understood" not in shown  # said once, above
    assert reading_html("effusion and no zorbless", _payload("effusion and no zorbless")) == ""
    history = reading_html("h/o pneumothorax", _payload("h/o pneumothorax"))
    assert '<span class="medheb-chip absent">Pneumothorax</span>' in history
    assert reading_html("hello there", {"constraints": {}, "unknown_terms": []}) == ""


def test_the_reading_block_escapes_what_the_user_typed() -> None:
    text = "effusion <script>alert(1)</script>. no pneumothorax"
    shown = reading_html(text, _payload(text))
    assert "<script>" not in shown

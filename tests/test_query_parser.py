"""The query parser: synonyms, negation scope, questions, hedges and the satisfies() semantics."""

from __future__ import annotations

import pytest

from medheb_app.evidence.findings import CHEXPERT_14, CXR_RETRIEVE_10
from medheb_app.query.parser import (
    ParsedQuery,
    is_hard_negative,
    parse_query,
    satisfies,
    violations,
)

AT, CM, CO, ED, FX = "Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Fracture"
LL, LO, PE, PN, PTX = "Lung Lesion", "Lung Opacity", "Pleural Effusion", "Pneumonia", "Pneumothorax"

# (text, expected positive set, expected negative set)
TABLE: list[tuple[str, set[str], set[str]]] = [
    # benchmark templates (CXR-Retrieve section 3.2)
    ("Edema", {ED}, set()),
    ("Edema and Consolidation", {ED, CO}, set()),
    ("Edema and no Consolidation", {ED}, {CO}),
    ("an image with Atelectasis but without Pneumonia", {AT}, {PN}),
    ("Lung Opacity and no Lung Lesion", {LO}, {LL}),
    ("Pleural Effusion and no Pneumothorax", {PE}, {PTX}),
    # synonyms and abbreviations
    ("effusion", {PE}, set()),
    ("pleural fluid", {PE}, set()),
    ("bilateral pleural effusions", {PE}, set()),
    ("blunting of the costophrenic angle", {PE}, set()),
    ("PTX", {PTX}, set()),
    ("pneumothoraces", {PTX}, set()),
    ("collapsed lung", {PTX}, set()),
    ("cardiac enlargement", {CM}, set()),
    ("enlarged heart", {CM}, set()),
    ("the heart is enlarged", {CM}, set()),
    ("CM", {CM}, set()),
    ("a 2 cm nodule", {LL}, set()),
    ("collapse of the left lower lobe", {AT}, set()),
    ("volume loss", {AT}, set()),
    ("plate atelectasis", {AT}, set()),
    ("nodule", {LL}, set()),
    ("lung mass", {LL}, set()),
    ("nodular opacity", {LL}, set()),
    ("infiltrate", {LO}, set()),
    ("airspace opacity", {LO}, set()),
    ("airspace consolidation", {CO}, set()),
    ("ground-glass opacity", {LO}, set()),
    ("pulmonary oedema", {ED}, set()),
    ("pulmonary edema", {ED}, set()),
    ("CHF", {ED}, set()),
    ("vascular congestion", {ED}, set()),
    ("broken rib", {FX}, set()),
    ("rib fractures", {FX}, set()),
    ("PNA", {PN}, set()),
    ("infection", {PN}, set()),
    ("hydropneumothorax", {PE, PTX}, set()),
    # negation cues
    ("no effusion", set(), {PE}),
    ("without cardiomegaly", set(), {CM}),
    ("w/o fx", set(), {FX}),
    ("no evidence of pneumothorax", set(), {PTX}),
    ("free of effusion", set(), {PE}),
    ("negative for pneumonia", set(), {PN}),
    ("absence of edema", set(), {ED}),
    ("pneumothorax absent", set(), {PTX}),
    ("pneumothorax ruled out", set(), {PTX}),
    ("effusion not seen", set(), {PE}),
    ("edema but not effusion", {ED}, {PE}),
    ("effusion, not pneumothorax", {PE}, {PTX}),
    ("consolidation excluding pneumonia", {CO}, {PN}),
    # negation scope over lists
    ("no effusion or pneumothorax", set(), {PE, PTX}),
    ("no edema, effusion, or PTX", set(), {ED, PE, PTX}),
    ("neither edema nor effusion", set(), {ED, PE}),
    ("no effusion and no pneumothorax", set(), {PE, PTX}),
    ("no effusion and pneumothorax", {PTX}, {PE}),
    ("cardiomegaly without edema or effusion", {CM}, {ED, PE}),
    ("no cardiomegaly, with effusion", {PE}, {CM}),
    ("atelectasis, consolidation and no pneumonia", {AT, CO}, {PN}),
    ("neither edema nor effusion, nodule present", {LL}, {ED, PE}),
    ("no effusion seen, edema", {ED}, {PE}),
    ("no large left pleural effusion", set(), {PE}),
    ("PTX and no effusion.", {PTX}, {PE}),
    ("Effusion. No pneumothorax; cardiomegaly", {PE, CM}, {PTX}),
    # questions and hedges are neither required nor excluded
    ("rule out pneumothorax", set(), set()),
    ("r/o PTX", set(), set()),
    ("possible pneumonia and effusion", {PE}, set()),
    ("cannot exclude pneumonia", set(), set()),
    ("?pneumonia", set(), set()),
    ("atelectasis, pneumonia cannot be excluded", {AT}, set()),
    # case and spacing
    ("  PLEURAL   EFFUSION and NO cardiomegaly ", {PE}, {CM}),
]


@pytest.mark.parametrize(("text", "positive", "negative"), TABLE, ids=[row[0] for row in TABLE])
def test_phrasing_table(text: str, positive: set[str], negative: set[str]) -> None:
    parsed = parse_query(text)
    assert set(parsed.positive) == positive
    assert set(parsed.negative) == negative


def test_table_is_large_enough() -> None:
    assert len(TABLE) >= 60


def test_rule_out_is_a_question_with_a_warning() -> None:
    parsed = parse_query("rule out pneumothorax")
    assert parsed.uncertain == (PTX,)
    assert not parsed.has_constraints
    assert any("question" in warning for warning in parsed.warnings)


def test_hedge_goes_to_uncertain() -> None:
    parsed = parse_query("possible pneumonia and effusion")
    assert parsed.uncertain == (PN,)
    assert parsed.positive == (PE,)


def test_negation_of_unknown_words_is_reported_not_dropped() -> None:
    parsed = parse_query("no acute cardiopulmonary process")
    assert parsed.negative == ()
    assert "cardiopulmonary" in parsed.unknown
    assert parsed.warnings and "no" in parsed.warnings[0]


def test_unknown_word_inside_a_negation_list_is_flagged() -> None:
    parsed = parse_query("effusion and no granuloma or pneumothorax")
    assert parsed.negative == (PTX,)
    assert "granuloma" in parsed.unknown
    assert any("granuloma" in warning for warning in parsed.warnings)


def test_stop_words_are_not_unknown() -> None:
    parsed = parse_query("show me an image of the chest with a small left pleural effusion")
    assert parsed.unknown == ()
    assert parsed.warnings == ()


def test_out_of_vocabulary_finding_is_reported() -> None:
    parsed = parse_query("pleural thickening and no effusion")
    assert parsed.negative == (PE,)
    assert "pleural thickening" in parsed.unknown
    assert any("Pleural Other" in warning for warning in parsed.warnings)
    wider = parse_query("pleural thickening and no effusion", vocabulary=CHEXPERT_14)
    assert wider.positive == ("Pleural Other",)
    assert wider.warnings == ()


def test_or_between_positives_is_read_as_and_with_warning() -> None:
    parsed = parse_query("effusion or pneumothorax")
    assert set(parsed.positive) == {PE, PTX}
    assert any("conjunction" in warning for warning in parsed.warnings)


def test_normal_excludes_every_finding() -> None:
    parsed = parse_query("normal chest x-ray")
    assert set(parsed.negative) == set(CXR_RETRIEVE_10)
    assert parsed.warnings
    assert parse_query("normal", vocabulary=CHEXPERT_14).positive == ("No Finding",)


def test_contradiction_is_warned() -> None:
    parsed = parse_query("effusion and no effusion")
    assert parsed.positive == (PE,) and parsed.negative == (PE,)
    assert satisfies({PE: 1}, parsed) is False and satisfies({PE: 0}, parsed) is False
    assert any("both required and excluded" in warning for warning in parsed.warnings)


def test_dangling_negation_is_warned() -> None:
    parsed = parse_query("effusion and no")
    assert parsed.positive == (PE,)
    assert any("not followed by a known finding" in warning for warning in parsed.warnings)


def test_order_of_first_mention_and_no_duplicates() -> None:
    parsed = parse_query("pneumothorax, effusion and pleural effusion")
    assert parsed.positive == (PTX, PE)


def test_to_dict_and_describe() -> None:
    parsed = parse_query("effusion and no cardiomegaly")
    assert parsed.describe() == "Pleural Effusion AND NOT Cardiomegaly"
    assert parsed.to_dict()["negative"] == [CM]
    assert ParsedQuery(text="").describe() == "(no constraints)"


@pytest.mark.parametrize(
    ("findings", "main", "strict"),
    [
        ({AT: 1, PN: 0}, True, True),
        ({AT: 1, PN: None}, True, False),
        ({AT: 1}, True, False),  # unmentioned key
        ({AT: 1, PN: -1}, True, False),
        ({AT: 1, PN: 1}, False, False),
        ({AT: -1, PN: 0}, False, False),
        ({AT: 0, PN: 0}, False, False),
        ({AT: 1.0, PN: 0.0}, True, True),  # CSV floats
    ],
)
def test_satisfies_main_and_strict(findings: dict, main: bool, strict: bool) -> None:
    parsed = parse_query("Atelectasis and no Pneumonia")
    assert satisfies(findings, parsed, "main") is main
    assert satisfies(findings, parsed, "strict") is strict


def test_satisfies_is_none_without_constraints() -> None:
    assert satisfies({AT: 1}, parse_query("rule out atelectasis")) is None
    assert satisfies({AT: 1}, parse_query("hello")) is None


def test_satisfies_rejects_unknown_setting() -> None:
    with pytest.raises(ValueError, match="main"):
        satisfies({}, parse_query("edema"), "loose")  # type: ignore[arg-type]


def test_hard_negative_and_violations() -> None:
    parsed = parse_query("Atelectasis and no Pneumonia")
    assert is_hard_negative({AT: 1, PN: 1}, parsed)
    assert not is_hard_negative({AT: 0, PN: 1}, parsed)
    assert not is_hard_negative({AT: 1, PN: -1}, parsed)
    assert not is_hard_negative({AT: 1, PN: 1}, parse_query("Atelectasis"))
    assert violations({AT: 0, PN: 1}, parsed) == {AT: "missing", PN: "present"}
    assert violations({AT: 1, PN: 0}, parsed) == {}

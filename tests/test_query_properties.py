"""Property: no generated phrasing ever puts a finding the text excludes in "must show".

Queries are composed from clauses with a known ground truth: negated lists (known cues,
strong and weak, any coordinator), lists behind a word the parser does not know, postfix
negations, structures declared normal, hedges and questions, and plain required findings,
joined by sentence punctuation or conjunctions, with laterality and severity words and
random case. Whatever the parser makes of the rest, a finding the generator negated is never
required, and no finding is both required and excluded.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from medheb_app.query.parser import parse_query

AT, CM, CO, ED, FX = "Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Fracture"
LL, LO, PE, PN, PTX = "Lung Lesion", "Lung Opacity", "Pleural Effusion", "Pneumonia", "Pneumothorax"

FINDINGS = [
    ("effusion", PE),
    ("pleural effusion", PE),
    ("effusions", PE),
    ("pneumothorax", PTX),
    ("PTX", PTX),
    ("edema", ED),
    ("CHF", ED),
    ("cardiomegaly", CM),
    ("enlarged heart", CM),
    ("consolidation", CO),
    ("atelectasis", AT),
    ("pneumonia", PN),
    ("nodule", LL),
    ("mass", LL),
    ("opacity", LO),
    ("fracture", FX),
    ("rib fractures", FX),
]
MODIFIERS = ["", "", "small ", "left ", "bilateral ", "mild ", "large right ", "trace "]
KNOWN_NEGATIONS = [
    "no",
    "No",
    "not",
    "without",
    "negative for",
    "no evidence of",
    "free of",
    "absence of",
    "sans",
    "w/o",
    "devoid of",
    "lack of",
    "neither",
    "there is no",
    "but no",
]
UNKNOWN_CUES = ["zorbless", "nary", "minus", "negligible", "barring", "wanting", "nix"]
POSTFIX = ["absent", "not seen", "ruled out", "excluded", "is absent", "resolved", "not identified"]
LIST_JOINERS = [", ", " or ", " and ", ", and ", ", or ", " nor ", " / "]
CLAUSE_JOINERS = [". ", "; ", "\n", ". ", " and ", " but ", " with ", ", ", " "]
NORMAL_STRUCTURES = [
    ("heart size is normal", {CM}),
    ("normal heart size", {CM}),
    ("cardiac silhouette within normal limits", {CM}),
    ("heart is not enlarged", {CM}),
    ("lungs are clear", {LO, CO, PN, ED, AT}),
    ("clear lungs", {LO, CO, PN, ED, AT}),
    ("costophrenic angles are sharp", {PE}),
    ("no acute cardiopulmonary process", {LO, CO, PN, ED, AT, PE, PTX}),
    ("bones are intact", {FX}),
]
HEDGES = ["possible", "rule out", "r/o", "?", "cannot exclude", "likely", "evaluate for"]

finding = st.tuples(st.sampled_from(MODIFIERS), st.sampled_from(FINDINGS))


def _listed(items: list[tuple[str, tuple[str, str]]], joiners: list[str]) -> str:
    text = ""
    for position, (modifier, (phrase, _)) in enumerate(items):
        if position:
            text += joiners[position - 1]
        text += modifier + phrase
    return text


@st.composite
def clause(draw: st.DrawFn) -> tuple[str, set[str]]:
    """(text, the findings it negates)."""
    kind = draw(st.sampled_from(["pos", "neg", "unknown", "postfix", "normal", "hedge"]))
    items = draw(st.lists(finding, min_size=1, max_size=4))
    joiners = draw(st.lists(st.sampled_from(LIST_JOINERS), min_size=3, max_size=3))
    listed = _listed(items, joiners)
    names = {name for _, (_, name) in items}
    if kind == "pos":
        return _listed(items, [" and "] * 3), set()
    if kind == "neg":
        return f"{draw(st.sampled_from(KNOWN_NEGATIONS))} {listed}", names
    if kind == "unknown":
        return f"{draw(st.sampled_from(UNKNOWN_CUES))} {listed}", names
    if kind == "postfix":
        return f"{listed} {draw(st.sampled_from(POSTFIX))}", names
    if kind == "normal":
        return draw(st.sampled_from(NORMAL_STRUCTURES))
    return f"{draw(st.sampled_from(HEDGES))} {listed}", set()


@st.composite
def query(draw: st.DrawFn) -> tuple[str, set[str]]:
    clauses = draw(st.lists(clause(), min_size=1, max_size=4))
    glue = draw(st.lists(st.sampled_from(CLAUSE_JOINERS), min_size=3, max_size=3))
    text, negated = "", set()
    for position, (part, names) in enumerate(clauses):
        if position:
            text += glue[position - 1]
        text += part
        negated |= names
    case = draw(st.sampled_from(["as is", "upper", "lower", "capitalised"]))
    text = {"upper": text.upper(), "lower": text.lower(), "capitalised": text.capitalize()}.get(
        case, text
    )
    return text, negated


@settings(max_examples=200, deadline=None)
@given(query())
def test_no_negated_finding_is_ever_required(generated: tuple[str, set[str]]) -> None:
    text, negated = generated
    parsed = parse_query(text)
    assert not set(parsed.positive) & set(parsed.negative), (text, parsed)
    assert not negated & set(parsed.positive), (text, parsed)


@settings(max_examples=100, deadline=None)
@given(query(), query())
def test_repeating_or_combining_queries_never_puts_a_finding_in_both_lists(
    first: tuple[str, set[str]], second: tuple[str, set[str]]
) -> None:
    for text in (f"{first[0]} {first[0]}", f"{first[0]}. {second[0]}"):
        parsed = parse_query(text)
        assert not set(parsed.positive) & set(parsed.negative), (text, parsed)
    combined = parse_query(f"{first[0]}. {second[0]}")
    assert not (first[1] | second[1]) & set(combined.positive), combined

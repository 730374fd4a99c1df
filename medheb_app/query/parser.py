"""Typed compositional queries: free text -> required, excluded and hedged findings.

CXR-Retrieve (section 3.2) treats a query as constraints over labelled findings: "A and no B"
requires A positive and B not positive. This module turns what a clinician types into those
constraints, with the synonyms and abbreviations radiologists use, and evaluates a study's
labels against them (`satisfies`, section 3.2 main and strict settings).

Decisions, so that behaviour is predictable:
- Negation cues open a scope: prefix cues ("no", "without", "but not", "no evidence of",
  "free of", "negative for", "absence of", "neither", "excluding", ...) negate the findings that
  follow, across list separators ("," "or" "nor" "/"), so "no effusion or pneumothorax" negates
  both. "and", "but", "with", "plus" and sentence punctuation close the scope: "no effusion and
  pneumothorax" excludes effusion and requires pneumothorax (write "no effusion and no
  pneumothorax" to exclude both). Postfix cues ("absent", "ruled out", "excluded", "not seen",
  "negative") negate the finding just before them and the ones joined to it by "or" ("A,
  B absent" keeps A required).
- "rule out X", "r/o X", "evaluate for X", "query X" and "?X" are clinical QUESTIONS, not
  negations: X goes to `uncertain`, is neither required nor excluded, and a warning says so.
  "X ruled out" (past tense) is a negation. "possible / probable / suspected / cannot exclude X"
  also go to `uncertain`. Uncertain findings never constrain `satisfies`.
- Shorthand follows the CheXpert labeler's phrase lists where it has one: CHF, heart failure,
  vascular congestion and fluid overload -> Edema; infection -> Pneumonia; infiltrate and
  airspace opacity -> Lung Opacity; nodule and mass -> Lung Lesion; collapse and volume loss ->
  Atelectasis; but "collapsed lung" (the lay term) -> Pneumothorax; "CM" -> Cardiomegaly unless
  it follows a number (a centimetre); hydropneumothorax -> Pleural Effusion and Pneumothorax.
- "normal", "unremarkable", "no finding(s)" exclude every finding of the vocabulary (or require
  "No Finding" when the vocabulary has it), with a warning that says so.
- A negation is never dropped silently: words inside a negation scope that are not understood
  are reported in `unknown` and in `warnings`. Laterality and severity words ("left", "small",
  "moderate") are read and ignored; the ten findings carry no side or size.
- "present" / "seen" after a finding that follows a comma inside a negation scope ends the
  scope and keeps that finding required: "no edema, nodule present" excludes edema and requires
  the nodule; after the scope's only finding they end the scope ("no effusion seen, edema"
  excludes effusion and requires edema).
- "A or B" between required findings is read as "A and B" (queries are conjunctions), with a
  warning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from medheb_app.evidence.findings import CHEXPERT_14, CXR_RETRIEVE_10
from medheb_app.query.lexicon import (
    CUES,
    FINDING_PHRASES,
    MAX_PHRASE,
    STOP_WORDS,
    UNIT_AFTER_NUMBER,
)

Setting = Literal["main", "strict"]


@dataclass(frozen=True)
class ParsedQuery:
    """A query's constraints over the vocabulary's findings, in order of first mention.

    positive: findings the image must show. negative: findings it must not show.
    uncertain: hedged or questioned findings ("possible X", "rule out X"), never constraints.
    unknown: words that were not understood (stop words excluded). warnings: what the parser
    could not do faithfully (e.g. a negation whose target it did not understand).
    """

    text: str
    positive: tuple[str, ...] = ()
    negative: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    uncertain: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    vocabulary: tuple[str, ...] = field(default=CXR_RETRIEVE_10, repr=False, compare=False)

    @property
    def has_constraints(self) -> bool:
        return bool(self.positive or self.negative)

    def describe(self) -> str:
        """The constraints in plain logic, e.g. 'Pleural Effusion AND NOT Cardiomegaly'."""
        parts = [*self.positive, *(f"NOT {name}" for name in self.negative)]
        return " AND ".join(parts) if parts else "(no constraints)"

    def to_dict(self) -> dict[str, object]:
        return {
            "text": self.text,
            "positive": list(self.positive),
            "negative": list(self.negative),
            "uncertain": list(self.uncertain),
            "unknown": list(self.unknown),
            "warnings": list(self.warnings),
        }


def _tokenise(text: str) -> list[str]:
    lowered = text.lower().replace("’", "'")
    lowered = re.sub(r"\bw/o\b", " without ", lowered)
    lowered = re.sub(r"\br/o\b", " rule out ", lowered)
    lowered = re.sub(r"\bcan't\b|\bcan not\b", "cannot", lowered)
    return re.findall(r"[a-z]+|\d+(?:\.\d+)?|[?,;.:/]", lowered)


def _match(tokens: list[str], start: int) -> tuple[int, str, object] | None:
    """Longest phrase (cue or finding) starting at `start`: (length, kind, payload)."""
    for length in range(min(MAX_PHRASE, len(tokens) - start), 0, -1):
        phrase = " ".join(tokens[start : start + length])
        if phrase in CUES:
            return length, "cue", CUES[phrase]
        if phrase in FINDING_PHRASES:
            if phrase in UNIT_AFTER_NUMBER and start > 0 and tokens[start - 1][0].isdigit():
                return None
            return length, "finding", FINDING_PHRASES[phrase]
    return None


def _in_vocabulary(concept: str, vocabulary: tuple[str, ...]) -> str | None:
    wanted = concept.lower()
    for name in vocabulary:
        if name.replace("_", " ").lower() == wanted:
            return name
    return None


class _State:
    """Mutable parse state; kept out of the public dataclass."""

    def __init__(self, vocabulary: tuple[str, ...]) -> None:
        self.vocabulary = vocabulary
        self.positive: list[str] = []
        self.negative: list[str] = []
        self.uncertain: list[str] = []
        self.unknown: list[str] = []
        self.warnings: list[str] = []
        self.mode: str = "pos"  # "pos" | "neg" | "unc" | "question"
        self.cue_text = ""
        self.scope_findings = 0
        self.scope_unknown: list[str] = []
        self.group: list[str] = []  # positive findings joined by "or" / "," (postfix target)
        self.last_joiner = ""
        self.last_added: list[str] = []  # findings of the latest finding phrase
        self.last_after_comma = False

    def close_scope(self) -> None:
        if self.mode == "neg" and self.scope_unknown:
            words = " ".join(self.scope_unknown)
            if self.scope_findings == 0:
                self.warnings.append(
                    f"The negation '{self.cue_text}' applies to words not understood "
                    f"('{words}'); nothing was excluded for them."
                )
            else:
                self.warnings.append(
                    f"Inside the negation '{self.cue_text}', '{words}' was not understood "
                    "and is not excluded."
                )
        elif self.mode == "neg" and self.scope_findings == 0:
            self.warnings.append(
                f"The negation '{self.cue_text}' is not followed by a known finding; "
                "nothing was excluded."
            )
        self.mode = "pos"
        self.cue_text = ""
        self.scope_findings = 0
        self.scope_unknown = []

    def open_scope(self, mode: str, cue_text: str) -> None:
        self.close_scope()
        self.mode = mode
        self.cue_text = cue_text
        self.group = []

    def add_finding(self, concepts: tuple[str, ...], phrase: str) -> None:
        self.last_after_comma = self.last_joiner == ","
        self.last_added = []
        for concept in concepts:
            name = _in_vocabulary(concept, self.vocabulary)
            if name is None:
                self.unknown.append(phrase)
                self.warnings.append(
                    f"'{phrase}' ({concept}) is not one of the findings this search knows "
                    f"({', '.join(self.vocabulary)}); it was ignored."
                )
                if self.mode == "neg":
                    self.scope_findings += 1
                continue
            self.last_added.append(name)
            if self.mode == "neg":
                self.negative.append(name)
                self.scope_findings += 1
            elif self.mode in ("unc", "question"):
                self.uncertain.append(name)
                if self.mode == "question":
                    self.warnings.append(
                        f"'{self.cue_text} {phrase}' is read as a question: {name} is neither "
                        "required nor excluded."
                    )
            else:
                if self.last_joiner == "or" and self.group:
                    self.warnings.append(
                        f"'{self.group[-1]} or {name}' is read as '{self.group[-1]} and {name}': "
                        "queries are conjunctions."
                    )
                self.positive.append(name)
                self.group.append(name)
        self.last_joiner = ""

    def affirm_last(self) -> None:
        """'present' after "no A, B": B leaves the negation scope and becomes required."""
        if self.mode != "neg" or not self.last_added:
            return
        if not self.last_after_comma or self.scope_findings < 2:
            self.close_scope()  # "no effusion present, edema": the clause ends here
            return
        for name in self.last_added:
            if name in self.negative:
                self.negative.remove(name)
                self.positive.append(name)
        self.scope_findings -= 1
        self.close_scope()
        self.group = list(self.last_added)

    def negate_group(self, cue_text: str, uncertain: bool) -> None:
        """A postfix cue turns the preceding positive group negative (or uncertain)."""
        if not self.group:
            self.warnings.append(f"'{cue_text}' does not follow a known finding; it was ignored.")
            return
        for name in self.group:
            if name in self.positive:
                self.positive.remove(name)
            (self.uncertain if uncertain else self.negative).append(name)
        self.group = []

    def normal(self, phrase: str) -> None:
        if "No Finding" in self.vocabulary:
            self.add_finding(("No Finding",), phrase)
            return
        self.negative.extend(self.vocabulary)
        self.warnings.append(
            f"'{phrase}' is read as 'none of the findings' ({', '.join(self.vocabulary)})."
        )


def parse_query(text: str, vocabulary: tuple[str, ...] = CXR_RETRIEVE_10) -> ParsedQuery:
    """Parse a free-text clinical query into required, excluded and hedged findings."""
    state = _State(tuple(vocabulary))
    tokens = _tokenise(text)
    i = 0
    while i < len(tokens):
        matched = _match(tokens, i)
        if matched is None:
            word = tokens[i]
            i += 1
            if word in STOP_WORDS or word[0].isdigit():
                continue
            state.unknown.append(word)
            if state.mode == "neg":
                state.scope_unknown.append(word)
            continue
        length, kind, payload = matched
        phrase = " ".join(tokens[i : i + length])
        i += length
        if kind == "finding":
            state.add_finding(payload, phrase)  # type: ignore[arg-type]
            continue
        if payload in ("neg", "unc", "question"):
            state.open_scope(str(payload), phrase)
        elif payload in ("negpost", "uncpost"):
            state.negate_group(phrase, uncertain=payload == "uncpost")
        elif payload in ("boundary", "and"):
            state.close_scope()
            state.group = []
        elif payload == "or":
            state.last_joiner = "or"
        elif payload == "comma":
            state.last_joiner = ","
            if state.mode == "pos":
                state.group = []
        elif payload == "pospost":
            state.affirm_last()
        elif payload == "normal":
            state.close_scope()
            state.normal(phrase)
    state.close_scope()
    positive = _unique(state.positive)
    negative = _unique(state.negative)
    both = [name for name in positive if name in negative]
    if both:
        state.warnings.append(
            f"{', '.join(both)} is both required and excluded; no image can satisfy this query."
        )
    return ParsedQuery(
        text=text,
        positive=positive,
        negative=negative,
        unknown=_unique(state.unknown),
        uncertain=_unique(n for n in state.uncertain if n not in positive and n not in negative),
        warnings=_unique(state.warnings),
        vocabulary=state.vocabulary,
    )


def _unique(values: object) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))  # type: ignore[arg-type]


def satisfies(
    findings: Mapping[str, object], parsed: ParsedQuery, setting: Setting = "main"
) -> bool | None:
    """Whether labels satisfy every constraint (CXR-Retrieve section 3.2); None if none.

    Positives need label 1. "no B" holds when B is not 1 (main: uncertain -1 and unmentioned
    count as absent) or only when B is a confirmed 0 (strict). A missing key is unmentioned.
    """
    if setting not in ("main", "strict"):
        raise ValueError(f"Unknown setting {setting!r}; use 'main' or 'strict'.")
    if not parsed.has_constraints:
        return None
    if any(_label(findings, name) != 1 for name in parsed.positive):
        return False
    if setting == "strict":
        return all(_label(findings, name) == 0 for name in parsed.negative)
    return all(_label(findings, name) != 1 for name in parsed.negative)


def is_hard_negative(findings: Mapping[str, object], parsed: ParsedQuery) -> bool:
    """A hit that meets every positive but shows an excluded finding (HNRR, section 3.3)."""
    if not parsed.negative:
        return False
    if any(_label(findings, name) != 1 for name in parsed.positive):
        return False
    return any(_label(findings, name) == 1 for name in parsed.negative)


def violations(findings: Mapping[str, object], parsed: ParsedQuery) -> dict[str, str]:
    """Per broken constraint, why: 'missing' (required, not 1) or 'present' (excluded, is 1).

    Main-setting semantics; the UI marks these on each hit.
    """
    broken = {name: "missing" for name in parsed.positive if _label(findings, name) != 1}
    broken.update({name: "present" for name in parsed.negative if _label(findings, name) == 1})
    return broken


def _label(findings: Mapping[str, object], name: str) -> object:
    value = findings.get(name)
    if value is None:
        return None
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return value


__all__ = [
    "CHEXPERT_14",
    "CXR_RETRIEVE_10",
    "ParsedQuery",
    "is_hard_negative",
    "parse_query",
    "satisfies",
    "violations",
]

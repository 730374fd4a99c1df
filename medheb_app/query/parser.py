"""Typed compositional queries: free text -> required, excluded and hedged findings.

CXR-Retrieve (section 3.2) treats a query as constraints over labelled findings: "A and no B"
requires A positive and B not positive. This module turns what a clinician types (a query or
a report sentence) into those constraints over the vocabulary the caller passes in (the
CXR-Retrieve ten, CheXpert 14, NIH ChestX-ray14 or an index's own label columns), and
evaluates a study's labels against them (`satisfies`, section 3.2 main and strict settings).

The one rule above all others: the parser never asserts what the user may have excluded. When
a reading is uncertain, the finding goes to `uncertain` (neither required nor excluded) with a
warning; `positive` and `negative` never share a finding.

Decisions, so that behaviour is predictable:
- Length: a query longer than MAX_QUERY_CHARS (1,000) characters raises QueryTooLong (a
  ValueError) whose message gives the length and the limit and never echoes the text.
- Vocabulary: phrases name concepts (lexicon.py) and each concept maps to the first name the
  vocabulary has (lexicon.CONCEPT_TARGETS): "effusion" is "Pleural Effusion" over CheXpert and
  CXR-Retrieve but "Effusion" over NIH; "mass" / "nodule" are "Mass" / "Nodule" over NIH but
  "Lung Lesion" over CheXpert; "infiltrate" is NIH "Infiltration" or CheXpert "Lung Opacity".
  Every vocabulary name is also matched by its own spelling (case, "_" and spaces ignored,
  plural tolerant), so a custom label column ("Tuberculosis", "pleural_plaque") is reachable.
  "lesion" over NIH means Mass or Nodule: "no lesion" excludes both, "lesion" alone cannot be
  required (a query is a conjunction) and is reported. A finding the vocabulary lacks is
  reported in `unknown` with a warning, never silently dropped.
- Negation cues open a scope over the findings that follow, across list separators (","
  "or" "nor" "/"): "no effusion, pneumothorax or edema" excludes all three. Over "and":
  prepositional cues ("without", "negative for", "no evidence of", "free of", "absence of",
  ...) and lists ("no A, B and C") carry the negation through: "negative for effusion and
  pneumothorax" excludes both. After a bare "no" / "not", "no A and B" is ambiguous (neither,
  or B present?): B goes to `uncertain` with a warning that says how to write either reading
  ("no A and no B" / "B and no A"); it is never required. "but", "with", "plus", "yet" and
  sentence punctuation (". ; :") close the scope: "no pneumothorax but effusion", "no
  effusion; edema present" and "effusion and no pneumothorax" keep the effusion / edema
  required. Before a scope's first finding "and" joins modifiers and the scope goes on ("no
  right and left effusion", "questionable right middle lobe and lingular consolidation").
- Postfix cues ("absent", "ruled out", "excluded", "not seen", "negative", "resolved") negate
  the finding just before them and those joined to it by "or"; findings joined to it by "and"
  or "," in the same clause ("effusion and pneumothorax absent") might be meant too, so they go
  to `uncertain` with a warning. Not after a finding ("absent of edema", "resolved
  effusion", "negative effusion") they act as prefix cues.
- A word the parser does not know, next to a finding (only stop words between, no
  punctuation or joiner), may be a negation it cannot read ("sans effusion", "negligible
  effusion", "effusion nil"): the word is reported in `unknown` and the finding goes to
  `uncertain` with a warning, never asserted. Before a finding, such a word opens a scope like
  a negation would, so the whole list after it is left open ("zorbless effusion, pneumothorax
  and edema"); after a finding, it leaves open the findings of its clause ("effusion and
  pneumothorax zorbless"). Known cues cover "sans", "w/o", "devoid of", "absent of",
  "non-existent", "lack of". A structure predicate with no structure beside it ("clear
  effusion") counts as such a word. A postfix negation after a finding in a question, hedge or
  ambiguous scope still negates that finding ("rule out A, B absent": B excluded, A open).
- Radiology sentences that declare a structure normal exclude that structure's findings:
  "heart size is normal", "normal heart size", "cardiac silhouette within normal limits",
  "heart is not enlarged" -> Cardiomegaly; "cardiomediastinal silhouette is normal" -> also
  Enlarged Cardiomediastinum; "mediastinum unremarkable" -> Enlarged Cardiomediastinum only;
  "lungs are clear" -> the airspace findings (Lung Opacity / Infiltration, Consolidation,
  Pneumonia, Edema, Atelectasis; not lesions); "costophrenic angles are sharp" -> Pleural
  Effusion; "pleural spaces are clear" -> the pleural findings; "bones are intact" ->
  Fracture. "heart size is enlarged" / "mediastinum is widened" / "blunting of the
  costophrenic angle" require Cardiomegaly / Enlarged Cardiomediastinum / Pleural Effusion.
  A predicate before its structure sits in the current scope: "no enlargement of the heart
  or effusion" excludes both, "possible enlargement of the cardiac silhouette" hedges; a
  normality predicate is its own statement unless a cue is right before it ("no effusion,
  clear lungs" is normality; "heart size is not normal", "possibly normal heart size" leave
  Cardiomegaly open). "no acute cardiopulmonary process" (also "abnormality",
  "disease") excludes the acute chest findings (the airspace ones, Pleural Effusion,
  Pneumothorax) but not Cardiomegaly, lesions or fractures ("Stable cardiomegaly. No acute
  cardiopulmonary process." keeps Cardiomegaly required); "no osseous abnormality" excludes
  Fracture. Such a statement excludes only what it names and never overrides a finding the
  same text reports (or hedges) elsewhere: "Minimal opacity at the left base. The lungs are
  otherwise clear." keeps Lung Opacity required and excludes the other airspace findings;
  "Mild edema. No acute cardiopulmonary process." keeps Edema. Only when the statement is
  about nothing but that finding and no "otherwise" limits it ("Cardiomegaly. Heart size is
  normal.") does the text contradict itself: the finding goes to `uncertain`.
- "normal" / "unremarkable" / "no finding(s)" about no structure exclude every finding of the
  vocabulary (or require "No Finding" when the vocabulary has it and nothing is required), with
  a warning; findings required explicitly are kept ("effusion, otherwise normal").
- "rule out X", "r/o X", "evaluate for X", "query X" and "?X" are clinical QUESTIONS, not
  negations: X goes to `uncertain`, with a warning. "X ruled out" (past tense) is a negation.
  "possible / probable / likely / suspected / cannot exclude X" and "X cannot be excluded"
  also go to `uncertain`. Alone they never constrain `satisfies` (None); beside required or
  excluded findings they follow the setting (below).
- A finding stated both ways ("effusion and no effusion", or two readings of a repeated
  text) is never in both lists: it goes to `uncertain` with a warning that the query
  contradicts itself.
- Misspellings: a word not understood is compared (difflib ratio) with every word of the
  lexicon's finding phrases and the vocabulary's names. When one finding is clearly best
  (ratio >= 0.85, word of 4+ letters, no other finding within 0.1) the word is read as that
  one, recorded in `corrections` ({typed: read as}) with a warning "read 'efusion' as
  'effusion'"; otherwise close candidates (ratio >= 0.75, findings and cue words) are only
  offered in `suggestions` ({typed: (candidates...)}) and the word stays not understood.
- Shorthand follows the CheXpert labeler's phrase lists where it has one: CHF, heart failure,
  vascular congestion and fluid overload -> Edema; infection -> Pneumonia; airspace opacity ->
  Lung Opacity; collapse and volume loss -> Atelectasis; but "collapsed lung" (the lay term)
  -> Pneumothorax; "CM" -> Cardiomegaly unless it follows a number (a centimetre);
  hydropneumothorax -> Pleural Effusion and Pneumothorax; ETT, NG tube, PICC, pacemaker,
  "lines and tubes" -> Support Devices; COPD -> Emphysema; hiatal hernia -> Hernia.
- Laterality, severity and course words ("left", "small", "moderate", "loculated",
  "unchanged") are read and ignored; the findings carry no side or size.
- Sentences: ". ; :" and line breaks end a clause. "Effusion: none" / "Pneumothorax: absent"
  (structured reports) negate the finding before the colon. "not enlarged" after a structure
  is normality ("heart is not enlarged"); elsewhere it is "not" + a finding ("not enlarged
  heart, effusion" excludes both). "not normal" about a structure leaves its findings open.
- "present" / "seen" / "noted" after a finding that follows a comma inside a negation scope
  ends the scope and keeps that finding required: "no edema, nodule present" excludes edema
  and requires the nodule; after the scope's only finding they end the scope ("no effusion
  seen, edema" excludes effusion and requires edema).
- "A or B" between required findings is read as "A and B" (queries are conjunctions), with a
  warning.
- The ConText lexicon (lexicon.CONTEXT_RULES: trigger, category, direction, source) is data;
  the grammar above reads each category: pseudo-triggers ("no change in", "no increase in",
  "not only", "gram negative") negate nothing and the finding after them is required;
  termination terms ("but", "however", "otherwise", "which", "aside from") end a scope;
  "versus" hedges both sides ("effusion versus atelectasis"); "not" with nothing after it
  negates the finding before it ("effusion is present, pneumothorax is not"); "is no longer
  seen" is a post-negation; history cues ("h/o", "history of", "s/p") put the finding in
  `history` (not current, not a constraint) unless the text names it as current elsewhere.
- Shorthand: "w/" is "with", "w/o" "without", "(+)" / "(-)" after a finding "positive" /
  "negative", "positive for" ends a negation scope ("negative for A and positive for B"); a
  minus sign stuck to a word excludes it, as in a search box ("effusion -cardiomegaly"), while
  one inside a word ("left-sided") or set apart by spaces does not.
- Words are letters of any script, accents folded ("effusión" is "effusion"): a word in
  another language or script is one word, reported as not understood, never split or dropped.
- A finding named as absent in one place and as possible, or next to a word not understood,
  in another ("Streaky opacities XXXX reflect atelectasis. No focal infiltrate.") is left
  open with a warning. A bare "normal" after a word not understood in its sentence
  ("Pulmonary XXXX normal.") is about that word and excludes nothing.
- Uncertain findings follow CheXpert's -1 convention of the setting in `satisfies`
  (`uncertain_holds`): main, present or unknown; strict, confirmed only.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from medheb_app.evidence.findings import CHEXPERT_14, CXR_RETRIEVE_10
from medheb_app.query.lexicon import (
    ANY_OF,
    CONCEPT_TARGETS,
    CUES,
    EITHER_WAY,
    FINDING_PHRASES,
    GROUPS,
    MAX_PHRASE,
    STOP_WORDS,
    STRUCTURE_ENLARGED,
    STRUCTURES,
    UNIT_AFTER_NUMBER,
)

Setting = Literal["main", "strict"]
MAX_QUERY_CHARS = 1000
NO_FINDING = "No Finding"
CORRECT_AT = 0.85  # difflib ratio from which a misspelling is corrected (if unambiguous)
SUGGEST_AT = 0.75  # ratio from which a candidate is offered as "did you mean"
CLEAR_MARGIN = 0.1  # how far ahead of any other finding the best candidate must be
MAX_SPELL_CHECKS = 25  # distinct unknown words spell-checked per query


class QueryTooLong(ValueError):
    """A query over MAX_QUERY_CHARS characters; the message never echoes the text."""

    def __init__(self, length: int, limit: int = MAX_QUERY_CHARS) -> None:
        self.length = length
        self.limit = limit
        super().__init__(
            f"The query is {length:,} characters long; the limit is {limit:,}. Shorten it to "
            "the findings you want, e.g. 'pleural effusion and no cardiomegaly'."
        )


def check_query_length(text: str, limit: int = MAX_QUERY_CHARS) -> None:
    """Raise QueryTooLong when `text` is over `limit` characters (before any heavy work)."""
    if len(text) > limit:
        raise QueryTooLong(len(text), limit)


@dataclass(frozen=True)
class ParsedQuery:
    """A query's constraints over the vocabulary's findings, in order of first mention.

    positive: findings the image must show. negative: findings it must not show (never
    overlapping positive). uncertain: findings the query names but does not constrain
    (hedged, questioned, next to a word not understood, ambiguous or contradictory).
    unknown: words that were not understood (stop words excluded). warnings: what the parser
    could not do faithfully. corrections: (typed, read as) misspellings it corrected.
    suggestions: (typed, candidates) for words it did not correct. history: findings named
    only as history ("h/o pneumonia", "s/p"), not current, so not constraints.
    unlabelled: findings the query names that the vocabulary has no labels for (their
    lexicon names, e.g. "Emphysema" against the CXR-Retrieve ten); the search service refuses
    a logic-aware query that names one (search.refuse_unanswerable) rather than answer without
    it. The four lists are disjoint.
    """

    text: str
    positive: tuple[str, ...] = ()
    negative: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()
    uncertain: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    vocabulary: tuple[str, ...] = field(default=CXR_RETRIEVE_10, repr=False, compare=False)
    corrections: tuple[tuple[str, str], ...] = ()
    suggestions: tuple[tuple[str, tuple[str, ...]], ...] = ()
    history: tuple[str, ...] = ()
    unlabelled: tuple[str, ...] = ()

    @property
    def has_constraints(self) -> bool:
        return bool(self.positive or self.negative)

    def describe(self) -> str:
        """The constraints in plain logic, e.g. 'Pleural Effusion AND NOT Cardiomegaly'.

        Corrections and suggestions follow in brackets when there are any, e.g.
        "Pleural Effusion (read 'efusion' as 'effusion')".
        """
        parts = [*self.positive, *(f"NOT {name}" for name in self.negative)]
        logic = " AND ".join(parts) if parts else "(no constraints)"
        if self.uncertain:
            logic += f"; Uncertain: {', '.join(self.uncertain)}"
        if self.history:
            logic += f"; History: {', '.join(self.history)}"
        notes = [f"read '{typed}' as '{read}'" for typed, read in self.corrections]
        notes += [
            f"did you mean {_or_list(candidates)} for '{typed}'?"
            for typed, candidates in self.suggestions
        ]
        return f"{logic} ({'; '.join(notes)})" if notes else logic

    def constraints(self) -> dict[str, list[str]]:
        """The constraint lists as every interface carries them (DESIGN.md: CLI, API, UI)."""
        return {
            "positive": list(self.positive),
            "negative": list(self.negative),
            "uncertain": list(self.uncertain),
            "history": list(self.history),
        }

    def to_dict(self) -> dict[str, object]:
        return {
            "text": self.text,
            **self.constraints(),
            "unknown": list(self.unknown),
            "warnings": list(self.warnings),
            "corrections": dict(self.corrections),
            "suggestions": {typed: list(found) for typed, found in self.suggestions},
        }


def _or_list(words: Iterable[str]) -> str:
    quoted = [f"'{word}'" for word in words]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


# ----------------------------------------------------------------------------- vocabulary


def _key(name: str) -> str:
    """A name as the tokeniser sees it: 'Pleural_Thickening' -> 'pleural thickening'."""
    return " ".join(_tokenise(name))


@dataclass(frozen=True)
class _Target:
    """What one concept of a phrase means in this vocabulary."""

    concept: str
    names: tuple[str, ...]  # empty: not in the vocabulary
    any_of: bool = False  # names together cover the concept (Mass or Nodule for "lesion")


def _resolve(concept: str, vocabulary: tuple[str, ...]) -> _Target:
    by_key = {_key(name): name for name in vocabulary}
    for candidate in CONCEPT_TARGETS.get(concept, (concept,)):
        if _key(candidate) in by_key:
            return _Target(concept, (by_key[_key(candidate)],))
    parts = [by_key[_key(part)] for part in ANY_OF.get(concept, ()) if _key(part) in by_key]
    if parts:
        return _Target(concept, tuple(parts), any_of=True)
    return _Target(concept, ())


def _names(concepts: Iterable[str], vocabulary: tuple[str, ...]) -> list[str]:
    """Every vocabulary name the concepts cover (for exclusions: "any of" expands fully)."""
    return list(dict.fromkeys(n for c in concepts for n in _resolve(c, vocabulary).names))


@dataclass(frozen=True)
class _Table:
    """The phrase tables for one vocabulary (own names take precedence over the lexicon)."""

    findings: dict[str, tuple[_Target, ...]]
    words: dict[str, str]  # spelling candidate word -> the key that competes (a concept set)
    known_words: frozenset[str]
    max_phrase: int
    candidates: tuple[str, ...] = ()  # the keys of `words`, for difflib

    def __hash__(self) -> int:  # one table per vocabulary (lru_cache); identity is enough
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


@lru_cache(maxsize=32)
def _table(vocabulary: tuple[str, ...]) -> _Table:
    findings = {
        phrase: tuple(_resolve(concept, vocabulary) for concept in concepts)
        for phrase, concepts in FINDING_PHRASES.items()
    }
    for name in vocabulary:
        if name == NO_FINDING:  # "no finding" is the normal cue, not a finding to negate
            continue
        key = _key(name)
        if not key:
            continue
        own = (_Target(name, (name,)),)
        singular = key[:-1] if key.endswith("s") and not key.endswith("ss") else key
        sibilant = singular.endswith(("s", "x", "z", "ch", "sh"))  # English adds -es after one
        for phrase in {key, singular, f"{singular}es" if sibilant else f"{singular}s"}:
            findings[phrase] = own
    words: dict[str, str] = {}  # a one-word phrase competes as its concepts, others as words
    for phrase, targets in sorted(findings.items(), key=lambda kv: " " in kv[0]):
        key = "|".join(sorted(t.concept for t in targets))
        for word in phrase.split():
            if len(word) >= 4 and word not in STOP_WORDS:
                words.setdefault(word, key if " " not in phrase else f"word:{word}")
    phrases = [*findings, *CUES, *STRUCTURES, *GROUPS]
    known = {word for phrase in phrases for word in phrase.split()} | STOP_WORDS
    longest = max([MAX_PHRASE, *(len(p.split()) for p in findings)])
    return _Table(findings, words, frozenset(known), longest, tuple(words))


# ----------------------------------------------------------------------------- tokens


def _fold_accents(text: str) -> str:
    """'effusión' -> 'effusion', 'œdème' -> 'oedeme': Latin letters without their marks, so
    an accented spelling meets the lexicon; other scripts are left as they are."""
    decomposed = unicodedata.normalize("NFKD", text.replace("œ", "oe").replace("æ", "ae"))
    return "".join(char for char in decomposed if not unicodedata.combining(char))


def _tokenise(text: str) -> list[str]:
    """Words (letters of any script, so 'cardiomégalie' or '胸水' is one word, reported as
    unknown if not understood, never split or dropped), numbers and the punctuation the
    grammar reads."""
    lowered = _fold_accents(text.lower().replace("’", "'"))
    lowered = re.sub(r"[\r\n]+", " . ", lowered)  # a line break ends a report sentence
    lowered = re.sub(r"\bw/o\b", " without ", lowered)
    lowered = re.sub(r"\bw/", " with ", lowered)
    lowered = re.sub(r"\br/o\b", " rule out ", lowered)
    lowered = re.sub(r"\bh/o\b", " history of ", lowered)
    lowered = re.sub(r"\bs/p\b", " status post ", lowered)
    lowered = re.sub(r"\(\s*-\s*\)", " negative ", lowered)  # "PTX (-)"
    lowered = re.sub(r"\(\s*\+\s*\)", " positive ", lowered)  # "effusion (+)"
    lowered = re.sub(r"(?:^|(?<=[\s,;(]))-(?=[^\W\d_])", " no ", lowered)  # "-cardiomegaly"
    lowered = re.sub(r"\bcan't\b|\bcan not\b", "cannot", lowered)
    return re.findall(r"[^\W\d_]+|\d+(?:\.\d+)?|[?,;.:/]", lowered)


@dataclass(frozen=True)
class _Item:
    """One unit of the query: a finding, cue, structure, group phrase or unknown word."""

    kind: Literal["finding", "cue", "structure", "group", "word"]
    phrase: str
    payload: object = None


def _match(tokens: list[str], start: int, table: _Table) -> _Item | None:
    """Longest phrase (finding, cue, structure or group) starting at `start`."""
    for length in range(min(table.max_phrase, len(tokens) - start), 0, -1):
        phrase = " ".join(tokens[start : start + length])
        if phrase in table.findings:
            if phrase in UNIT_AFTER_NUMBER and start > 0 and tokens[start - 1][0].isdigit():
                return None
            return _Item("finding", phrase, table.findings[phrase])
        if phrase in CUES:
            return _Item("cue", phrase, CUES[phrase])
        if phrase in STRUCTURES:
            return _Item("structure", phrase, STRUCTURES[phrase])
        if phrase in GROUPS:
            return _Item("group", phrase, GROUPS[phrase])
    return None


def _items(tokens: list[str], table: _Table) -> list[_Item]:
    items: list[_Item] = []
    i = 0
    while i < len(tokens):
        item = _match(tokens, i, table)
        if item is None:
            word = tokens[i]
            i += 1
            if word not in STOP_WORDS and not word[0].isdigit():
                items.append(_Item("word", word))
            continue
        if (
            item.payload == "clear"
            and item.phrase.startswith("not ")
            and not _after_structure(items)
        ):
            item = _Item("cue", "not", CUES["not"])  # "not enlarged heart, effusion"
        items.append(item)
        i += len(item.phrase.split())
    return items


def _after_structure(items: list[_Item]) -> bool:
    return bool(items) and items[-1].kind == "structure"


def _spell(
    tokens: list[str], table: _Table
) -> tuple[list[str], dict[str, str], dict[str, tuple[str, ...]]]:
    """Correct unambiguous misspellings of finding words; suggest the rest.

    At most MAX_SPELL_CHECKS distinct words are checked, which bounds the cost of a query
    made of 1,000 characters of unknown words.
    """
    corrected = list(tokens)
    corrections: dict[str, str] = {}
    suggestions: dict[str, tuple[str, ...]] = {}
    checked: set[str] = set()
    for position, word in enumerate(tokens):
        if len(word) < 4 or not word.isalpha() or word in table.known_words:
            continue
        if word not in checked and len(checked) >= MAX_SPELL_CHECKS:
            continue
        checked.add(word)
        correction, found = _spelling(word, table)
        if correction:
            corrected[position] = correction
            corrections[word] = correction
        elif found:
            suggestions[word] = found
    return corrected, corrections, suggestions


@lru_cache(maxsize=4096)
def _spelling(word: str, table: _Table) -> tuple[str, tuple[str, ...]]:
    """(the correction or '', the candidates to suggest) for one word not understood."""
    scored = sorted(
        ((difflib.SequenceMatcher(None, word, c).ratio(), c) for c in _close(word, table)),
        reverse=True,
    )
    if scored:
        best_ratio, best = scored[0]
        rivals = [r for r, c in scored[1:] if table.words[c] != table.words[best]]
        if best_ratio >= CORRECT_AT and all(r < best_ratio - CLEAR_MARGIN for r in rivals):
            return best, ()
    found: list[str] = []  # the best word of each finding, then cue words ("withuot")
    for _, candidate in scored:
        if table.words[candidate] not in {table.words[f] for f in found}:
            found.append(candidate)
    found = found[:3]
    found += difflib.get_close_matches(word, _CUE_WORDS, n=2, cutoff=SUGGEST_AT)
    return "", tuple(dict.fromkeys(found))


_CUE_WORDS = sorted({w for phrase in CUES for w in phrase.split() if len(w) >= 4})


def _close(word: str, table: _Table) -> list[str]:
    """Finding words like `word`, and those it begins ("pneumo": pneumonia, pneumothorax)."""
    close = difflib.get_close_matches(word, table.candidates, n=6, cutoff=SUGGEST_AT)
    longer = [w for w in table.candidates if len(word) >= 5 and w.startswith(word) and w != word]
    return list(dict.fromkeys([*close, *sorted(longer, key=len)[:6]]))


# ----------------------------------------------------------------------------- grammar

_NEG_MODES = ("neg", "weakneg")


class _State:
    """Mutable parse state; kept out of the public dataclass.

    events records, in order, what each mention of a finding said about it: "pos", "neg",
    "unc" (hedged or questioned), "block" (next to a word not understood, or an ambiguous
    coordination: must never end up required). implied holds exclusions from normality
    statements, which lose to nothing but make an explicit requirement uncertain.
    """

    def __init__(self, vocabulary: tuple[str, ...]) -> None:
        self.vocabulary = vocabulary
        self.events: list[tuple[str, str]] = []
        self.implied: list[tuple[str, str]] = []  # (name, the statement that excluded it)
        self.normal_all: list[str] = []
        self.unknown: list[str] = []
        self.unlabelled: list[str] = []  # findings named that the vocabulary does not label
        self.warnings: list[str] = []
        # "pos" | "neg" | "weakneg" | "amb" (after "no A and") | "unk" (after a word not
        # understood) | "unc" | "question"
        self.mode: str = "pos"
        self.cue_text = ""
        self.scope_findings = 0
        self.scope_unknown: list[str] = []
        self.scope_list = False  # the scope already joined two findings with "," / "or"
        self.scope_names: list[str] = []  # findings named inside the current scope
        self.group: list[str] = []  # positive findings joined by "or" (postfix target)
        self.clause: list[str] = []  # other positive findings of this clause
        self.structures: list[_Item] = []
        self.last_joiner = ""
        self.last_added: list[str] = []
        self.last_after_comma = False
        self.clause_unknown: list[str] = []  # words not understood since the last boundary
        self.otherwise = False  # "otherwise" since the last sentence boundary
        # statement -> (every name it excludes, whether "otherwise" limits it)
        self.statements: dict[str, tuple[frozenset[str], bool]] = {}

    # -- scopes
    def close_scope(self) -> None:
        if self.mode in _NEG_MODES and self.scope_unknown:
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
        elif self.mode in _NEG_MODES and self.scope_findings == 0:
            self.warnings.append(
                f"The negation '{self.cue_text}' is not followed by a known finding; "
                "nothing was excluded."
            )
        self.mode = "pos"
        self.cue_text = ""
        self.scope_findings = 0
        self.scope_unknown = []
        self.scope_list = False
        self.scope_names = []

    def open_scope(self, mode: str, cue_text: str) -> None:
        self.close_scope()
        self.mode = mode
        self.cue_text = cue_text
        self.group = []
        self.clause = []
        self.last_joiner = ""

    def boundary(self, keep_structures: bool = False) -> None:
        self.close_scope()
        self.group = []
        self.clause = []
        if not keep_structures:
            self.structures = []
            self.clause_unknown = []
        self.last_joiner = ""

    def imply(self, names: list[str], statement: str) -> None:
        """A normality statement excludes `names` (resolved in _finish against the rest)."""
        self.implied.extend((name, statement) for name in names)
        before, otherwise = self.statements.get(statement, (frozenset(), False))
        self.statements[statement] = (before | set(names), otherwise or self.otherwise)

    # -- findings
    def add_finding(self, item: _Item) -> None:
        targets: tuple[_Target, ...] = item.payload  # type: ignore[assignment]
        phrase = item.phrase
        self.last_after_comma = self.last_joiner == ","
        self.last_added = []
        if self.mode in _NEG_MODES and self.last_joiner in (",", "or", "list"):
            self.scope_list = True
        if self.mode == "pos" and self.last_joiner not in ("or", "list"):
            self.clause.extend(self.group)
            self.group = []
        self.structures = []
        for target in targets:
            if not target.names:
                self.unknown.append(phrase)
                self.unlabelled.append(target.concept)
                known = ", ".join(self.vocabulary)
                meant = " / ".join(CONCEPT_TARGETS.get(target.concept, (target.concept,)))
                self.warnings.append(
                    f"'{phrase}' ({meant}) is not one of the findings this search knows "
                    f"({known}); it was ignored."
                )
                if self.mode in _NEG_MODES:
                    self.scope_findings += 1
                continue
            if self.mode == "unk":
                self.block(target.names)
                self.warnings.append(
                    f"'{self.cue_text}' before '{phrase}' was not understood (it may be a "
                    f"negation), so {' and '.join(target.names)} is neither required nor "
                    "excluded."
                )
                continue
            if target.any_of and self.mode not in _NEG_MODES:
                self.block(target.names)
                self.warnings.append(
                    f"'{phrase}' means {' or '.join(target.names)} here; a query can only "
                    "require findings together, so name the one you want."
                )
                continue
            for name in target.names:
                self._add_name(name, phrase)
        self.last_joiner = ""

    def _add_name(self, name: str, phrase: str) -> None:
        self.last_added.append(name)
        self.scope_names.append(name)
        if self.mode in _NEG_MODES:
            self.events.append((name, "neg"))
            self.scope_findings += 1
        elif self.mode == "amb":
            self.block((name,))
            self.warnings.append(
                f"'{self.cue_text} ... and {phrase}' is ambiguous: {name} is neither required "
                f"nor excluded. Write 'no ... and no {phrase}' to exclude it, or "
                f"'{phrase} and no ...' to require it."
            )
        elif self.mode == "history":
            self.events.append((name, "hist"))
        elif self.mode in ("unc", "question"):
            self.events.append((name, "unc"))
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
            self.events.append((name, "pos"))
            self.group.append(name)

    def block(self, names: Iterable[str]) -> None:
        self.events.extend((name, "block") for name in names)

    # -- joiners
    def conjoin(self) -> None:
        """'and': inside a negation, carry it over a list or after a prepositional cue.

        Before the scope's first finding, "and" joins modifiers ("no right and left effusion",
        "questionable right middle lobe and lingular consolidation"): the scope goes on.
        """
        if self.mode != "pos" and self.scope_findings == 0 and not self.scope_names:
            self.last_joiner = ""
            return
        if self.last_joiner in ("or", "list") or (self.mode != "pos" and self.last_joiner == ","):
            return  # "possible effusion or right and left pneumothorax": modifiers joined
        if self.mode == "neg" or (self.mode == "weakneg" and self.scope_list):
            self.last_joiner = "and"
            return
        if self.mode == "weakneg" and self.scope_findings > 0:
            cue = self.cue_text
            self.close_scope()
            self.mode, self.cue_text = "amb", cue
            self.last_joiner = "and"
            return
        if self.mode in ("amb", "unk", "question", "history"):  # "rule out A and B"
            self.last_joiner = "and"
            return
        hedged = list(self.scope_names) if self.mode in ("unc", "question") else []
        self.close_scope()
        # a later postfix negation may reach back over "and" to hedged findings too
        self.clause.extend([*hedged, *self.group])
        self.group = []
        self.last_joiner = "and"

    def affirm_last(self) -> None:
        """'present' after "no A, B": B leaves the negation scope and becomes required."""
        if self.mode == "pos":
            self.group, self.clause = [], []  # explicitly asserted: no later postfix reaches it
            return
        if self.mode not in _NEG_MODES or not self.last_added:
            self.close_scope()
            return
        if not self.last_after_comma or self.scope_findings < 2:
            self.close_scope()  # "no effusion present, edema": the clause ends here
            return
        for name in self.last_added:
            if (name, "neg") in self.events:
                self.events.remove((name, "neg"))
                self.events.append((name, "pos"))
        self.scope_findings -= 1
        self.close_scope()
        self.group, self.clause = list(self.last_added), []

    def postfix(self, cue_text: str, uncertain: bool) -> None:
        """A postfix cue turns the preceding "or" group negative (or uncertain)."""
        for name in self.group:
            self._retract(name)
            self.events.append((name, "unc" if uncertain else "neg"))
        if not uncertain:
            for name in self.clause:
                self._retract(name)
                self.block((name,))
                self.warnings.append(
                    f"'{cue_text}' may also apply to {name}, named before it in the same "
                    f"sentence; {name} is neither required nor excluded. Write 'no {name}' "
                    "to exclude it, or put it in its own sentence to require it."
                )
            self.clause = []
        self.group = []

    def unknown_after(self, word: str, phrase: str) -> None:
        """'effusion nil': a word not understood after a finding may negate its clause."""
        reached = list(dict.fromkeys([*self.clause, *self.group, *self.last_added]))
        for name in reached:
            self._retract(name)
            self.block((name,))
        if reached:
            self.warnings.append(
                f"'{word}' after '{phrase}' was not understood (it may be a negation), so "
                f"{' and '.join(reached)} is neither required nor excluded."
            )
        self.group, self.clause = [], []

    def _retract(self, name: str, event: str = "pos") -> None:
        """Remove the latest `event` about `name` (a later cue re-reads that mention)."""
        if (name, event) in self.events:
            index = len(self.events) - 1 - self.events[::-1].index((name, event))
            del self.events[index]

    # -- normality
    def structure_normal(self, structure: _Item, predicate: str, stance: str) -> None:
        """'heart size is normal': exclude the structure's findings (stance "plain").

        "not normal" (negated) or "possibly normal" (hedged) leaves them open instead.
        """
        concepts: tuple[str, ...] = structure.payload  # type: ignore[assignment]
        names = _names(concepts, self.vocabulary)
        statement = f"{structure.phrase} {predicate}"
        if stance != "plain":
            self.events.extend((name, "unc") for name in names)
            self.warnings.append(
                f"'{self.cue_text or 'not'} {predicate}' about the {structure.phrase} is read "
                "as neither normal nor abnormal; name the finding you mean."
            )
            return
        if not names:
            self.warnings.append(
                f"'{statement}' is about no finding this search knows; it was not used."
            )
            return
        self.imply(names, statement)

    def structure_enlarged(self, structure: _Item, predicate: str, stance: str) -> None:
        """'heart size is enlarged': require (plain), exclude (negated) or hedge the finding."""
        concepts: tuple[str, ...] = structure.payload  # type: ignore[assignment]
        meant = STRUCTURE_ENLARGED.get(concepts, ())
        names = _names(meant, self.vocabulary)
        if not names:
            self.unknown.append(predicate)
            self.warnings.append(
                f"'{structure.phrase} {predicate}' names no finding this search knows; it was "
                "ignored."
            )
            return
        event = {"plain": "pos", "negated": "neg", "hedged": "unc"}[stance]
        self.events.extend((name, event) for name in names)
        self.group = list(names) if event == "pos" else []

    def structure_uncertain(self) -> None:
        """'heart size is borderline / top normal': the structure's finding is hedged."""
        for structure in self.structures:
            meant = STRUCTURE_ENLARGED.get(structure.payload, ())  # type: ignore[call-overload]
            for name in _names(meant, self.vocabulary):
                self.events.append((name, "unc"))
        self.structures = []

    def group_phrase(self, item: _Item) -> None:
        if self.mode not in _NEG_MODES:
            self.unknown.append(item.phrase)
            self.warnings.append(
                f"'{item.phrase}' names no single finding; it is not a constraint (name the "
                "findings you want)."
            )
            return
        concepts: tuple[str, ...] = item.payload  # type: ignore[assignment]
        self.imply(_names(concepts, self.vocabulary), f"{self.cue_text} {item.phrase}")
        self.scope_findings += 1


def parse_query(
    text: str, vocabulary: tuple[str, ...] = CXR_RETRIEVE_10, limit: int = MAX_QUERY_CHARS
) -> ParsedQuery:
    """Parse a free-text clinical query into required, excluded and hedged findings.

    Raises QueryTooLong (a ValueError) above `limit` characters (MAX_QUERY_CHARS for what a
    user types; the IU X-ray benchmark reads whole reports with a higher one).
    """
    check_query_length(text, limit)
    vocabulary = tuple(vocabulary)
    table = _table(vocabulary)
    tokens, corrections, suggestions = _spell(_tokenise(text), table)
    items = _items(tokens, table)
    state = _State(vocabulary)
    for typed, read in corrections.items():
        state.warnings.append(f"Read '{typed}' as '{read}'.")
    for typed, found in suggestions.items():
        state.warnings.append(f"'{typed}' was not understood; did you mean {_or_list(found)}?")
    skip: set[int] = set()
    for j, item in enumerate(items):
        if j in skip:
            continue
        if item.kind == "word":
            state.unknown.append(item.phrase)
            state.clause_unknown.append(item.phrase)
            if state.mode in _NEG_MODES:
                state.scope_unknown.append(item.phrase)
        elif item.kind == "finding":
            governor = _word_before(items, j)
            if governor and state.mode != "unk":
                state.open_scope("unk", governor)  # "sans"-like word: a scope
            state.add_finding(item)
            if _is_unknown(items, j + 1):
                state.unknown_after(items[j + 1].phrase, item.phrase)
        elif item.kind == "structure":
            state.structures.append(item)
            if j and items[j - 1].kind == "cue" and items[j - 1].payload == "unc":
                state.structure_uncertain()  # "borderline heart size", "possibly enlarged heart"
        elif item.kind == "group":
            state.group_phrase(item)
        else:
            _cue(state, items, j, skip)
    state.close_scope()
    return _finish(text, state, corrections, suggestions)


def _word_before(items: list[_Item], j: int) -> str:
    """A word not understood right before the finding at j, or before modifiers joined by
    "and" ("zorbless right and left effusion"); '' if none."""
    k = j - 1
    while k >= 0 and items[k].kind == "cue" and items[k].payload == "and":
        k -= 1
    return items[k].phrase if _is_unknown(items, k) else ""


def _is_unknown(items: list[_Item], k: int) -> bool:
    """Whether items[k] is a word not understood (only stop words between it and a finding).

    A structure predicate with no structure beside it ("clear effusion") counts as one.
    """
    if not 0 <= k < len(items):
        return False
    item = items[k]
    if item.kind == "word":
        return True
    if item.kind != "cue" or item.payload not in ("clear", "enlarged"):
        return False
    return not any(0 <= n < len(items) and items[n].kind == "structure" for n in (k - 1, k + 1))


def _cue(state: _State, items: list[_Item], j: int, skip: set[int]) -> None:
    item = items[j]
    kind = str(item.payload)
    before = items[j - 1] if j > 0 else None
    after = items[j + 1] if j + 1 < len(items) else None
    after_finding = (
        before is not None
        and (before.kind == "finding" or before.payload == "colon")
        and state.mode == "pos"
    )
    if (
        kind == "weakneg"
        and item.phrase in EITHER_WAY
        and after_finding
        and state.group
        and (after is None or after.payload in ("boundary", "comma", "colon"))
    ):
        state.postfix(item.phrase, uncertain=False)  # "effusion is present, pneumothorax is not"
    elif kind in ("neg", "weakneg", "question", "history"):
        state.open_scope(kind, item.phrase)
    elif kind == "pseudo":
        state.boundary()  # "no change in the effusion": the effusion is there
    elif kind == "uncboth":  # "effusion versus atelectasis": a differential, both hedged
        if after_finding and state.group:
            state.postfix(item.phrase, uncertain=True)
        state.open_scope("unc", item.phrase)
    elif kind == "unc":
        if before is not None and before.kind == "structure" and state.structures:
            state.structure_uncertain()
        elif after_finding and (after is None or after.kind != "finding") and state.group:
            state.postfix(item.phrase, uncertain=True)  # "pneumothorax unlikely"
        else:
            state.open_scope("unc", item.phrase)
    elif kind in ("negpost", "uncpost"):
        if after_finding and (state.group or state.clause):
            state.postfix(item.phrase, uncertain=kind == "uncpost")
        elif before is not None and before.kind == "finding" and state.mode != "pos":
            if state.mode not in _NEG_MODES and kind == "negpost":
                # "no effusion and pneumothorax absent", "rule out A, B absent": the last is
                # negated, the others of the scope may be
                for name in state.last_added:
                    state._retract(name, "unc")
                    state._retract(name, "block")
                state.events.extend((name, "neg") for name in state.last_added)
                state.block([n for n in state.scope_names if n not in state.last_added])
            state.close_scope()  # "no effusion absent": already negated
        elif after_finding:
            pass  # after a finding out of the vocabulary, already reported ("fracture absent")
        else:  # "absent of edema", "resolved effusion": not after a finding -> prefix
            state.open_scope("neg" if kind == "negpost" else "unc", item.phrase)
    elif kind == "boundary":
        sentence_end = item.phrase in (".", ";")
        # "the lungs are otherwise clear": a word termination keeps the structure it follows
        state.boundary(
            keep_structures=item.phrase not in (".", ";")
            and after is not None
            and after.payload in ("normal", "clear", "enlarged")
        )
        state.otherwise = not sentence_end and (item.phrase == "otherwise" or state.otherwise)
    elif kind == "colon":
        group = state.group if state.mode == "pos" else []
        state.boundary()
        state.group = group  # "Effusion: none" / "Effusion: absent"
    elif kind == "and":
        state.conjoin()
    elif kind in ("or", "list"):
        state.last_joiner = kind
    elif kind == "comma":
        state.last_joiner = ","
        state.structures = []
        if state.mode == "pos":
            state.clause.extend(state.group)
            state.group = []
    elif kind == "pospost":
        state.affirm_last()
    elif kind in ("normal", "clear", "enlarged"):
        _predicate(state, items, j, skip)


def _predicate(state: _State, items: list[_Item], j: int, skip: set[int]) -> None:
    """'normal' / 'clear' / 'enlarged': about the structure before it, or the one after it.

    Structure first ("heart size is enlarged") starts a new clause: only a cue right before the
    predicate ("heart is not normal", "heart possibly enlarged") changes its reading. Predicate
    first ("no enlargement of the heart", "possible enlargement of the cardiac silhouette")
    sits inside the current scope, which stays open for the findings after it.
    """
    item = items[j]
    kind = str(item.payload)
    before = items[j - 1] if j > 0 else None
    cue_before = (
        before is not None
        and before.kind == "cue"
        and before.payload in ("neg", "weakneg", "unc", "question")
        and state.scope_findings == 0
    )
    structures = list(state.structures)
    ahead = not structures and j + 1 < len(items) and items[j + 1].kind == "structure"
    if ahead:
        structures = [items[j + 1]]  # "normal heart size", "clear lungs", "enlargement of"
        skip.add(j + 1)
    # An abnormal predicate ahead of its structure is a finding of the scope ("no effusion or
    # enlargement of the heart"); a normal one is its own statement ("no effusion, clear
    # lungs") unless the cue is right before it ("not normal heart size").
    in_scope = cue_before or (ahead and kind == "enlarged")
    stance = "plain"
    if state.mode in _NEG_MODES and in_scope:
        stance = "negated"
    elif state.mode in ("unc", "question", "amb", "unk") and in_scope:
        stance = "hedged"
    state.structures = []
    if structures:
        for structure in structures:
            if kind == "enlarged":
                state.structure_enlarged(structure, item.phrase, stance)
            else:
                state.structure_normal(structure, item.phrase, stance)
        if ahead and stance != "plain":
            state.scope_findings += 1  # "no enlargement of the heart or effusion"
        else:
            _end_scope_quietly(state, stance)
        return
    _end_scope_quietly(state, stance)
    if kind == "normal" and stance == "plain" and state.clause_unknown:
        # "Pulmonary XXXX normal": about the word not understood, not the whole chest
        state.unknown.append(item.phrase)
        state.warnings.append(
            f"'{state.clause_unknown[-1]} {item.phrase}' is about something not understood; "
            "nothing was excluded."
        )
        return
    if kind == "normal" and stance == "plain":
        state.normal_all.append(item.phrase)
        return
    state.unknown.append(item.phrase)
    if stance != "plain":
        state.warnings.append(
            f"'{item.phrase}' after a negation or hedge is not understood as a finding; "
            "nothing was excluded."
        )


def _end_scope_quietly(state: _State, stance: str) -> None:
    """Close the scope; one whose cue was about the predicate needs no 'dangling' warning."""
    if stance != "plain":
        state.scope_findings += 1
    state.close_scope()


def _finish(
    text: str,
    state: _State,
    corrections: dict[str, str],
    suggestions: dict[str, tuple[str, ...]],
) -> ParsedQuery:
    """Resolve every mention into disjoint positive / negative / uncertain lists."""
    said: dict[str, set[str]] = {}
    for name, event in state.events:
        said.setdefault(name, set()).add(event)
    order = list(dict.fromkeys([name for name, _ in state.events] + [n for n, _ in state.implied]))
    positive = [n for n in order if "pos" in said.get(n, ())]
    negative = [n for n in order if "neg" in said.get(n, ())]
    uncertain = [n for n in order if said.get(n, set()) & {"unc", "block"}]
    contradicted = [n for n in positive if n in negative]
    for name in contradicted:
        state.warnings.append(
            f"The query contradicts itself about {name} (required and excluded); {name} is "
            "neither required nor excluded."
        )
        positive.remove(name)
        negative.remove(name)
        uncertain.append(name)
    for name in [n for n in positive if "block" in said[n]]:
        positive.remove(name)
        state.warnings.append(
            f"{name} is required in one place but may be negated in another; it is neither "
            "required nor excluded."
        )
    for name in [n for n in negative if n not in contradicted and said[n] & {"unc", "block"}]:
        # "Streaky opacities XXXX reflect atelectasis. No focal infiltrate.": named as possible
        # (or next to a word not understood) in one place, as absent in another
        negative.remove(name)
        state.warnings.append(
            f"{name} is named as absent in one place but as possible or unclear in another; "
            "it is neither required nor excluded."
        )
    for name, statement in state.implied:
        # A normal-structure statement ("lungs are clear", "no acute cardiopulmonary process")
        # excludes what it names, except a finding the text reports (or hedges) elsewhere:
        # "Minimal opacity at the left base. The lungs are otherwise clear." Only when it is
        # about nothing else ("Cardiomegaly. Heart size is normal.") and no "otherwise"
        # limits it does it contradict the text.
        names, otherwise = state.statements[statement]
        if name in positive and not otherwise and names <= set(positive):
            positive.remove(name)
            uncertain.append(name)
            contradicted.append(name)
            state.warnings.append(
                f"The query contradicts itself about {name} ('{statement}' excludes it, yet it "
                f"is required); {name} is neither required nor excluded."
            )
            continue
        if name in positive or name in negative or name in contradicted:
            continue
        if said.get(name, set()) & {"unc", "block"}:
            continue  # kept uncertain on purpose
        negative.append(name)
    if state.normal_all:
        _normal(state, positive, negative, uncertain)
    negative = [n for n in negative if n not in positive]
    uncertain = [n for n in uncertain if n not in positive and n not in negative]
    taken = {*positive, *negative, *uncertain}
    history = [n for n in order if "hist" in said.get(n, ()) and n not in taken]
    return ParsedQuery(
        text=text,
        positive=_unique(positive),
        negative=_unique(negative),
        unknown=_unique(state.unknown),
        uncertain=_unique(uncertain),
        warnings=_unique(state.warnings),
        vocabulary=state.vocabulary,
        corrections=tuple(corrections.items()),
        suggestions=tuple(suggestions.items()),
        history=_unique(history),
        unlabelled=_unique(state.unlabelled),
    )


def _normal(state: _State, positive: list[str], negative: list[str], uncertain: list[str]) -> None:
    """'normal' about no structure: No Finding, or none of the findings not named."""
    phrase = state.normal_all[0]
    if NO_FINDING in state.vocabulary and not positive:
        positive.append(NO_FINDING)
        return
    rest = [
        n for n in state.vocabulary if n != NO_FINDING and n not in positive and n not in uncertain
    ]
    negative.extend(n for n in rest if n not in negative)
    kept = [n for n in positive if n != NO_FINDING]
    if kept:
        state.warnings.append(
            f"'{phrase}' is read as 'none of the other findings' ({', '.join(rest)}); "
            f"{', '.join(kept)} stays required."
        )
    else:
        state.warnings.append(
            f"'{phrase}' is read as 'none of the findings' ({', '.join(state.vocabulary)})."
        )


def _unique(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


def satisfies(
    findings: Mapping[str, object], parsed: ParsedQuery, setting: Setting = "main"
) -> bool | None:
    """Whether labels satisfy every constraint (CXR-Retrieve section 3.2); None if none.

    Positives need label 1. "no B" holds when B is not 1 (main: uncertain -1 and unmentioned
    count as absent) or only when B is a confirmed 0 (strict). A missing key is unmentioned.
    An uncertain finding U ("possible pneumonia") follows CheXpert's -1 convention of the
    setting (`uncertain_holds`) beside the hard constraints: main, U holds when it is present
    or unknown (1, -1 or unmentioned: anything but a confirmed 0); strict, only when it is
    confirmed (1). A query with only uncertain findings constrains nothing (None).
    """
    if setting not in ("main", "strict"):
        raise ValueError(f"Unknown setting {setting!r}; use 'main' or 'strict'.")
    if not parsed.has_constraints:
        return None  # a hedge or question alone constrains nothing
    if any(_label(findings, name) != 1 for name in parsed.positive):
        return False
    if not all(uncertain_holds(_label(findings, name), setting) for name in parsed.uncertain):
        return False
    if setting == "strict":
        return all(_label(findings, name) == 0 for name in parsed.negative)
    return all(_label(findings, name) != 1 for name in parsed.negative)


def uncertain_holds(label: object, setting: Setting = "main") -> bool:
    """Whether a study's label meets a query's *uncertain* finding under `setting`.

    main: present or unknown (1, -1 or None; fails only on a confirmed 0). strict: only a
    confirmed 1. The one definition of the mapping; logic-aware ranking and the oracle
    follow it (ranking/logic_aware.py, models/baselines.py).
    """
    if setting == "strict":
        return label == 1
    return label != 0


def is_hard_negative(findings: Mapping[str, object], parsed: ParsedQuery) -> bool:
    """A hit that meets every positive but shows an excluded finding (HNRR, section 3.3)."""
    if not parsed.negative:
        return False
    if any(_label(findings, name) != 1 for name in parsed.positive):
        return False
    return any(_label(findings, name) == 1 for name in parsed.negative)


# A broken constraint's reason (violations) as the words before the finding's name.
VIOLATION_WORDS = {
    "missing": "lacks",  # required, not labelled 1
    "present": "has",  # excluded, labelled 1
    "not-ruled-out": "does not rule out",  # strict: excluded, not a confirmed 0
    "ruled-out": "rules out",  # a possible finding, confirmed absent (main)
    "not-confirmed": "does not confirm",  # strict: a possible finding, not a confirmed 1
}


def violations(
    findings: Mapping[str, object], parsed: ParsedQuery, setting: Setting = "main"
) -> dict[str, str]:
    """Per broken constraint, why (a key of VIOLATION_WORDS), under `setting` as satisfies()
    reads it: a hit that does not satisfy the query always says why."""
    broken = {name: "missing" for name in parsed.positive if _label(findings, name) != 1}
    for name in parsed.negative:
        label = _label(findings, name)
        if label == 1:
            broken[name] = "present"
        elif setting == "strict" and label != 0:
            broken[name] = "not-ruled-out"
    for name in parsed.uncertain:
        if not uncertain_holds(_label(findings, name), setting):
            broken[name] = "not-confirmed" if setting == "strict" else "ruled-out"
    return broken


def violation_words(broken: Mapping[str, str]) -> list[str]:
    """violations()' {finding: reason} as words a reader understands ("has Cardiomegaly")."""
    return [f"{VIOLATION_WORDS.get(why, why)} {name}" for name, why in broken.items()]


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
    "MAX_QUERY_CHARS",
    "VIOLATION_WORDS",
    "ParsedQuery",
    "QueryTooLong",
    "check_query_length",
    "is_hard_negative",
    "parse_query",
    "satisfies",
    "uncertain_holds",
    "violation_words",
    "violations",
]

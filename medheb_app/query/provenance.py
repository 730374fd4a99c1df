"""Where each constraint of a reading came from: finding -> the sentences that name it.

A pasted report is read as a whole (parser.py resolves every mention into one state per
finding), so a user who sees "Excluded: Lung Opacity" needs to see which sentence said so.
`sources` re-reads each sentence of the text on its own and keeps, for every finding of the
whole reading, the sentences whose own reading names it and how each one reads it. Sentence
ends are the parser's own (". ; " and line breaks, not a decimal point). Cost: one more parse
of the text, only when asked for (the search page and the IU X-ray benchmark).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from medheb_app.query.parser import ParsedQuery, parse_query

State = str  # "required" | "excluded" | "uncertain" | "history"
_SENTENCE_END = re.compile(r"(?<!\d)\.(?!\d)|;|\n")


@dataclass(frozen=True)
class Source:
    """One sentence that names a finding: its text, where it is, and how it reads alone."""

    sentence: str
    start: int
    end: int
    state: State


@dataclass(frozen=True)
class FindingReading:
    """A finding of the reading, its state in the whole text, and the sentences behind it."""

    finding: str
    state: State
    sources: tuple[Source, ...]

    def to_dict(self) -> dict[str, object]:
        return {
            "finding": self.finding,
            "state": self.state,
            "sources": [
                {"sentence": s.sentence, "start": s.start, "end": s.end, "state": s.state}
                for s in self.sources
            ],
        }


def sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) of each non-empty sentence of `text`, stripped of surrounding spaces."""
    spans, start = [], 0
    for match in [*_SENTENCE_END.finditer(text), None]:
        end = match.end() if match else len(text)
        chunk = text[start:end]
        stripped = chunk.strip()
        if stripped.strip(".;"):
            left = start + (len(chunk) - len(chunk.lstrip()))
            spans.append((left, left + len(stripped)))
        start = end
    return spans


def states(parsed: ParsedQuery) -> dict[str, State]:
    """Each finding the reading names -> its state."""
    named: dict[str, State] = {}
    for state, names in (
        ("required", parsed.positive),
        ("excluded", parsed.negative),
        ("uncertain", parsed.uncertain),
        ("history", parsed.history),
    ):
        named.update({name: state for name in names})
    return named


def sources(parsed: ParsedQuery) -> list[FindingReading]:
    """For each finding of `parsed` (in the order required, excluded, uncertain, history),
    the sentences of its text that name it, each with how it reads on its own."""
    per_sentence = [
        (start, end, states(parse_query(parsed.text[start:end], parsed.vocabulary)))
        for start, end in sentences(parsed.text)
    ]
    readings = []
    for finding, state in states(parsed).items():
        found = tuple(
            Source(parsed.text[start:end], start, end, alone[finding])
            for start, end, alone in per_sentence
            if finding in alone
        )
        readings.append(FindingReading(finding, state, found))
    return readings

"""The search page's "where each reading came from" block, under the parsed view's chips: for a
pasted report, the sentence each constraint came from, and history-only findings (issue 20,
item 5).

The search tab calls `reading_html(query, payload)` in one line; everything here is a pure
function of the query text and the search answer (`constraints`, `unknown_terms`), so it
renders the reading the search actually used. Provenance comes from query/provenance.py.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from medheb_app.query.parser import QueryTooLong, parse_query
from medheb_app.query.provenance import sentences, sources

# state -> (label shown, chip class of ui/components.py CSS)
STATES = {
    "positive": ("Required", "present"),
    "negative": ("Excluded", "absent"),
    "uncertain": ("Uncertain", "uncertain"),
    "history": ("History", "absent"),
}
_WORDS = {"required": "required", "excluded": "excluded", "uncertain": "uncertain"}


def _chips(names: Sequence[str], css: str) -> str:
    return "".join(f'<span class="medheb-chip {css}">{html.escape(n)}</span>' for n in names)


def reading_html(query: str, payload: Mapping[str, Any]) -> str:
    """What the parsed view above it (ui/components.constraints_html: required, excluded and
    uncertain chips, words not understood) does not show: history-only findings as chips and,
    when the text has more than one sentence, a table: finding, reading, the sentences that name
    it (each with how it reads on its own). '' when there is nothing to add."""
    constraints = payload.get("constraints") or {}
    rows = []
    label, css = STATES["history"]
    history = list(constraints.get("history") or [])
    if history:
        rows.append(f"<div><b>{label}:</b> {_chips(history, css)}</div>")
    table = _sources_table(query, constraints)
    if not rows and not table:
        return ""
    return '<div class="medheb-reading">' + "".join(rows) + table + "</div>"


def _sources_table(query: str, constraints: Mapping[str, Sequence[str]]) -> str:
    """The sentence behind each constraint, for a text of two or more sentences."""
    names = tuple(dict.fromkeys(n for key in STATES for n in constraints.get(key) or []))
    try:
        parsed = parse_query(query, names)
    except QueryTooLong:
        return ""
    readings = sources(parsed)
    if not readings or len(sentences(query)) < 2:
        return ""
    body = []
    for reading in readings:
        said = "<br>".join(
            f"{html.escape(s.sentence)} <i>({_WORDS.get(s.state, s.state)})</i>"
            for s in reading.sources
        )
        body.append(
            f"<tr><td>{html.escape(reading.finding)}</td><td>{reading.state}</td>"
            f"<td>{said or '<i>the text as a whole</i>'}</td></tr>"
        )
    return (
        '<table class="medheb-reading-sources"><tr><th>Finding</th><th>Read as</th>'
        "<th>From</th></tr>" + "".join(body) + "</table>"
    )

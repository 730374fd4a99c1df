"""The query language: free text -> constraints over a finding vocabulary the caller passes in.

Search, logic-aware ranking, the oracle, CXR-Retrieve and training all read queries through
this package; it imports nothing above `medheb_app.evidence`.
"""

from medheb_app.query.parser import (
    MAX_QUERY_CHARS,
    ParsedQuery,
    QueryTooLong,
    Setting,
    check_query_length,
    is_hard_negative,
    parse_query,
    satisfies,
    violations,
)

__all__ = [
    "MAX_QUERY_CHARS",
    "ParsedQuery",
    "QueryTooLong",
    "Setting",
    "check_query_length",
    "is_hard_negative",
    "parse_query",
    "satisfies",
    "violations",
]

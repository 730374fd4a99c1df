"""Which benchmark runs are blinded: the source run of every open study.

While a study is open, a non-admin must not see the per-query ranked lists of the run it was
drawn from (side A's top-3 could be matched to a model before the vote). The explorer asks
here inside its handlers, so a call by `fn_index` from any session is refused too.
"""

from __future__ import annotations

from pathlib import Path

from medheb_app.run_service import open_study_sources
from medheb_app.run_service import resolved_dir as _key
from medheb_app.services import Services


def blinded_sources(services: Services) -> set[str]:
    """The resolved run directories of all studies that are not closed (a service query:
    the UI never reads the store itself)."""
    return open_study_sources(services)


def run_is_blinded(services: Services, out_dir: str | Path | None) -> bool:
    """True when `out_dir` is the source of an open study."""
    return out_dir is not None and _key(out_dir) in blinded_sources(services)

"""Which benchmark runs are blinded: every run that holds the ranked lists an open study shows.

While a study is open, a non-admin must not see the per-query ranked lists of a run its items
came from (side A's top-3 could be matched to a model before the vote). The run is recognised
by its content (task, query ids and top-3 rankings; medheb_app.study.blinding), not by a stored
path, so a study stored without a source and a copy of its run in another folder are blinded
too. The explorer asks here inside its handlers, so a call by `fn_index` from any session is
refused too.
"""

from __future__ import annotations

from pathlib import Path

from medheb_app.services import Services
from medheb_app.study.blinding import run_is_blinded as content_blinded


def run_is_blinded(services: Services, out_dir: str | Path | None) -> bool:
    """True when the run folder `out_dir` holds a ranked list an open study's item shows."""
    return content_blinded(services.store, out_dir)

"""Which benchmark runs are blinded: the source run of every open study.

While a study is open, a non-admin must not see the per-query ranked lists of the run it was
drawn from (side A's top-3 could be matched to a model before the vote). The explorer asks
here inside its handlers, so a call by `fn_index` from any session is refused too.
"""

from __future__ import annotations

from pathlib import Path

from medheb_app.services import Services


def _key(path: str | Path) -> str:
    try:
        return str(Path(path).resolve())
    except (OSError, RuntimeError):
        return str(path)


def blinded_sources(services: Services) -> set[str]:
    """The resolved run directories of all studies that are not closed."""
    from sqlalchemy import select

    from medheb_app.store.study_tables import PreferenceStudy

    with services.store.session() as session:
        studies = session.scalars(select(PreferenceStudy)).all()
        return {
            _key(study.source)
            for study in studies
            if study.source and getattr(study, "closed_at", None) is None
        }


def run_is_blinded(services: Services, out_dir: str | Path | None) -> bool:
    """True when `out_dir` is the source of an open study."""
    return out_dir is not None and _key(out_dir) in blinded_sources(services)

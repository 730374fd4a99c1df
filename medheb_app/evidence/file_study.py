"""A `Study` from one uploaded file (UI upload, CLI and API --file): decoded by
evidence.readers, reduced to what a session keeps by evidence.budget.

Apart from readers so that the decoders never import `Study` (evidence.study reads pixels
through readers on first use).
"""

from __future__ import annotations

from pathlib import Path

from medheb_app.evidence.budget import kept_for_session
from medheb_app.evidence.readers import content_id, read_any
from medheb_app.evidence.study import Study


def study_from_file(path: Path | str, max_bytes: int | None = None) -> Study:
    """A Study for an uploaded file (UI upload, CLI --file); no file name or patient tag is kept.

    Only what the page shows and the embedders read is kept of the decoded pixels (at most 64
    frames, a bounded size a side: evidence.budget.kept_for_session), so an upload held for
    its session does not keep a full-resolution decode resident."""
    loaded = read_any(path, max_bytes=max_bytes)
    pixels, reduced = kept_for_session(loaded.pixels, loaded.form)
    meta: dict[str, object] = dict(loaded.safe_meta)
    if reduced:
        meta["DecodedShape"], meta["KeptShape"] = list(loaded.pixels.shape), list(pixels.shape)
    meta["source_format"] = loaded.source_format
    if loaded.spacing is not None:  # per kept axis: coarser where pixels were reduced
        ratios = [a / b for a, b in zip(loaded.pixels.shape, pixels.shape, strict=False)]
        meta["spacing"] = [float(v) * r for v, r in zip(loaded.spacing, ratios, strict=False)]
    return Study(
        id=content_id(path),
        form=loaded.form,
        modality=loaded.modality,
        pixels=pixels,
        source="upload",
        meta=meta,
    )

"""Upload intake of the Search tab: an uploaded study read into memory, its temporary file gone.

Every handler is reachable by any anonymous session, so each re-checks on the server: uploads
are rate-limited per client and decoded in at most UPLOAD_SLOTS at once (one more is told the
server is busy), a file in Gradio's upload folder is renamed to a random private name, read and
deleted at once, and no message carries the visitor's file name, a path or an exception class.
The search itself is ui/search_tab.py's; this module only turns a file into a query Study.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path

import gradio as gr
import numpy as np

from medheb_app.access.limits import RateLimiter
from medheb_app.evidence.file_study import study_from_file
from medheb_app.evidence.study import EvidenceError, Study
from medheb_app.public_text import public_message
from medheb_app.services import Services
from medheb_app.ui import components as ui

log = logging.getLogger(__name__)
VOLUME_CHOICES = [("the whole volume", "volume"), ("this slice only", "slice")]
UPLOAD_TYPES = [".png", ".jpg", ".jpeg", ".dcm", ".dicom", ".zip", ".nii", ".gz", ".npy"]
# Suffixes a reader needs to see; everything else of the uploaded name is dropped.
_KEPT_SUFFIXES = (".nii.gz", ".nii", ".zip", ".dcm", ".dicom", ".png", ".jpg", ".jpeg", ".npy")
BUSY = "The server is busy with other requests; try again in a minute."
GENERIC_FAILURE = (
    "The search could not be completed on the server; try again, or pick another model or index."
)


def user_message(error: Exception | str) -> str:
    """One line a user can act on: never a traceback, an exception class name or a path."""
    return public_message(error, GENERIC_FAILURE)


@dataclass
class TabLimits:
    """Per-client limits and the upload slots (each slot decodes one upload in memory)."""

    searches: RateLimiter = field(default_factory=lambda: RateLimiter(30, 60.0, lockout_s=60.0))
    uploads: RateLimiter = field(default_factory=lambda: RateLimiter(6, 600.0, lockout_s=600.0))
    upload_slots: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(UPLOAD_SLOTS)
    )


# Concurrency: Gradio runs at most this many of each event at once; an upload beyond the free
# decode slots is told the server is busy instead of queueing behind 480 MB zips.
SEARCH_CONCURRENCY = 2
UPLOAD_CONCURRENCY = 4
UPLOAD_SLOTS = 4
UPLOAD_TTL_S = 1200


@dataclass
class Upload:
    """An uploaded study held in memory for the session (its temporary file is gone)."""

    study: Study
    pixels: np.ndarray
    form: str
    modality: str
    synthetic: bool = False

    @property
    def path(self) -> None:  # kept for callers of the old Upload: there is no file any more
        return None


def _private_name(original: Path) -> Path:
    """The upload renamed in place to 'upload' plus the suffix its reader needs, so no message
    can carry the visitor's file name and no other session can guess the path."""
    lower = original.name.lower()
    suffix = next((s for s in _KEPT_SUFFIXES if lower.endswith(s)), "")
    return original.with_name(f"upload-{uuid.uuid4().hex}{suffix}")


def _discard(path: Path) -> None:
    """Delete an upload's temporary file and its folder when Gradio made one just for it."""
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.parent.rmdir()  # only succeeds when empty: Gradio's per-upload hash folder


def _in_upload_folder(path: Path) -> bool:
    """Whether Gradio made this file for an upload (its cache folder): only those are consumed."""
    from gradio.utils import get_upload_folder

    try:
        return path.resolve().is_relative_to(Path(get_upload_folder()).resolve())
    except (OSError, ValueError):
        return False


def _drop_refused(path: Path) -> None:
    """A refused upload's temporary file is deleted too (never a file outside Gradio's folder)."""
    if _in_upload_folder(path) and path.is_file():
        _discard(path)


def _read_upload(services: Services, file_path: str) -> Study:
    """The upload as an in-memory Study. A file in Gradio's upload folder is first renamed to a
    random private name (no message can carry the visitor's file name, no other session can
    reuse its path) and deleted right after reading, whatever happens."""
    original = Path(file_path)
    if original.is_dir():
        raise EvidenceError("Upload one file (a zip for a DICOM series).")
    target = original
    if _in_upload_folder(original):
        target = _private_name(original)
        try:
            original.rename(target)
        except OSError:
            raise EvidenceError("The upload could not be read; upload it again.") from None
    try:
        study = study_from_file(target, max_bytes=services.settings.max_upload_bytes)
        study.load_pixels()
    finally:
        if target != original:
            _discard(target)
    return replace(study, path=None)


def load_upload(
    services: Services,
    file_path: str | None,
    client: str = "local",
    limits: TabLimits | None = None,
) -> tuple[Upload | None, str]:
    """Read an uploaded file into memory (its temporary file is deleted), or return a message
    saying why it cannot be read. Never echoes the file's name. `limits` are the page's
    per-client limits (None: a direct call, rate-limited by nothing but the decode slots)."""
    if not file_path:
        return None, ""
    decision = limits.uploads.hit(client) if limits is not None else None
    limits = limits or _DIRECT_CALLS
    if decision is not None and not decision.allowed:
        _drop_refused(Path(file_path))
        return None, ui.notice_html("error", decision.message("uploads"))
    if not limits.upload_slots.acquire(blocking=False):
        _drop_refused(Path(file_path))
        return None, ui.notice_html("warning", BUSY)
    try:
        study = _read_upload(services, file_path)
    except EvidenceError as error:
        return None, ui.notice_html("error", user_message(error))
    except Exception:  # a reader bug must not show a traceback to a clinician
        log.exception("an upload could not be read")
        return None, ui.notice_html(
            "error", "This file could not be read; check it is an image, DICOM, zip or NIfTI."
        )
    finally:
        limits.upload_slots.release()
    pixels = study.pixels
    if pixels is None:
        return None, ui.notice_html("error", "This file holds no image or volume to search with.")
    upload = Upload(study, pixels, study.form, study.modality, bool(study.synthetic))
    if study.form == "3d":
        what = f"{study.modality} volume, {pixels.shape[0]} slices"
        total = study.meta.get("NumberOfSlices")
        if study.meta.get("SlicesKept") and total:
            what += f" (sampled evenly from {total} to fit memory)"
    else:
        what = f"{study.modality} image, {pixels.shape[1]}x{pixels.shape[0]}"
    return upload, ui.notice_html("info", f"Loaded the upload: {what}.")


def _slider_label(mode: str | None) -> str:
    if mode == "slice":
        return "Slice shown: the search uses this slice only"
    return "Slice shown: the search uses the whole volume"


def on_upload(
    services: Services,
    file_path: str | None,
    client: str = "local",
    limits: TabLimits | None = None,
):
    """Upload -> (state, preview, slice slider, volume mode radio, message)."""
    upload, message = load_upload(services, file_path, client, limits)
    if upload is None:
        hidden = gr.update(visible=False)
        return None, gr.update(value=None, visible=False), hidden, hidden, message
    preview = ui.render_image(upload.pixels, upload.synthetic)
    if upload.form == "3d":
        depth = int(upload.pixels.shape[0])
        slider = gr.update(
            visible=True,
            minimum=0,
            maximum=depth - 1,
            value=depth // 2,
            step=1,
            label=_slider_label("volume"),
        )
        mode = gr.update(visible=True, value="volume")
    else:
        slider = gr.update(visible=False, value=0)
        mode = gr.update(visible=False, value="volume")
    return upload, gr.update(value=preview, visible=True), slider, mode, message


def on_slice(upload: Upload | None, index: float | None):
    if upload is None or upload.form != "3d":
        return gr.update()
    return ui.render_image(upload.pixels, upload.synthetic, int(index or 0))


def on_volume_mode(mode: str | None):
    return gr.update(label=_slider_label(mode))


def query_study(upload: Upload, mode: str | None, slice_index: float | None) -> Study:
    """What the search embeds: the whole upload, or for a volume in 'slice' mode the slice
    shown, as a 2D study of the same modality."""
    if upload.form != "3d" or mode != "slice":
        return upload.study
    depth = int(upload.pixels.shape[0])
    position = int(min(max(int(slice_index or 0), 0), depth - 1))
    return replace(
        upload.study,
        id=f"{upload.study.id}-slice{position}",
        form="2d",
        pixels=np.ascontiguousarray(upload.pixels[position]),
    )


# Direct calls (tests, scripts) share the decode slots but have no per-client rate limits.
_DIRECT_CALLS = TabLimits()

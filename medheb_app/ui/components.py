"""Rendering helpers every tab shares: images, SYNTHETIC labels, finding chips, notices.

Pure functions from data to pixels or HTML, so each tab renders the same thing the same way
(FastChat's lesson: one implementation per concept, not one per tab). All text that reaches
HTML goes through `html.escape`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

SYNTHETIC_TEXT = "SYNTHETIC"
SYNTHETIC_BANNER = (
    '<div class="medheb-banner" role="note">SYNTHETIC DEMO DATA: the images in the demo index '
    "are generated phantoms, not patients. Nothing here is for clinical use.</div>"
)
SYNTHETIC_MARK = '<div class="ev-mark">SYNTHETIC</div>'  # the rater page's mark, under pixels
VALUE_WORDS = {1: "present", 0: "absent", -1: "uncertain"}
DISPLAY_SIDE = 384  # a hit shown large is upscaled by a whole factor to at least this side
CSS = """
.medheb-banner {background:#7a1020;color:#fff;padding:6px 12px;border-radius:6px;
  font-weight:600;letter-spacing:.02em}
.medheb-notice {padding:8px 12px;border-radius:6px;margin:4px 0}
.medheb-notice.error {background:#fde8e8;color:#8a1111;border:1px solid #f3b4b4}
.medheb-notice.warning {background:#fff6e0;color:#6b4a00;border:1px solid #f0d48a}
.medheb-notice.info {background:#e8f1fd;color:#123d75;border:1px solid #b4cdf3}
.medheb-chip {display:inline-block;padding:1px 8px;margin:2px;border-radius:10px;
  font-size:.85em;border:1px solid #bbb}
.medheb-chip.present {background:#dff3e4;border-color:#7cc48f}
.medheb-chip.absent {background:#eef0f3;color:#555}
.medheb-chip.uncertain {background:#fff3d6;border-color:#e2bf62}
.medheb-chip.violates {background:#b3141f;color:#fff;border-color:#b3141f;font-weight:700}
#search-parsed .medheb-parsed > div {display:inline-block;margin-right:1.4em}
.medheb-progress {height:14px;background:#e5e7eb;border-radius:7px;overflow:hidden}
.medheb-progress > div {height:100%;background:#2563eb}
.medheb-notice details > summary {cursor:pointer}
.medheb-notice details ul {margin:4px 0 0 1.2em;padding:0}
.sr-line {font-size:.9em;color:#374151;margin:2px 0 6px}
.sr-list {display:grid;grid-template-columns:repeat(auto-fill,minmax(112px,1fr));gap:8px}
.sr-hit {display:block;min-width:0;padding:3px;margin:0;border:2px solid #d1d5db;
  border-radius:6px;background:#fff;color:#111827;cursor:pointer;text-align:center;font:inherit}
.sr-hit:hover, .sr-hit:focus {border-color:#2563eb}
.sr-hit.violates {border-color:#b3141f}
.sr-hit .ev-figure img {width:100%;aspect-ratio:1;object-fit:contain;max-height:none}
.sr-hit .ev-mark {display:block;max-width:100%;overflow:hidden;white-space:nowrap}
.sr-cap {display:block;font-size:13px;font-weight:700;white-space:nowrap;overflow:hidden;
  text-overflow:ellipsis;max-width:100%}
.sr-cap.bad {color:#b3141f}
.sr-cap.good {color:#15803d}
.sr-tag {display:block;font-size:11px;color:#374151;background:#e5e7eb;border-radius:3px}
.sr-noimage {aspect-ratio:1;display:flex;align-items:center;justify-content:center;
  background:#e5e7eb;color:#374151;font-size:12px}
#search-compare-hits .sr-hit {cursor:default}
.sr-large .ev-figure img {max-height:480px;image-rendering:pixelated}
@media (max-width: 640px) {
  .sr-list {grid-template-columns:repeat(4,minmax(0,1fr));gap:4px}
  .sr-cap {font-size:12px}
  .sr-line {font-size:11px;line-height:1.25;margin:0 0 4px}
  .medheb-banner {font-size:12px;padding:4px 8px;font-weight:600}
  #search-query .info-text {display:none}
  .sr-hit .ev-mark {font-size:9px;letter-spacing:0;padding:0 2px}
}
"""


def to_rgb_uint8(pixels: np.ndarray) -> np.ndarray:
    """An (H, W) or (H, W, 3) float image in [0, 1] (or any uint8 image) as (H, W, 3) uint8."""
    array = np.asarray(pixels)
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    if array.ndim not in (2, 3):
        raise ValueError(f"Cannot display an array of shape {array.shape} as an image.")
    if array.dtype != np.uint8:
        array = (np.clip(np.nan_to_num(array.astype(np.float32)), 0.0, 1.0) * 255).round()
        array = array.astype(np.uint8)
    if array.ndim == 2:
        array = np.repeat(array[..., None], 3, axis=-1)
    return np.ascontiguousarray(array[..., :3])


def volume_slice(volume: np.ndarray, index: int | None = None) -> np.ndarray:
    """Slice `index` of a (D, H, W) volume (the middle one by default), clamped to range."""
    depth = volume.shape[0]
    index = depth // 2 if index is None else min(max(int(index), 0), depth - 1)
    return volume[index]


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow without scalable default font
        return ImageFont.load_default()


def label_synthetic(image: np.ndarray, text: str = SYNTHETIC_TEXT) -> np.ndarray:
    """The image with a SYNTHETIC band added under it (the canvas grows; no pixel of the image
    is covered, so the mark cannot hide the lung bases), for views that show one picture only
    (the upload preview); HTML views put SYNTHETIC_MARK under the <img> instead."""
    pixels = to_rgb_uint8(image)
    height, width = pixels.shape[:2]
    band = max(14, height // 10)
    canvas = Image.new("RGB", (width, height + band), (122, 16, 32))
    canvas.paste(Image.fromarray(pixels), (0, 0))
    draw = ImageDraw.Draw(canvas)
    font = _font(max(9, int(band * 0.75)))
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    x = (width - (right - left)) // 2 - left
    y = height + (band - (bottom - top)) // 2 - top
    draw.text((x, y), text, fill=(255, 255, 255), font=font)
    return np.asarray(canvas)


def render_image(pixels: np.ndarray, synthetic: bool, slice_index: int | None = None) -> np.ndarray:
    """What the UI shows for a study's pixels: a slice for volumes, SYNTHETIC label if generated."""
    array = np.asarray(pixels)
    if array.ndim == 3 and array.shape[-1] not in (1, 3):
        array = volume_slice(array, slice_index)
    image = to_rgb_uint8(array)
    return label_synthetic(image) if synthetic else image


def finding_chips_html(
    findings: Mapping[str, object],
    positive: Sequence[str] = (),
    negative: Sequence[str] = (),
) -> str:
    """One chip per coded finding; a chip that breaks the query is drawn in red."""
    chips = []
    for name, value in findings.items():
        if value is None or value not in VALUE_WORDS:
            continue
        word = VALUE_WORDS[value]  # type: ignore[index]
        breaks = (name in negative and value == 1) or (name in positive and value != 1)
        css = "violates" if breaks else word
        chips.append(
            f'<span class="medheb-chip {css}" title="{word}">{html.escape(name)}: {word}</span>'
        )
    missing = [name for name in positive if name not in findings or findings[name] is None]
    chips += [
        f'<span class="medheb-chip violates">{html.escape(name)}: not reported</span>'
        for name in missing
    ]
    return "".join(chips) or '<span class="medheb-chip absent">no findings coded</span>'


def constraints_html(
    positive: Sequence[str],
    negative: Sequence[str],
    unknown: Sequence[str] = (),
    corrections: Mapping[str, str] | None = None,
    suggestions: Mapping[str, Sequence[str]] | None = None,
    error: str = "",
    uncertain: Sequence[str] = (),
) -> str:
    """How a free-text query was read, one chip per finding: wanted and excluded findings,
    findings named but left uncertain (hedged, questioned, ambiguous, contradictory); then words
    not understood, misspellings read as a finding ("Read") and "did you mean" candidates for
    the rest; or, when the query could not be read at all (e.g. over the length limit), why.
    """
    if error:
        return f'<div class="medheb-parsed"><div><b>Not read:</b> {html.escape(error)}</div></div>'

    def _list(items: Sequence[str]) -> str:
        return ", ".join(html.escape(item) for item in items) if items else "none"

    def _chips(items: Sequence[str], css: str) -> str:
        return (
            " ".join(
                f'<span class="medheb-chip {css}">{html.escape(item)}</span>' for item in items
            )
            if items
            else "none"
        )

    rows = [
        f"<div><b>Must show:</b> {_chips(positive, 'present')}</div>",
        f"<div><b>Must not show:</b> {_chips(negative, 'absent')}</div>",
    ]
    if uncertain:
        rows.append(
            f"<div><b>Uncertain (hedged or unclear):</b> {_chips(uncertain, 'uncertain')}</div>"
        )
    rows.append(f"<div><b>Not understood:</b> {_list(unknown)}</div>")
    if corrections:
        read = ", ".join(
            f"'{html.escape(typed)}' as '{html.escape(as_)}'" for typed, as_ in corrections.items()
        )
        rows.append(f"<div><b>Read:</b> {read}</div>")
    for typed, found in (suggestions or {}).items():
        options = " or ".join(f"'{html.escape(word)}'" for word in found)
        rows.append(f"<div><b>Did you mean</b> {options} for '{html.escape(typed)}'?</div>")
    return '<div class="medheb-parsed">' + "".join(rows) + "</div>"


def notice_html(kind: str, text: str) -> str:
    """A coloured box for an error, warning or information message; empty text gives ''."""
    if not text:
        return ""
    kind = kind if kind in ("error", "warning", "info") else "info"
    return f'<div class="medheb-notice {kind}" role="status">{html.escape(text)}</div>'


def notices_html(errors: Sequence[str] = (), warnings: Sequence[str] = ()) -> str:
    return "".join(notice_html("error", e) for e in errors) + "".join(
        notice_html("warning", w) for w in warnings
    )


_NAMED = re.compile(r"^(?P<name>[A-Z][\w ./-]{0,40}?): (?P<rest>.+)$", re.S)
_DETAIL = re.compile(r"\s*\([^()]*\)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def warning_kinds(warnings: Sequence[str]) -> list[tuple[str, list[str]]]:
    """Warnings grouped by kind: a warning "Name: text" (one per finding, e.g. the probe notes
    of ranking/index_logic.py) is of the kind of its text with parentheses and numbers left out,
    so 14 "X: too few labelled training studies (n positive of m) ..." make one kind. Returns
    (the kind's line, the warnings of that kind in order), kinds in order of first appearance;
    an exact repeat is dropped."""
    groups: dict[str, tuple[str, list[str], list[str]]] = {}
    for text in dict.fromkeys(warnings):  # exact repeats once
        named = _NAMED.match(text)
        if named is None:
            groups[text] = (text, [], [text])
            continue
        rest = _DETAIL.sub("", named["rest"]).strip()
        key = _NUMBER.sub("#", rest)
        line, names, members = groups.setdefault(key, (rest, [], []))
        names.append(named["name"])
        members.append(text)
    kinds = []
    for line, names, members in groups.values():
        if len(members) == 1:
            kinds.append((members[0], members))
        else:
            kinds.append((f"{len(names)} findings ({', '.join(names)}): {line}", members))
    return kinds


def warnings_html(warnings: Sequence[str]) -> str:
    """One warning box per kind of warning (warning_kinds): a kind with several members shows
    its one line, and the full warnings one click away, instead of a stack of boxes."""
    parts = []
    for line, members in warning_kinds(warnings):
        if len(members) == 1:
            parts.append(notice_html("warning", line))
            continue
        items = "".join(f"<li>{html.escape(text)}</li>" for text in members)
        parts.append(
            f'<div class="medheb-notice warning" role="status"><details>'
            f"<summary>{html.escape(line)}</summary><ul>{items}</ul></details></div>"
        )
    return "".join(parts)


def banner_html(synthetic: bool) -> str:
    """The SYNTHETIC DEMO DATA banner over a synthetic index; nothing over a real one."""
    return SYNTHETIC_BANNER if synthetic else ""


def upscaled(image: np.ndarray, side: int = DISPLAY_SIDE) -> tuple[np.ndarray, int]:
    """A small image enlarged by the whole factor that brings its longer side to at least
    `side` (nearest neighbour: every original pixel stays one visible square, nothing is
    invented), and the factor; an image already that large is returned as is with factor 1."""
    array = to_rgb_uint8(image)
    longest = max(array.shape[:2])
    factor = max(1, -(-side // max(longest, 1)))
    if factor == 1:
        return array, 1
    return np.ascontiguousarray(array.repeat(factor, axis=0).repeat(factor, axis=1)), factor


def progress_html(fraction: float, message: str) -> str:
    """A plain progress bar with its message, for work that outlives one request."""
    percent = round(100 * min(max(float(fraction), 0.0), 1.0))
    return (
        f'<div class="medheb-progress" role="progressbar" aria-valuenow="{percent}" '
        f'aria-valuemin="0" aria-valuemax="100"><div style="width:{percent}%"></div></div>'
        f"<div>{percent}% · {html.escape(message)}</div>"
    )

"""One renderer for every evidence form a study item, a search hit or an explorer row can hold:
2D images, volumes (a montage of slices with the middle one marked), text (reports, questions,
labels), region crops drawn as a box on their image, and any mix of them.

The output is self-contained HTML: images are inlined as PNG data (never a file path, so a page
names no task and no item), each can be clicked to view at full resolution, and the SYNTHETIC
mark sits in a caption under the image, never over the pixels (so it cannot hide the lung
apices). A payload with nothing that can be shown raises `Unrenderable` and is logged: callers
withhold such items instead of showing a placeholder.

Payloads follow medheb_app.study.payloads' schema (a `form` key: text, image, volume, region,
mixed). A volume shows its middle slice with a slice slider over its sampled frames (and the
montage on a second line); a region is outlined on its whole image. Payloads without `form`
(search hits, explorer rows) are read by key: text | report | caption, question, labels,
image | path (any readable file), volume (a file or DICOM folder), box ([x0, y0, x1, y1] in
pixels or [0, 1] fractions), synthetic.

Use it from any tab: `render_payload(payload)` -> HTML for a gr.HTML, `render_list(payloads,
"A")` for a ranked list, `try_render` to skip (and log) what cannot be shown; put `CSS` in the
page's css and `SCRIPT` in its head (click-to-zoom and the slice sliders).
"""

from __future__ import annotations

import base64
import html
import io
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from medheb_app.evidence.readers import read_any
from medheb_app.evidence.render import Unrenderable, montage, to_rgb8

log = logging.getLogger(__name__)
MAX_SIDE = 1024  # full resolution shown on zoom, capped so one item stays a few hundred KB
MONTAGE_SLICES = 9
TEXT_KEYS = ("text", "report", "caption")

CSS = """
.ev-list{display:flex;gap:8px;flex-wrap:wrap;align-items:flex-start}
.ev-item{flex:1 1 0;min-width:0;border:1px solid #d1d5db;border-radius:6px;padding:6px;
 background:#fff;color:#111827}
.ev-rank{font-weight:700;margin-right:4px}
.ev-figure{margin:0}
.ev-figure img{display:block;width:100%;max-height:260px;object-fit:contain;cursor:zoom-in;
 background:#000;border-radius:4px}
.ev-mark{display:inline-block;margin-top:3px;font-size:11px;font-weight:700;letter-spacing:.05em;
 color:#fff !important;background:#7a1020 !important;border-radius:3px;padding:0 5px}
.ev-caption{font-size:12px;color:#4b5563}
.ev-text{font-size:13px;line-height:1.35;max-height:11em;overflow:auto;white-space:pre-wrap}
.ev-labels span{display:inline-block;margin:2px;padding:0 6px;border-radius:10px;
 background:#e5e7eb;font-size:12px}
.ev-question{font-weight:600}
#ev-zoom{position:fixed;inset:0;background:rgba(0,0,0,.92);z-index:1000;display:flex;
 align-items:center;justify-content:center;cursor:zoom-out}
#ev-zoom img{max-width:100vw;max-height:100vh;image-rendering:auto}
.ev-slider{width:100%}
"""

# Click an inlined image to see it at its full resolution; click again or Escape to close.
# A slice slider swaps which of its volume's frames is visible.
SCRIPT = """
document.addEventListener('input', (event) => {
  const slider = event.target;
  if (!slider.classList || !slider.classList.contains('ev-slider')) return;
  const box = slider.closest('.ev-volume');
  const frames = box.querySelectorAll('img.ev-frame');
  frames.forEach((img, k) => { img.style.display = k === Number(slider.value) ? '' : 'none'; });
  const label = box.querySelector('.ev-slice');
  if (label) label.textContent = slider.dataset.labels.split(',')[Number(slider.value)];
});
document.addEventListener('click', (event) => {
  const open = document.getElementById('ev-zoom');
  if (open) { open.remove(); return; }
  const img = event.target.closest && event.target.closest('img.ev-zoomable');
  if (!img) return;
  const layer = document.createElement('div');
  layer.id = 'ev-zoom';
  const full = document.createElement('img');
  full.src = img.src; full.alt = img.alt;
  layer.appendChild(full);
  document.body.appendChild(layer);
});
document.addEventListener('keydown', (event) => {
  if (event.key === 'Escape') { const z = document.getElementById('ev-zoom'); if (z) z.remove(); }
});
"""


# ---------------------------------------------------------------- pixels


def volume_montage(volume: np.ndarray) -> np.ndarray:
    """What the page shows of a (D, H, W) volume (or (D, H, W, C), first channel): up to
    MONTAGE_SLICES evenly spaced slices in a grid, the middle one framed."""
    volume = np.asarray(volume)
    return montage(volume if volume.ndim == 3 else volume[..., 0], MONTAGE_SLICES, mark_middle=True)


def draw_box(image: np.ndarray, box: Sequence[float]) -> np.ndarray:
    """The image with a region outlined; `box` is (x0, y0, x1, y1) in pixels or fractions."""
    canvas = Image.fromarray(to_rgb8(image))
    width, height = canvas.size
    x0, y0, x1, y1 = (float(v) for v in box)
    if max(x0, y0, x1, y1) <= 1.0:
        x0, x1, y0, y1 = x0 * width, x1 * width, y0 * height, y1 * height
    line = max(2, min(width, height) // 100)
    ImageDraw.Draw(canvas).rectangle((x0, y0, x1, y1), outline=(255, 200, 0), width=line)
    return np.asarray(canvas)


def png_data_uri(image: np.ndarray, max_side: int = MAX_SIDE) -> str:
    picture = Image.fromarray(to_rgb8(image))
    if max(picture.size) > max_side:
        picture.thumbnail((max_side, max_side))
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG", optimize=False)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def file_pixels(path: Path) -> np.ndarray:
    """A study file's pixels as its reader gives them (OSError, EvidenceError when it cannot
    be read): for a caller that decides itself what an unreadable file shows."""
    return read_any(path).pixels


def _read(path: Any) -> np.ndarray:
    if not path or not Path(str(path)).exists():
        raise Unrenderable("its file is missing")
    try:
        return np.asarray(read_any(Path(str(path))).pixels)
    except Exception as error:  # any reader failure: the item is not shown, and it is logged
        raise Unrenderable(f"its file cannot be read ({type(error).__name__})") from error


def _is_volume(array: np.ndarray) -> bool:
    return (array.ndim == 3 and array.shape[-1] not in (1, 3, 4)) or array.ndim == 4


def _box(payload: dict[str, Any]) -> Sequence[float] | None:
    region = payload.get("region")
    box = payload.get("box") or (region.get("box") if isinstance(region, dict) else None)
    if box is not None and len(box) != 4:
        raise Unrenderable("its region box is not four numbers")
    return box


# ---------------------------------------------------------------- html


def figure_html(image: np.ndarray, alt: str, synthetic: bool, caption: str = "") -> str:
    """One zoomable image with its SYNTHETIC mark and caption underneath, outside the pixels."""
    return figure_uri_html(png_data_uri(image), alt, synthetic, caption)


def figure_uri_html(uri: str, alt: str, synthetic: bool, caption: str = "") -> str:
    """`figure_html` for an image already encoded as a data: URI (a drill-down thumbnail)."""
    mark = '<div class="ev-mark">SYNTHETIC</div>' if synthetic else ""
    note = f'<div class="ev-caption">{html.escape(caption)}</div>' if caption else ""
    return (
        f'<figure class="ev-figure"><img class="ev-zoomable" alt="{html.escape(alt)}" '
        f'src="{uri}" title="Click to zoom">{mark}{note}</figure>'
    )


def labels_html(labels: Sequence[Any] | None) -> str:
    """An item's labels as grey chips (the .ev-labels CSS); nothing when it has none."""
    if not labels:
        return ""
    chips = "".join(f"<span>{html.escape(str(label))}</span>" for label in labels)
    return f'<div class="ev-labels">{chips}</div>'


def slider_html(
    uris: Sequence[str], positions: Sequence[int], depth: int, alt: str, synthetic: bool
) -> str:
    """A volume as its middle sampled slice with a slice slider over all of them (SCRIPT swaps
    the visible frame); `uris` are the frames' data: URIs, `positions` their 0-based slices."""
    middle = len(uris) // 2
    hidden = ' style="display:none"'
    images = "".join(
        f'<img class="ev-zoomable ev-frame" alt="{html.escape(alt)} slice {pos + 1}" '
        f'src="{uri}"{"" if k == middle else hidden}>'
        for k, (pos, uri) in enumerate(zip(positions, uris, strict=True))
    )
    labels = ",".join(f"slice {pos + 1} of {depth}" for pos in positions)
    mark = '<div class="ev-mark">SYNTHETIC</div>' if synthetic else ""
    return (
        f'<figure class="ev-figure">{images}{mark}'
        f'<div class="ev-caption ev-slice">slice {positions[middle] + 1} of {depth}</div>'
        f'</figure><input type="range" class="ev-slider" min="0" max="{len(uris) - 1}" '
        f'value="{middle}" data-labels="{labels}" aria-label="slice of {html.escape(alt)}">'
    )


def _visual(payload: dict[str, Any], alt: str) -> str:
    synthetic = bool(payload.get("synthetic"))
    if payload.get("volume") is not None:
        volume = _read(payload["volume"])
        if volume.ndim == 4:
            volume = volume[..., 0]
        if volume.ndim != 3:
            raise Unrenderable("its volume is not three-dimensional")
        caption = f"{min(MONTAGE_SLICES, volume.shape[0])} of {volume.shape[0]} slices"
        return figure_html(
            volume_montage(volume), alt, synthetic, caption + "; framed: middle slice"
        )
    path = payload.get("image") or payload.get("path")
    if path is None:
        return ""
    pixels = _read(path)
    caption = ""
    if _is_volume(pixels):
        pixels = volume_montage(pixels)
        caption = "slices of a volume; framed: middle slice"
    box = _box(payload)
    if box is not None:
        pixels = draw_box(pixels, box)
        caption = (caption + "; " if caption else "") + "region outlined in yellow"
    return figure_html(pixels, alt, synthetic, caption)


def _textual(payload: dict[str, Any]) -> str:
    parts = []
    question = payload.get("question")
    if question:
        parts.append(f'<div class="ev-question">Q: {html.escape(str(question))}</div>')
    text = next((payload[k] for k in TEXT_KEYS if payload.get(k)), None)
    if text:
        parts.append(f'<div class="ev-text">{html.escape(str(text))}</div>')
    parts.append(labels_html(payload.get("labels")))
    return "".join(parts)


def _png(path: Any) -> np.ndarray:
    if not path or not Path(str(path)).is_file():
        raise Unrenderable("its image file is missing")
    try:
        with Image.open(str(path)) as picture:
            return np.asarray(picture.convert("RGB"))
    except OSError as error:
        raise Unrenderable("its image file cannot be decoded") from error


def volume_html(payload: dict[str, Any], alt: str) -> str:
    """The middle slice with a slider over the sampled frames, and the montage underneath."""
    try:
        frames = np.load(str(payload.get("frames")), allow_pickle=False)
    except (OSError, ValueError) as error:
        raise Unrenderable("its volume frames are missing") from error
    if frames.ndim != 3 or len(frames) < 2:
        raise Unrenderable("its volume has fewer than two frames")
    depth = int(payload.get("depth") or len(frames))
    positions = np.linspace(0, depth - 1, len(frames)).round().astype(int).tolist()
    uris = [png_data_uri(frame) for frame in frames]
    montage_img = ""
    if payload.get("montage"):
        montage_img = figure_html(_png(payload["montage"]), f"{alt} montage", False, "all slices")
    synthetic = bool(payload.get("synthetic"))
    return (
        f'<div class="ev-volume">{slider_html(uris, positions, depth, alt, synthetic)}'
        f"{montage_img}</div>"
    )


def _media(payload: dict[str, Any], alt: str) -> str:
    """An image, volume or region payload of the study schema."""
    form = payload.get("form")
    synthetic = bool(payload.get("synthetic"))
    if form == "image":
        return figure_html(_png(payload.get("image")), alt, synthetic)
    if form == "volume":
        return volume_html(payload, alt)
    if form == "region":
        box = payload.get("box")
        if not (isinstance(box, list | tuple) and len(box) == 4):
            raise Unrenderable("its region has no box")
        return figure_html(
            draw_box(_png(payload.get("image")), box), alt, synthetic, "region outlined in yellow"
        )
    raise Unrenderable(f"its form {form!r} is not an image, volume or region")


def _study_payload(payload: dict[str, Any], alt: str) -> str:
    form = payload.get("form")
    text = str(payload.get("text") or "").strip()
    text_html = f'<div class="ev-text">{html.escape(text)}</div>' if text else ""
    if form == "text":
        if not text:
            raise Unrenderable("its text is empty")
        return text_html
    if form == "mixed":
        media = payload.get("media")
        if not isinstance(media, dict) or not text:
            raise Unrenderable("a mixed item needs text and an image, volume or region")
        return _media(media, alt) + text_html
    return _media(payload, alt)


def render_payload(payload: dict[str, Any], alt: str = "evidence") -> str:
    """HTML for one payload of any form; raises Unrenderable when nothing can be shown."""
    if not isinstance(payload, dict):
        raise Unrenderable("it is not a payload")
    if "form" in payload:
        return _study_payload(payload, alt)
    visual = _visual(payload, alt)
    textual = _textual(payload)
    if not visual and not textual:
        raise Unrenderable("it has no image, volume or text")
    return visual + textual


def render_list(payloads: Sequence[dict[str, Any]], name: str) -> str:
    """A ranked list (1, 2, 3...) of payloads side by side; Unrenderable if any item is."""
    cells = []
    for rank, payload in enumerate(payloads, start=1):
        body = render_payload(payload, alt=f"{name} #{rank}")
        cells.append(f'<div class="ev-item"><span class="ev-rank">{rank}.</span>{body}</div>')
    if not cells:
        raise Unrenderable("the list is empty")
    return f'<div class="ev-list">{"".join(cells)}</div>'


def try_render(payload: dict[str, Any], what: str) -> str | None:
    """render_payload, or None after logging why (for callers that skip what cannot show)."""
    try:
        return render_payload(payload, alt=what)
    except Unrenderable as error:
        log.warning("%s withheld: %s", what, error)
        return None

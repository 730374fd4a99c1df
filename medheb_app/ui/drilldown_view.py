"""HTML of the explorer's drill-down: the query as what it is, and models side by side.

Renders medheb_app.eval.drilldown's objects: each model's top-k as thumbnails (inlined PNG
data, never a file path) with finding chips, the gold marked, and on a compositional query the
constraint each wrong image violates ("VIOLATES: has Pneumonia"); a miss names its reason in
the task's terms (wrong region with its IoU, wrong patient, findings lacked or added). Images
and volumes go through the project's one evidence renderer (ui/evidence_view.py): regions
drawn as boxes on their image (gold green, a wrong #1 red), volumes as a slice with a slider,
labels as chips, and the SYNTHETIC mark under every generated image, never over its pixels.
All text is escaped.
"""

from __future__ import annotations

import html
import logging
from pathlib import Path
from typing import Any

import numpy as np

from medheb_app.eval.drilldown import HitView, QueryView, RankedView
from medheb_app.ui import components as ui
from medheb_app.ui import evidence_view

log = logging.getLogger(__name__)
THUMB_SIDE = 112
CSS = """
.dd-models{display:flex;gap:16px;flex-wrap:wrap;align-items:flex-start}
.dd-model{flex:1 1 320px;min-width:280px}
.dd-grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(150px,1fr));gap:8px}
.dd-hit{border:2px solid #d1d5db;border-radius:6px;padding:4px;font-size:12px;background:#fff}
.dd-hit.gold{border-color:#16a34a;background:#f0fbf3}
.dd-hit.wrong{border-color:#b3141f}
.dd-hit img{display:block;width:100%;height:auto;background:#000;border-radius:4px}
.dd-violates{color:#fff;background:#b3141f;border-radius:3px;padding:0 4px;font-weight:700}
.dd-gold{color:#fff;background:#16a34a;border-radius:3px;padding:0 4px;font-weight:700}
.dd-query{border:1px solid #d1d5db;border-radius:6px;padding:8px;margin-bottom:8px}
.dd-reason{color:#b3141f;font-weight:600;margin:2px 0 6px}
.dd-hit .ev-figure img{max-height:150px}
"""


def thumbnail_uri(path: str | Path, side: int = THUMB_SIDE) -> str | None:
    """A small PNG of any readable image or volume (a montage of its slices) as a data: URI,
    through the shared evidence renderer's pixel helpers; None, logged, when unreadable."""
    try:
        pixels = evidence_view._read(path)
        image = evidence_view.volume_montage(pixels) if evidence_view._is_volume(pixels) else pixels
        return evidence_view.png_data_uri(image, max_side=side)
    except (evidence_view.Unrenderable, OSError, ValueError) as error:
        log.warning("thumbnail of %s failed: %s", path, error)
        return None


SLIDER_FRAMES = 8  # slices a drill-down volume keeps for its slider (inlined, so few)


def volume_slider_html(path: str | Path, alt: str, synthetic: bool) -> str | None:
    """A volume as its middle slice with a slice slider over SLIDER_FRAMES evenly sampled
    slices (the evidence renderer's .ev-volume markup and script, frames inlined as small
    PNGs), the SYNTHETIC mark under it; None when the file is not a readable volume."""
    try:
        volume = evidence_view._read(path)
    except (evidence_view.Unrenderable, OSError, ValueError) as error:
        log.warning("volume slider of %s failed: %s", path, error)
        return None
    if not evidence_view._is_volume(volume) or len(volume) < 2:
        return None
    depth = len(volume)
    positions = np.unique(np.linspace(0, depth - 1, min(SLIDER_FRAMES, depth)).round().astype(int))
    uris = [evidence_view.png_data_uri(volume[pos], max_side=THUMB_SIDE) for pos in positions]
    slider = evidence_view.slider_html(uris, positions.tolist(), depth, alt, synthetic)
    return f'<div class="ev-volume">{slider}</div>'


def evidence_html(payload: dict[str, Any], alt: str) -> str:
    """An image or volume thumbnail (SYNTHETIC under it when generated), else the text
    (shortened), with the item's labels; nothing when the payload holds nothing to show."""
    parts = []
    synthetic = bool(payload.get("synthetic"))
    path = payload.get("image") or payload.get("volume")
    slider = volume_slider_html(path, alt, synthetic) if payload.get("volume") else None
    if slider:
        parts.append(slider)
    elif path:
        uri = thumbnail_uri(path)
        if uri:
            parts.append(_figure(uri, alt, synthetic))
        else:
            parts.append("<div><i>image unavailable</i></div>")
    elif payload.get("thumbnail"):  # an in-memory image (region crop, slice) kept by the run
        parts.append(_figure(str(payload["thumbnail"]), alt, synthetic))
    text = payload.get("text")
    if text:
        text = str(text)
        short = text if len(text) <= 160 else text[:159] + "…"
        parts.append(f"<div>{html.escape(short)}</div>")
    parts.append(evidence_view.labels_html(payload.get("labels")))
    return "".join(parts)


def _figure(uri: str, alt: str, synthetic: bool) -> str:
    """evidence_view's figure layout for an already-encoded thumbnail: the SYNTHETIC mark is
    a caption under the image, never drawn over the pixels."""
    if not uri.startswith("data:image/png;base64,"):
        return "<div><i>image unavailable</i></div>"
    return evidence_view.figure_uri_html(uri, alt, synthetic)


def hit_html(hit: HitView, constraints: tuple[list[str], list[str]]) -> str:
    positive, negative = constraints
    css = "gold" if hit.gold else "wrong" if hit.violated else ""
    mark = '<span class="dd-gold">✓ GOLD</span>' if hit.gold else ""
    if not hit.gold and hit.violated:
        words = "; ".join(hit.broken)
        mark = f'<span class="dd-violates">✗ VIOLATES: {html.escape(words)}</span>'
    score = f" · {hit.score:.3f}" if hit.score is not None else ""
    chips = ui.finding_chips_html(hit.findings, positive, negative) if hit.findings else ""
    return (
        f'<div class="dd-hit {css}" data-rank="{hit.rank}">'
        f"<div><b>#{hit.rank}</b>{score} {mark}</div>"
        f"{evidence_html(hit.payload, f'rank {hit.rank}: {hit.id}')}"
        f'<div style="color:#555">{html.escape(hit.id)}</div>{chips}</div>'
    )


GOLD_COLOUR, WRONG_COLOUR = (22, 163, 74), (179, 20, 31)  # the page's gold and wrong marks
BOXED_SIDE = 224  # a region query's thumbnail is enlarged to this to draw its boxes


def boxed_thumbnail(uri: str, size: Any, boxes: list[tuple[Any, tuple[int, int, int]]]) -> str:
    """The inline PNG `uri` of a whole image of `size` [width, height] with each (box, colour)
    drawn as an outline (boxes in the whole image's pixels, scaled to the thumbnail)."""
    import base64
    import io

    from PIL import Image, ImageDraw

    prefix = "data:image/png;base64,"
    if not uri.startswith(prefix) or not (isinstance(size, list | tuple) and len(size) == 2):
        return uri
    with Image.open(io.BytesIO(base64.b64decode(uri[len(prefix) :]))) as opened:
        image = opened.convert("RGB")
    scale = BOXED_SIDE / max(image.size)
    image = image.resize((round(image.width * scale), round(image.height * scale)))
    sx, sy = image.width / float(size[0]), image.height / float(size[1])
    draw = ImageDraw.Draw(image)
    for box, colour in boxes:
        x0, y0, x1, y1 = box
        draw.rectangle([x0 * sx, y0 * sy, x1 * sx - 1, y1 * sy - 1], outline=colour, width=2)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return prefix + base64.b64encode(buffer.getvalue()).decode()


def region_boxes(view: QueryView, ranked: list[RankedView]) -> list[tuple[Any, tuple]]:
    """The gold box (green) and each model's wrong #1 from the same image (red) of a region
    query, as the run stored them (eval/medheb_scoring.add_region_boxes); [] otherwise."""
    gold = view.payload.get("box")
    if not gold:
        return []
    boxes: list[tuple[Any, tuple]] = [(gold, GOLD_COLOUR)]
    for model in ranked:
        top = model.hits[0] if model.hits else None
        source = str(top.payload.get("source") or "") if top is not None else ""
        if top and not top.gold and top.payload.get("box") and view.id.startswith(source + "#box"):
            boxes.append((top.payload["box"], WRONG_COLOUR))
    return boxes


def query_html(view: QueryView, boxes: list[tuple[Any, tuple]] | None = None) -> str:
    """The query with its labels and gold; a region query's image with the gold box (green)
    and the models' wrong #1 boxes (red) drawn on it."""
    if boxes and view.payload.get("thumbnail"):
        drawn = boxed_thumbnail(
            str(view.payload["thumbnail"]), view.payload.get("source_size"), boxes
        )
        view = QueryView(view.id, {**view.payload, "thumbnail": drawn}, view.labels, view.gold)
    labels = "".join(
        f'<span class="medheb-chip">{html.escape(label)}</span>' for label in view.labels
    )
    if boxes:
        labels += (
            '<span class="medheb-chip" style="border-color:#16a34a">green: gold region</span>'
            '<span class="medheb-chip" style="border-color:#b3141f">red: a model\'s #1</span>'
        )
    gold = html.escape(", ".join(view.gold[:12]) + (" …" if len(view.gold) > 12 else ""))
    return (
        f'<div class="dd-query"><b>Query {html.escape(view.id)}</b>'
        f"{evidence_html(view.payload, f'query {view.id}')}"
        f"<div>{labels}</div><div>Gold: {gold or 'none'}</div></div>"
    )


def drilldown_html(view: QueryView | None, ranked: list[RankedView]) -> str:
    """The query, then each model's top-k side by side."""
    if view is None or not ranked:
        return ui.notice_html("warning", "No ranked list for this query in the chosen models.")
    positive = [label.removeprefix("requires ") for label in view.labels if label.startswith("req")]
    negative = [label.removeprefix("excludes ") for label in view.labels if label.startswith("exc")]
    columns = []
    for model in ranked:
        verdict = "✓ hit" if model.hit else "✗ miss"
        hits = "".join(hit_html(h, (positive, negative)) for h in model.hits)
        reason = (
            f'<div class="dd-reason">✗ {html.escape(model.reason)}</div>' if model.reason else ""
        )
        columns.append(
            f'<div class="dd-model"><h4>{html.escape(model.model)} · {verdict}</h4>'
            f"<div>{html.escape(model.summary)}</div>{reason}"
            f'<div class="dd-grid">{hits}</div></div>'
        )
    return (
        f"<style>{CSS}{evidence_view.CSS}</style>{query_html(view, region_boxes(view, ranked))}"
        f'<div class="dd-models">{"".join(columns)}</div>'
    )

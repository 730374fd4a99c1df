"""What a rater is shown for a query or a candidate: one payload per piece of evidence.

Schema (what `ItemView.query` and every entry of `ItemView.side_a` / `side_b` is). Every
payload has a `form` key; paths point to files written at study creation under the study media
folder (DATA_DIR/study-media), named by a salted digest so a path names neither the task nor
the item. `synthetic` is True for generated (phantom) pixels, which the UI must label.

    form "text"    TextPayload   {"form", "text"}
        a report, an abstract, a question, a label ("Pleural effusion")
    form "image"   ImagePayload  {"form", "image", "width", "height", "synthetic"}
        a 2D image as a PNG (grey or RGB)
    form "volume"  VolumePayload {"form", "image", "montage", "frames", "n_frames", "depth",
                                  "width", "height", "synthetic"}
        a 3D study: `image` the middle slice PNG, `montage` a PNG grid of the sampled slices
        (row by row, top-left first), `frames` a .npy uint8 array (n_frames, height, width)
        of at most 16 evenly sampled slices for a slice slider; `depth` the original count
    form "region"  RegionPayload {"form", "image", "box", "crop", "width", "height",
                                  "synthetic"}
        a region of an image: `image` the whole image PNG, `box` [x0, y0, x1, y1] in its
        pixels (x1, y1 exclusive) for the UI to draw, `crop` the region alone as a PNG
    form "mixed"   MixedPayload  {"form", "text", "media"}
        text with an image, volume or region (`media` is one of those payloads), e.g. a
        question about an image, or a region's description with the whole image

`render_check(payload)` says why a payload cannot be rendered (a missing or undecodable file, a
volume with under two frames, an empty text, a box outside its image), or None; study creation
withholds any item with such a payload.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypedDict

import numpy as np
import PIL.Image

from medheb_app.evidence.readers import read_any
from medheb_app.evidence.render import Unrenderable, montage, to_uint8
from medheb_app.evidence.study import EmbedItem, Evidence, EvidenceError, Study
from medheb_app.tasks.base import Task

Payload = dict[str, Any]
MAX_FRAMES = 16
FORMS = ("text", "image", "volume", "region", "mixed")


class TextPayload(TypedDict):
    form: Literal["text"]
    text: str


class ImagePayload(TypedDict):
    form: Literal["image"]
    image: str
    width: int
    height: int
    synthetic: bool


class VolumePayload(TypedDict):
    form: Literal["volume"]
    image: str
    montage: str
    frames: str
    n_frames: int
    depth: int
    width: int
    height: int
    synthetic: bool


class RegionPayload(TypedDict):
    form: Literal["region"]
    image: str
    box: list[int]
    crop: str
    width: int
    height: int
    synthetic: bool


class MixedPayload(TypedDict):
    form: Literal["mixed"]
    text: str
    media: ImagePayload | VolumePayload | RegionPayload


class MediaWriter:
    """Writes pixels as salted, unguessable files in one folder."""

    def __init__(self, media_dir: str | Path) -> None:
        self.media_dir = Path(media_dir)
        self.salt = secrets.token_hex(8)

    def _path(self, key: str, suffix: str) -> Path:
        self.media_dir.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(f"{self.salt}:{key}".encode()).hexdigest()[:24]
        return self.media_dir / f"{name}{suffix}"

    def png(self, pixels: np.ndarray, key: str) -> str:
        path = self._path(key, ".png")
        PIL.Image.fromarray(to_uint8(pixels)).save(path)
        return str(path)

    def image(self, pixels: np.ndarray, key: str, synthetic: bool) -> ImagePayload:
        pixels = _image_array(pixels)
        height, width = pixels.shape[:2]
        return {
            "form": "image",
            "image": self.png(pixels, key),
            "width": int(width),
            "height": int(height),
            "synthetic": bool(synthetic),
        }

    def volume(self, volume: np.ndarray, key: str, synthetic: bool) -> VolumePayload:
        volume = np.asarray(volume)
        if volume.ndim != 3 or volume.shape[0] < 2 or 0 in volume.shape:
            raise Unrenderable(f"a volume needs at least two slices; got shape {volume.shape}")
        picks = np.unique(np.linspace(0, len(volume) - 1, min(MAX_FRAMES, len(volume))).round())
        frames = to_uint8(volume[picks.astype(int)])
        frames_path = self._path(f"{key}:frames", ".npy")
        np.save(frames_path, frames)
        return {
            "form": "volume",
            "image": self.png(volume[len(volume) // 2], f"{key}:mid"),
            "montage": self.png(montage(frames, gutter=2), f"{key}:montage"),
            "frames": str(frames_path),
            "n_frames": len(frames),
            "depth": len(volume),
            "width": int(volume.shape[2]),
            "height": int(volume.shape[1]),
            "synthetic": bool(synthetic),
        }

    def region(
        self, image: np.ndarray, box: tuple[int, int, int, int], key: str, synthetic: bool
    ) -> RegionPayload:
        image = _image_array(image)
        x0, y0, x1, y1 = box
        return {
            "form": "region",
            "image": self.png(image, f"{key}:whole"),
            "box": [int(x0), int(y0), int(x1), int(y1)],
            "crop": self.png(image[y0:y1, x0:x1], f"{key}:crop"),
            "width": int(image.shape[1]),
            "height": int(image.shape[0]),
            "synthetic": bool(synthetic),
        }


def _image_array(pixels: np.ndarray) -> np.ndarray:
    pixels = np.asarray(pixels)
    if pixels.ndim == 3 and pixels.shape[2] == 1:
        pixels = pixels[:, :, 0]
    if pixels.ndim not in (2, 3) or pixels.size == 0:
        raise Unrenderable(f"not a 2D image (shape {pixels.shape})")
    return pixels


def locate(crop: np.ndarray, image: np.ndarray) -> tuple[int, int, int, int] | None:
    """Where `crop` was cut from `image` (an exact copy of a window), as [x0, y0, x1, y1]."""
    crop, image = np.asarray(crop), np.asarray(image)
    if crop.ndim != image.ndim or any(c > i for c, i in zip(crop.shape, image.shape, strict=True)):
        return None
    h, w = crop.shape[:2]
    ys, xs = np.nonzero(image[: image.shape[0] - h + 1, : image.shape[1] - w + 1] == crop[0, 0])
    for y, x in zip(ys.tolist(), xs.tolist(), strict=True):
        if np.array_equal(image[y : y + h, x : x + w], crop):
            return x, y, x + w, y + h
    return None


def mixed(text: str, media: Payload) -> Payload:
    return {"form": "mixed", "text": text, "media": media}


class Renderer:
    """Turns a study item into a schema payload (see the module docstring), raising
    Unrenderable when it cannot be shown.

    It knows the benchmark tasks a run was made from (their real items: pixels, volumes,
    region crops, texts) and falls back on the run file's own payload ({"text"}, {"image":
    path}, {"volume": path}) for ids it does not know. Without a media folder, only texts and
    image files already on disk can be shown."""

    def __init__(self, media_dir: str | Path | None, tasks: Iterable[Task] = ()) -> None:
        self.writer = MediaWriter(media_dir) if media_dir is not None else None
        self.items: dict[tuple[str, str], tuple[EmbedItem, bool]] = {}
        self.regions: dict[tuple[str, str], np.ndarray] = {}  # crop id -> its whole image
        self.cache: dict[tuple[str, str], Payload] = {}
        for task in tasks:
            for entry in (*task.queries, *task.candidates):
                self.items[(task.name, entry.id)] = (entry.item, task.metadata.synthetic)
            self._note_regions(task)

    def _note_regions(self, task: Task) -> None:
        """For region tasks (a whole image + text query whose positive is an image-only
        crop), remember each crop's whole image so the crop is shown in place, boxed."""
        candidates = {c.id: c.item for c in task.candidates}
        for query in task.queries:
            item = query.item
            if not isinstance(item, Evidence) or item.image is None:
                continue
            for cid in query.positives:
                crop = candidates.get(cid)
                if isinstance(crop, Evidence) and crop.image is not None and crop.text is None:
                    self.regions[(task.name, cid)] = item.image

    def __call__(self, task: str, item_id: str, raw: Mapping[str, Any] | None = None) -> Payload:
        key = (task, item_id)
        if key not in self.cache:
            if key in self.items:
                item, synthetic = self.items[key]
                payload = self.from_item(item, f"{task}:{item_id}", synthetic, key)
            elif raw is not None:
                payload = self.from_run(raw, f"{task}:{item_id}")
            else:
                raise Unrenderable("the run has no display payload for this id")
            reason = render_check(payload)
            if reason:
                raise Unrenderable(reason)
            self.cache[key] = payload
        return self.cache[key]

    def _need_writer(self) -> MediaWriter:
        if self.writer is None:
            raise Unrenderable("pixels held in memory need a media folder to be written to")
        return self.writer

    def from_item(
        self, item: EmbedItem, key: str, synthetic: bool, region_key: tuple[str, str] = ("", "")
    ) -> Payload:
        """A task's own item: text, Study (2D, 3D, text) or Evidence (any mix)."""
        if isinstance(item, str):
            return {"form": "text", "text": item}
        if isinstance(item, Study):
            if item.form == "text":
                return {"form": "text", "text": item.text or ""}
            try:
                pixels = item.load_pixels()
            except (EvidenceError, OSError, ValueError) as error:
                raise Unrenderable(f"the study's file cannot be read ({error})") from None
            if pixels is None:
                raise Unrenderable("the study has no pixels and no readable file")
            synthetic = synthetic or item.synthetic
            if item.form == "3d":
                return self._need_writer().volume(pixels, key, synthetic)
            return self._need_writer().image(pixels, key, synthetic)
        if isinstance(item, Evidence):
            media: Payload | None = None
            writer = (
                self._need_writer() if item.image is not None or item.volume is not None else None
            )
            if item.image is not None and region_key in self.regions:
                whole = self.regions[region_key]
                box = locate(item.image, whole)
                if box is not None:
                    media = writer.region(whole, box, key, synthetic)
            if media is None and item.image is not None:
                media = writer.image(item.image, key, synthetic)
            elif media is None and item.volume is not None:
                media = writer.volume(item.volume, key, synthetic)
            if media is None:
                return {"form": "text", "text": item.text or ""}
            return mixed(item.text, media) if item.text else media
        raise Unrenderable(f"cannot show an item of type {type(item).__name__}")

    def from_run(self, raw: Mapping[str, Any], key: str) -> Payload:
        """A run file's payload: {"text"}, {"image": path}, {"volume": path}, {"thumbnail":
        PNG data URI} (a region crop or slice the run held in memory), or a mix; a schema
        payload (with a valid `form`) is kept as it is."""
        if raw.get("form") in FORMS and not render_check(dict(raw)):
            return dict(raw)
        text = raw.get("text")
        text = str(text).strip() if text is not None else ""
        synthetic = bool(raw.get("synthetic", False))
        media: Payload | None = None
        for field_name, is_volume in (("image", False), ("volume", True), ("path", False)):
            if raw.get(field_name):
                media = self._media_from_file(Path(str(raw[field_name])), key, is_volume, synthetic)
                break
        if media is None and raw.get("thumbnail"):  # an in-memory image the run kept small
            media = self._need_writer().image(_decode_thumbnail(raw["thumbnail"]), key, synthetic)
        if media is None:
            if not text:
                raise Unrenderable("the run file has no text or media to show for this id")
            return {"form": "text", "text": text}
        return mixed(text, media) if text else media

    def _media_from_file(self, path: Path, key: str, is_volume: bool, synthetic: bool) -> Payload:
        if not path.is_file():
            raise Unrenderable(f"media file not found: {path.name}")
        try:
            pixels = read_any(path).pixels
        except Exception as error:  # any reader failure means the item cannot be shown
            raise Unrenderable(f"media file {path.name} cannot be read ({error})") from None
        if pixels is None:
            raise Unrenderable(f"media file {path.name} holds no pixels")
        if is_volume or (pixels.ndim == 3 and pixels.shape[2] not in (1, 3, 4)):
            return self._need_writer().volume(pixels, key, synthetic)
        if self.writer is None:  # no media folder: show the file where it is
            height, width = pixels.shape[:2]
            return {
                "form": "image",
                "image": str(path),
                "width": int(width),
                "height": int(height),
                "synthetic": synthetic,
            }
        return self.writer.image(pixels, key, synthetic)


def _decode_thumbnail(uri: Any) -> np.ndarray:
    """The pixels of a run file's inline PNG thumbnail ("data:image/png;base64,...")."""
    import base64
    import binascii
    import io

    text = str(uri)
    prefix = "data:image/png;base64,"
    if not text.startswith(prefix):
        raise Unrenderable("the run file's thumbnail is not an inline PNG")
    try:
        with PIL.Image.open(io.BytesIO(base64.b64decode(text[len(prefix) :], validate=True))) as im:
            return np.asarray(im.convert("L") if im.mode not in ("L", "RGB") else im)
    except (binascii.Error, OSError, ValueError):
        raise Unrenderable("the run file's thumbnail cannot be decoded") from None


def describe_with_tasks(tasks: Iterable[Task], media_dir: str | Path) -> Renderer:
    """The renderer for a run made from these benchmark tasks, writing media to `media_dir`."""
    return Renderer(media_dir, tasks)


def render_check(payload: Any) -> str | None:
    """Why `payload` cannot be rendered by the UI, or None when it can (files are opened)."""
    if not isinstance(payload, Mapping):
        return "not a payload"
    form = payload.get("form")
    if form == "text":
        return None if str(payload.get("text") or "").strip() else "empty text"
    if form == "mixed":
        if not str(payload.get("text") or "").strip():
            return "a mixed item without text"
        media = payload.get("media")
        if not isinstance(media, Mapping) or media.get("form") not in ("image", "volume", "region"):
            return "a mixed item without an image, volume or region"
        return render_check(media)
    if form == "image":
        return _check_png(payload.get("image"))
    if form == "volume":
        problem = _check_png(payload.get("image")) or _check_png(payload.get("montage"))
        if problem:
            return problem
        try:
            frames = np.load(str(payload.get("frames")), allow_pickle=False)
        except (OSError, ValueError):
            return "volume frames missing or unreadable"
        if frames.ndim != 3 or len(frames) < 2 or frames.size == 0:
            return "a volume needs at least two frames"
        return None
    if form == "region":
        problem = _check_png(payload.get("image")) or _check_png(payload.get("crop"))
        if problem:
            return problem
        box = payload.get("box")
        width, height = payload.get("width"), payload.get("height")
        if not (isinstance(box, list | tuple) and len(box) == 4):
            return "a region without a box"
        x0, y0, x1, y1 = box
        if not (0 <= x0 < x1 <= width and 0 <= y0 < y1 <= height):
            return "a region box outside its image"
        return None
    return f"unknown form {form!r}"


def _check_png(path: Any) -> str | None:
    if not path or not Path(str(path)).is_file():
        return "media file missing"
    try:
        with PIL.Image.open(str(path)) as image:
            pixels = np.asarray(image)
    except (OSError, ValueError):
        return "media file cannot be decoded"
    return None if pixels.size else "media file is empty"

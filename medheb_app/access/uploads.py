"""The upload route of both apps, replacing Gradio's: nothing a visitor sends stays on disk.

Gradio's own `/gradio_api/upload` writes every file, whether or not a handler ever consumes it,
to `<temp>/<sha of the content>/<the visitor's file name>` (patient-identifying names reach the
disk, identical uploads from two visitors share one path and collide), serves it back by URL,
and never removes it after a crash. This route, mounted in front of Gradio's on both pages:

- refuses a body over MAX_UPLOAD_BYTES before reading it (Content-Length), and stops a body
  without one as soon as it passes the cap, deleting what was written;
- limits uploads per client (medheb_app.access.limits) and how many stream at once;
- writes each file under a random name in a folder of its own inside an app-private,
  owner-only folder (Gradio's upload folder must hold it for a handler to accept the path):
  only the suffix the readers need (".nii.gz", ".dcm", ...) is kept from the visitor's name;
- deletes every file older than `ttl_s` (the page consumes an upload within seconds) on a
  timer and at start, so whatever a killed process left behind is gone after a restart;
- is never served back: `/gradio_api/file=` answers 404 for anything in that folder and for
  Gradio's cache copy of it (the path handed to the handler, which reads and deletes it).

The raters' page takes no uploads at all: its route answers 404.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import shutil
import threading
import time
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from medheb_app.access.limits import client_key

log = logging.getLogger(__name__)

FOLDER_NAME = "medheb-uploads"
# the suffixes a reader needs to see; everything else of the visitor's name is dropped
KEPT_SUFFIXES = (".nii.gz", ".nii", ".zip", ".dcm", ".dicom", ".png", ".jpg", ".jpeg", ".npy")
FORM_OVERHEAD = 64 * 1024  # multipart boundaries and part headers around the file
# an upload's name here, and so of Gradio's cache copy of it handed to the handler
UPLOAD_NAME = re.compile(r"upload-[0-9a-f]{16}(\.[a-z.]+)?$")


def kept_suffix(filename: str | None) -> str:
    """'.nii.gz' for 'DOE^JOHN_1957.NII.GZ', '' for a name with no suffix a reader needs."""
    lowered = (filename or "").lower()
    return next((suffix for suffix in KEPT_SUFFIXES if lowered.endswith(suffix)), "")


def private_folder() -> Path:
    """`<Gradio's upload folder>/medheb-uploads` (made owner-only at the first upload)."""
    from gradio.utils import get_upload_folder

    return Path(get_upload_folder()) / FOLDER_NAME


class UploadTooLarge(Exception):
    """The request body passed the byte cap."""


async def _capped(stream: Any, limit: int):
    """The request body's chunks, raising UploadTooLarge once more than `limit` bytes came."""
    seen = 0
    async for chunk in stream:
        seen += len(chunk)
        if seen > limit:
            raise UploadTooLarge
        yield chunk


class UploadIntake:
    """Receives uploads into the private folder and sweeps it (see the module docstring)."""

    def __init__(
        self,
        max_bytes: int,
        ttl_s: float = 600.0,
        limiter: Any = None,
        proxy_hops: int = 0,
        max_streaming: int = 4,
        folder: Path | None = None,
    ) -> None:
        self.max_bytes = int(max_bytes)
        self.ttl_s = float(ttl_s)
        self.limiter = limiter
        self.proxy_hops = proxy_hops
        self.folder = folder or private_folder()
        self._streaming = asyncio.Semaphore(max_streaming)
        self._stop = threading.Event()

    # ------------------------------------------------------------ sweeping
    def sweep(self, older_than_s: float | None = None) -> int:
        """Delete upload folders older than `older_than_s` (default: the TTL); returns how
        many. Age is the folder's modification time, so a file being written is kept."""
        horizon = time.time() - (self.ttl_s if older_than_s is None else older_than_s)
        removed = 0
        for entry in self._entries():
            try:
                if entry.lstat().st_mtime <= horizon:
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry, ignore_errors=True)
                    else:
                        entry.unlink(missing_ok=True)
                    removed += 1
            except OSError:
                continue
        return removed

    def _entries(self) -> Iterable[Path]:
        try:
            return list(self.folder.iterdir())
        except OSError:
            return []

    def start_sweeper(self, every_s: float = 60.0) -> None:
        """Sweep now (what a killed process left) and then every `every_s` seconds."""
        swept = self.sweep()
        if swept:
            log.info("removed %d upload(s) left by an earlier process", swept)

        def loop() -> None:
            while not self._stop.wait(every_s):
                self.sweep()

        threading.Thread(target=loop, name="medheb-upload-sweeper", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def owns(self, path: str | Path) -> bool:
        """Whether a path lies in the private folder (never served back)."""
        try:
            return Path(path).resolve().is_relative_to(self.folder.resolve())
        except (OSError, ValueError):
            return False

    # ------------------------------------------------------------ the route
    async def receive(self, request: Any) -> Any:
        """POST /gradio_api/upload: the files' new paths as Gradio's client expects (a JSON
        list), or a plain-text refusal with 413, 429, 503 or 400."""
        from fastapi.responses import JSONResponse, PlainTextResponse
        from gradio.route_utils import GradioMultiPartParser, MultiPartException

        cap = self.max_bytes + FORM_OVERHEAD
        too_large = f"The upload is larger than the limit of {self.max_bytes // 2**20} MB."
        try:
            declared = int(request.headers.get("content-length", "0") or 0)
        except ValueError:
            return PlainTextResponse("A malformed upload.", status_code=400)
        if declared > cap:
            return PlainTextResponse(too_large, status_code=413)
        if self.limiter is not None:
            decision = self.limiter.hit(client_key(request, self.proxy_hops))
            if not decision.allowed:
                return PlainTextResponse(decision.message("uploads"), status_code=429)
        content_type = request.headers.get("content-type", "")
        if not content_type.startswith("multipart/form-data"):
            return PlainTextResponse("Upload files as multipart/form-data.", status_code=400)
        if self._streaming.locked():
            return PlainTextResponse(
                "The server is busy with other uploads; try again in a minute.", status_code=503
            )
        async with self._streaming:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.folder.chmod(0o700)
            holder = self.folder / secrets.token_hex(16)
            holder.mkdir(mode=0o700)
            try:
                parser = GradioMultiPartParser(
                    request.headers,
                    _capped(request.stream(), cap),
                    max_files=1,
                    max_fields=10,
                    upload_dir=str(holder),
                    max_file_size=self.max_bytes,
                )
                form = await parser.parse()
                paths = []
                for part in form.getlist("files"):
                    handle = getattr(part, "file", None)
                    if handle is None:
                        continue
                    handle.close()
                    # unique, so Gradio's content-addressed cache copy of it is unique too
                    suffix = kept_suffix(getattr(part, "filename", ""))
                    target = holder / f"upload-{secrets.token_hex(8)}{suffix}"
                    Path(handle.name).rename(target)
                    paths.append(str(target))
            except (UploadTooLarge, MultiPartException) as error:
                shutil.rmtree(holder, ignore_errors=True)
                if isinstance(error, UploadTooLarge) or "maximum allowed size" in str(error):
                    return PlainTextResponse(too_large, status_code=413)
                return PlainTextResponse("A malformed upload.", status_code=400)
            except Exception:
                shutil.rmtree(holder, ignore_errors=True)
                log.warning("an upload could not be received", exc_info=False)
                return PlainTextResponse("A malformed upload.", status_code=400)
            if not paths:
                shutil.rmtree(holder, ignore_errors=True)
                return PlainTextResponse("The upload held no file.", status_code=400)
            return JSONResponse(paths)


FILE_ROUTE = re.compile(r"/file[=/](?P<target>.*)$")  # Gradio serves /file=<p> and /file/<p>


class NoUploadedFilesServed:
    """Pure ASGI middleware: Gradio's file routes (`/gradio_api/file=<path>` and
    `/gradio_api/file/<path>`, under either page) answer 404 when the path lies in the private
    upload folder (an upload is read by its handler, never shown)."""

    def __init__(self, app: Any, intake: UploadIntake) -> None:
        self.app = app
        self.intake = intake

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            path = str(scope.get("path", ""))
            route = FILE_ROUTE.search(path)
            if route is not None:
                target = urllib.parse.unquote(route.group("target"))
                named = UPLOAD_NAME.match(target.rsplit("/", 1)[-1]) is not None
                if named or self.intake.owns(target) or FOLDER_NAME in target:
                    from starlette.responses import PlainTextResponse

                    await PlainTextResponse("Not found.", status_code=404)(scope, receive, send)
                    return
        await self.app(scope, receive, send)

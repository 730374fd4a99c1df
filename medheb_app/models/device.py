"""Which torch device a model runs on: `--device` / MEDHEB_DEVICE resolved and applied.

"auto" is CUDA when a GPU is visible, else CPU; "cuda" and "cuda:N" must exist (a clear
error otherwise, never a silent fall back to CPU). Embedders that hold torch modules expose
`to_device(device)`; `place` calls it, so every embedder, trainer and job moves the same way.
Half precision: on CUDA, bf16 where the GPU supports it, else fp16 (`inference_dtype`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N"
_CUDA = re.compile(r"^cuda(?::(\d+))?$")


class DeviceError(ValueError):
    """A device that does not exist here; the message says what does."""


def cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(text: str | None) -> str:
    """'auto' | 'cpu' | 'cuda' | 'cuda:N' -> a concrete torch device string for this machine."""
    wanted = (text or "auto").strip().lower()
    if wanted == "auto":
        return "cuda" if cuda_count() else "cpu"
    if wanted == "cpu":
        return "cpu"
    match = _CUDA.match(wanted)
    if match is None:
        raise DeviceError(f"Unknown device {text!r}; use {DEVICE_CHOICES}.")
    count = cuda_count()
    if count == 0:
        raise DeviceError(f"Device {text!r} was asked for but this machine has no CUDA GPU.")
    number = int(match.group(1) or 0)
    if number >= count:
        raise DeviceError(f"Device {text!r} does not exist; this machine has {count} GPU(s).")
    return wanted


def check_device_text(text: str | None) -> str:
    """'auto' | 'cpu' | 'cuda' | 'cuda:N' checked for form only, without torch: for a Ray
    build, whose cluster (index/ray_engine.py), not this process, says which GPUs exist."""
    wanted = (text or "auto").strip().lower()
    if wanted not in ("auto", "cpu") and _CUDA.match(wanted) is None:
        raise DeviceError(f"Unknown device {text!r}; use {DEVICE_CHOICES}.")
    return wanted


def inference_dtype(device: str) -> Any:
    """float32 on CPU; bfloat16 on a CUDA GPU that supports it, else float16."""
    import torch

    if not device.startswith("cuda"):
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def place(embedder: Any, device: str, precision: str = "auto") -> Any:
    """Move `embedder` to `device` (resolved) to run at `precision` (see autocast); embedders
    without torch weights stay as they are."""
    mover = getattr(embedder, "to_device", None)
    if mover is not None:
        mover(device)
        embedder.precision = precision
    return embedder


def module_device(module: Any) -> str:
    """The device of a torch module's first parameter ('cpu' for a module without any)."""
    for parameter in module.parameters():
        return str(parameter.device)
    return "cpu"


_COPIES: dict[tuple[int, str], Any] = {}
_ORIGINS: dict[int, Any] = {}


def shared_on(module: Any, device: str) -> Any:
    """A module shared by several embedders, on `device`: itself on CPU, else one cached copy
    per device, so moving one embedder to a GPU never moves another's weights under it."""
    module = shared_origin(module)
    if device == "cpu":
        return module
    key = (id(module), device)
    if key not in _COPIES:
        import copy

        _COPIES[key] = copy.deepcopy(module).to(device)
        _ORIGINS[id(_COPIES[key])] = module
    return _COPIES[key]


def shared_origin(module: Any) -> Any:
    """The shared CPU module a per-device copy was made from (the module itself otherwise)."""
    return _ORIGINS.get(id(module), module)


def is_shared(module: Any, shared: Any) -> bool:
    """Whether `module` is `shared` or one of its per-device copies."""
    return shared_origin(module) is shared


def autocast(device: str, precision: str = "auto") -> Any:
    """Mixed precision on CUDA (bf16 where supported, else fp16); a no-op on CPU or with
    precision "fp32" (Settings.precision, MEDHEB_PRECISION, set on each embedder by place)."""
    import contextlib

    import torch

    if not device.startswith("cuda") or precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=inference_dtype(device))


@contextmanager
def intra_op_threads(count: int) -> Iterator[None]:
    """Run the block with `count` torch intra-op threads in this thread, then restore the count.

    One query is a batch of one: a second thread saves little on an idle machine, and on a busy
    one (concurrent requests, a job on the other core) OpenMP threads wait on each other and the
    same encode takes several times longer (bench/bench_search_logic.py measures both). A count
    below 1 leaves torch's own setting alone, and so does a process that has not imported torch:
    its embedders have no torch weights (the oracle), so there are no threads to set.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    if count < 1 or count == before:
        yield
        return
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)

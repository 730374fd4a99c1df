"""Adapters that turn data a lab has on disk, in its real published layout, into Studies.

Each loader names the missing file or column when a folder is not in the expected layout.
Modules load lazily, so importing one adapter does not pull in the others' dependencies.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LOADERS = {
    "load_nih": "nih",
    "load_chexpert": "chexpert",
    "load_mimic": "mimic",
    "load_medmnist": "medmnist",
    "load_iu_reports": "iu_xray",
    "load_pubmedqa": "pubmedqa",
    "load_dicom_folder": "dicom_folder",
}

__all__ = list(_LOADERS)


def __getattr__(name: str) -> Any:
    if name in _LOADERS:
        return getattr(import_module(f"{__name__}.{_LOADERS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

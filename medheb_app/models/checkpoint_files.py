"""What every checkpoint folder of this project shares, read without torch: a config.json beside
a weights file, and one digest over the weight files. dual_lite_checkpoint.py and
medemb_lite_checkpoint.py keep only what differs (their file names, what else they check).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

CONFIG_FILE = "config.json"


def read_config_beside(folder: Path | str, kind: str, weights_file: str, advice: str = "") -> dict:
    """config.json of a `kind` checkpoint folder, which must also hold `weights_file`; a
    FileNotFoundError that names both files (and `advice`, a sentence) when it is not one."""
    folder = Path(folder)
    path = folder / CONFIG_FILE
    if not path.is_file() or not (folder / weights_file).is_file():
        hint = f"; {advice}" if advice else ""
        raise FileNotFoundError(
            f"{folder} is not a {kind} checkpoint (needs {CONFIG_FILE} and {weights_file}){hint}."
        )
    return json.loads(path.read_text())


def weights_sha256(folder: Path, paths: Iterable[Path]) -> str:
    """One digest over the files' paths (relative to `folder`) and bytes, in the given order,
    so any weight change, rename or added file shows."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.relative_to(folder).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()

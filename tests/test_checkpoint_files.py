"""What dual-lite and medemb-lite checkpoint folders share (models/checkpoint_files.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from medheb_app.models import dual_lite_checkpoint, medemb_lite_checkpoint
from medheb_app.models.checkpoint_files import read_config_beside, weights_sha256


def test_a_folder_without_its_weights_file_is_not_a_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"tag": "x"}))
    with pytest.raises(FileNotFoundError) as dual:
        dual_lite_checkpoint.read_checkpoint_config(tmp_path)
    assert str(dual.value) == (
        f"{tmp_path} is not a dual-lite checkpoint (needs config.json and heads.safetensors)."
    )
    with pytest.raises(FileNotFoundError) as medemb:
        medemb_lite_checkpoint.read_checkpoint_config(tmp_path)
    assert str(medemb.value) == (
        f"{tmp_path} is not a medemb-lite checkpoint (needs config.json and "
        "projection.safetensors); train one with `python -m medheb_app train medemb`."
    )


def test_the_config_is_read_and_medemb_lite_checks_its_name(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"name": "dual-lite", "tag": "t"}))
    (tmp_path / "heads.safetensors").write_bytes(b"h")
    (tmp_path / "projection.safetensors").write_bytes(b"p")
    assert read_config_beside(tmp_path, "dual-lite", "heads.safetensors")["tag"] == "t"
    assert dual_lite_checkpoint.read_checkpoint_config(tmp_path)["tag"] == "t"
    with pytest.raises(FileNotFoundError, match="holds a 'dual-lite' checkpoint"):
        medemb_lite_checkpoint.read_checkpoint_config(tmp_path)


def test_the_digest_covers_names_and_bytes(tmp_path: Path) -> None:
    weights = tmp_path / "heads.safetensors"
    weights.write_bytes(b"one")
    first = weights_sha256(tmp_path, [weights])
    assert first == dual_lite_checkpoint.checkpoint_sha256(tmp_path)
    weights.write_bytes(b"two")
    assert weights_sha256(tmp_path, [weights]) != first
    renamed = tmp_path / "other.safetensors"
    renamed.write_bytes(b"one")
    assert weights_sha256(tmp_path, [renamed]) != first

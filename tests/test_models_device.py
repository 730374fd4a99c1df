"""--device / MEDHEB_DEVICE: resolution, and every embedder's weights on the asked device.

No GPU here, so placement is checked on torch's "meta" device: every parameter of the model
(heads, towers, backbone, projection) must move, and the CPU towers other embedders share
must not.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from medheb_app.cli import main
from medheb_app.models import device as device_module
from medheb_app.models.device import DeviceError, resolve_device
from medheb_app.models.registry import load_embedder
from medheb_app.settings import PROJECT_ROOT, Settings


def devices(module: torch.nn.Module) -> set[str]:
    return {p.device.type for p in module.parameters()}


def test_resolution_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_module, "cuda_count", lambda: 0)
    assert resolve_device("auto") == "cpu" and resolve_device(None) == "cpu"
    assert resolve_device(" CPU ") == "cpu"
    with pytest.raises(DeviceError, match="no CUDA GPU"):
        resolve_device("cuda")
    with pytest.raises(DeviceError, match="Unknown device 'tpu'"):
        resolve_device("tpu")


def test_resolution_with_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device_module, "cuda_count", lambda: 2)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(DeviceError, match="has 2 GPU"):
        resolve_device("cuda:2")


def test_settings_and_cli_honour_the_device(settings: Settings, monkeypatch, capsys) -> None:
    monkeypatch.setattr(device_module, "cuda_count", lambda: 0)
    monkeypatch.setenv("MEDHEB_DEVICE", "cuda")
    assert Settings.from_env().device == "cuda"
    with pytest.raises(DeviceError, match="no CUDA GPU"):
        load_embedder("random", Settings.from_env())
    code = main(["index", "build", "--source", "phantom:10", "--model", "random",
                 "--name", "x", "--device", "cuda:0"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1] == (
        "error: Device 'cuda:0' was asked for but this machine has no CUDA GPU."
    )


def test_dual_lite_moves_heads_and_towers_but_not_the_shared_ones() -> None:
    from medheb_app.models.dual_lite import DualLiteEmbedder, shared_towers

    embedder = DualLiteEmbedder.from_checkpoint(PROJECT_ROOT / "models" / "dual-lite" / "report")
    cpu_vector = embedder.encode(["pleural effusion"])
    moved = DualLiteEmbedder.from_checkpoint(PROJECT_ROOT / "models" / "dual-lite" / "report")
    moved.to_device("meta")
    assert moved.device == "meta"
    for module in (moved.heads, moved.image_tower, moved.text_tower):
        assert devices(module) == {"meta"}
    shared_image, shared_text = shared_towers()
    assert devices(shared_image) == {"cpu"} and devices(shared_text) == {"cpu"}
    # the CPU embedder still works, unchanged, next to the moved one
    np.testing.assert_allclose(embedder.encode(["pleural effusion"]), cpu_vector, atol=1e-6)


def test_medemb_lite_moves_backbone_projection_and_tower() -> None:
    from medheb_app.models.medemb_lite import MedEmbLiteEmbedder, shared_image_tower

    moved = MedEmbLiteEmbedder.from_checkpoint(PROJECT_ROOT / "models" / "medemb-lite")
    moved.to_device("meta")
    assert devices(moved) == {"meta"} and moved.device == "meta"
    assert devices(moved.image_tower) == {"meta"}
    assert devices(shared_image_tower()) == {"cpu"}


def test_open_clip_and_mllm_move(tmp_path) -> None:
    import open_clip

    from medheb_app.models.mllm import MLLMEmbedder
    from medheb_app.models.open_clip_embedder import OpenClipEmbedder
    from tests.mllm_tiny import build_tiny_qwen2_vl
    from tests.test_models_open_clip import TINY

    config = tmp_path / "tiny-clip-dev.json"
    config.write_text(json.dumps(TINY))
    torch.save(open_clip.CLIP(**TINY).state_dict(), tmp_path / "w.pt")
    clip = OpenClipEmbedder(f"open_clip:{config}@{tmp_path / 'w.pt'}").to_device("meta")
    assert devices(clip.model) == {"meta"} and clip.device == "meta"
    mllm = MLLMEmbedder.from_folder(build_tiny_qwen2_vl(tmp_path / "qwen"))
    mllm.to_device("meta")
    assert devices(mllm.backbone) == {"meta"} and mllm.device == "meta"


def test_gpu_check_says_there_is_no_gpu_and_exits_0(monkeypatch, capsys) -> None:
    import sys

    from bench import gpu_check

    monkeypatch.setattr(device_module, "cuda_count", lambda: 0)
    monkeypatch.setattr(sys, "argv", ["gpu_check.py"])
    assert gpu_check.main() == 0
    assert "No CUDA GPU on this machine" in capsys.readouterr().out


TORCH_FREE_LOAD = """
import json, sys
from medheb_app.cli import main
from medheb_app.models.registry import load_embedder
from medheb_app.search import search
from medheb_app.settings import Settings
settings = Settings.from_env()
for spec in ("oracle", "random"):
    for device in ("auto", "cpu"):
        load_embedder(spec, settings, device).encode(["pleural effusion"])
for ranking in ("similarity", "logic"):
    answer = search("pleural effusion and no cardiomegaly", model_spec="oracle", index="tiny",
                    settings=settings, ranking=ranking)
    assert answer.results and answer.ranking == ranking, (ranking, answer.ranking)
assert main(["index", "build", "--source", "phantom:12", "--model", "random", "--name", "r"]) == 0
tasks, out = sys.argv[1], sys.argv[2]
assert main(["bench", "run", "--suite", tasks, "--model", "oracle", "--model", "random",
             "--out", out]) == 0
print(json.dumps({"torch": "torch" in sys.modules,
                  "device": json.load(open(out + "/summary.json"))["settings"]["device"]}))
"""


def test_the_torch_free_baselines_load_search_build_and_run_without_importing_torch(
    settings: Settings, tmp_path
) -> None:
    """A process that uses only oracle / random never imports torch: not to count GPUs for
    "auto" (model load, index build, a run's recorded device) nor to set a query's intra-op
    threads (3-7 s of every such start); a GPU asked for is still checked
    (test_settings_and_cli_honour_the_device)."""
    import json
    import os
    import subprocess
    import sys

    from medheb_app.index.build import build_from_source
    from tests.test_tasks_manifest import write_fixture

    build_from_source("phantom:40", "oracle", "tiny", settings)
    write_fixture(tmp_path / "tasks")
    done = subprocess.run(
        [sys.executable, "-c", TORCH_FREE_LOAD, str(tmp_path / "tasks"), str(tmp_path / "run")],
        capture_output=True, text=True, timeout=180, cwd=PROJECT_ROOT,
        env={**os.environ, "DATA_DIR": str(settings.data_dir)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"torch": False, "device": "cpu"}

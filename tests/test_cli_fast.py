"""`index list`, `index info`, `bench list` and `--help` never import torch (issue 23 item 7);
the store-only commands, which call the tabs' facades, never import the analysis stack.

Importing torch costs 5-17 s and ~600 MB on the shared machine; these commands only read
catalog and manifest files. Each runs in a fresh interpreter (a test process has long since
imported torch), which then reports the heavy modules it loaded. Timings are measured by
bench/bench_cli.py (BENCHMARKS.md), not here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from PIL import Image

from medheb_app.index.build import build_from_source
from medheb_app.settings import PROJECT_ROOT

HEAVY = ("torch", "torchvision", "open_clip", "transformers", "timm", "peft", "ray", "gradio")
# what services.studies imports on first use only (study analysis, export, sizing: ~2.5 s)
ANALYSIS = ("pandas", "plotly", "scipy")
PROBE = """
import json, sys
from medheb_app.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
print(json.dumps({"code": code, "heavy": [m for m in HEAVY if m in sys.modules],
                  "faiss": "faiss" in sys.modules,
                  "analysis": [m for m in ANALYSIS if m in sys.modules]}), file=sys.stderr)
"""


def run_fresh(settings, *argv: str) -> tuple[dict, str]:
    env = {**os.environ, "DATA_DIR": str(settings.data_dir), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {HEAVY!r}\nANALYSIS = {ANALYSIS!r}\n{PROBE}", *argv],
        capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, timeout=120,
    )  # fmt: skip
    return json.loads(done.stderr.strip().splitlines()[-1]), done.stdout


def _pngs(folder, n: int, shade: int):
    folder.mkdir()
    for i in range(n):
        Image.fromarray(np.full((8, 8), shade + i, np.uint8)).save(folder / f"{i}.png")
    return folder


@pytest.fixture
def built(settings, tmp_path):
    """One finished index and one interrupted build, so list and info read both kinds."""
    build_from_source(f"folder:{_pngs(tmp_path / 'a', 4, 0)}", "random", "lab", settings)
    stop = threading.Event()
    stop.set()
    with pytest.raises(InterruptedError):
        build_from_source(f"folder:{_pngs(tmp_path / 'b', 4, 100)}", "random", "half",
                          settings, shard_size=2, stop=stop)  # fmt: skip
    return settings


@pytest.mark.parametrize(
    "argv",
    [("index", "list"), ("index", "list", "--json"), ("index", "info", "lab"),
     ("index", "info", "half"), ("bench", "list"), ("--help",)],
)  # fmt: skip
def test_light_commands_never_import_torch(built, argv) -> None:
    probe, out = run_fresh(built, *argv)
    assert probe["code"] in (0, None), out
    assert probe["heavy"] == [], f"{' '.join(argv)} imported {probe['heavy']}"
    if argv[0] == "index":
        assert not probe["faiss"]  # catalog and manifest files only
        assert "lab" in out or "half" in out


@pytest.mark.parametrize(
    "argv",
    [("study", "list"), ("study", "list", "--json"), ("token", "list"), ("audit", "export"),
     ("study", "--help")],
)  # fmt: skip
def test_store_commands_through_the_facades_stay_light(settings, argv) -> None:
    """The study, token and audit commands build their facades on the store alone: no torch,
    no FAISS, and none of the analysis stack the studies facade defers to its first use."""
    probe, out = run_fresh(settings, *argv)
    assert probe["code"] in (0, None), out
    assert (probe["heavy"], probe["faiss"], probe["analysis"]) == ([], False, []), argv
    if argv[:2] == ("study", "list"):
        assert "No studies yet" in out or '"studies": []' in out

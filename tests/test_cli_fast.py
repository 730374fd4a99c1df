"""`index list`, `index info`, `bench list` and `--help` never import torch (issue 23 item 7);
the store-only commands, which call the tabs' facades, never import the analysis stack.

Importing torch costs 5-17 s and ~600 MB on the shared machine; these commands only read
catalog and manifest files. They run in a fresh interpreter (a test process has long since
imported torch), one for each test's commands, which reports after each command the heavy
modules loaded so far. Timings are measured by bench/bench_cli.py (BENCHMARKS.md), not here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medheb_app.index.build import build_from_source
from medheb_app.settings import PROJECT_ROOT, Settings

HEAVY = ("torch", "torchvision", "open_clip", "transformers", "timm", "peft", "ray", "gradio")
# what services.studies imports on first use only (study analysis, export, sizing: ~2.5 s)
ANALYSIS = ("pandas", "plotly", "scipy")
LIGHT = [("index", "list"), ("index", "list", "--json"), ("index", "info", "lab"),
         ("index", "info", "half"), ("bench", "list"), ("--help",)]  # fmt: skip
STORE = [("study", "list"), ("study", "list", "--json"), ("token", "list"), ("audit", "export"),
         ("study", "--help")]  # fmt: skip
PROBE = """
import contextlib, io, json, sys
from medheb_app.cli import main
probes = []
for argv in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = main(argv)
        except SystemExit as exit:
            code = exit.code
    probes.append({"code": code, "out": out.getvalue(),
                   "heavy": [m for m in HEAVY if m in sys.modules],
                   "faiss": "faiss" in sys.modules,
                   "analysis": [m for m in ANALYSIS if m in sys.modules]})
print(json.dumps(probes), file=sys.stderr)
"""


def run_fresh(data_dir: Path, commands: list[tuple[str, ...]]) -> dict[tuple[str, ...], dict]:
    """Run `commands` one after another in ONE fresh interpreter (a test process has long since
    imported torch); after each, what it printed and the heavy modules loaded so far. Modules
    are only ever added, so a command that loads one is caught at that command, and one
    interpreter costs ~0.6 CPU-seconds where one per command cost that per command."""
    env = {**os.environ, "DATA_DIR": str(data_dir), "OMP_NUM_THREADS": "1"}
    script = f"HEAVY = {HEAVY!r}\nANALYSIS = {ANALYSIS!r}\n{PROBE}"
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(commands)],
        capture_output=True, text=True, env=env, cwd=PROJECT_ROOT, timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    probes = json.loads(done.stderr.strip().splitlines()[-1])
    return dict(zip(commands, probes, strict=True))


def _pngs(folder: Path, n: int, shade: int) -> Path:
    folder.mkdir()
    for i in range(n):
        Image.fromarray(np.full((8, 8), shade + i, np.uint8)).save(folder / f"{i}.png")
    return folder


@pytest.fixture(scope="module")
def light_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, ...], dict]:
    """The LIGHT commands over one finished index and one interrupted build, so list and info
    read both kinds (the commands only read them: one data folder serves them all)."""
    root = tmp_path_factory.mktemp("light")
    settings = Settings.from_env(data_dir=root / "data")
    build_from_source(f"folder:{_pngs(root / 'a', 4, 0)}", "random", "lab", settings)
    stop = threading.Event()
    stop.set()
    with pytest.raises(InterruptedError):
        build_from_source(f"folder:{_pngs(root / 'b', 4, 100)}", "random", "half",
                          settings, shard_size=2, stop=stop)  # fmt: skip
    return run_fresh(settings.data_dir, LIGHT)


@pytest.fixture(scope="module")
def store_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, ...], dict]:
    """The STORE commands in a fresh, empty data folder."""
    return run_fresh(tmp_path_factory.mktemp("store") / "data", STORE)


@pytest.mark.parametrize("argv", LIGHT)
def test_light_commands_never_import_torch(light_runs, argv) -> None:
    probe = light_runs[argv]
    out = probe["out"]
    assert probe["code"] in (0, None), out
    assert probe["heavy"] == [], f"{' '.join(argv)} imported {probe['heavy']}"
    if argv[0] == "index":
        assert not probe["faiss"]  # catalog and manifest files only
        assert "lab" in out or "half" in out


@pytest.mark.parametrize("argv", STORE)
def test_store_commands_through_the_facades_stay_light(store_runs, argv) -> None:
    """The study, token and audit commands build their facades on the store alone: no torch,
    no FAISS, and none of the analysis stack the studies facade defers to its first use."""
    probe = store_runs[argv]
    out = probe["out"]
    assert probe["code"] in (0, None), out
    assert (probe["heavy"], probe["faiss"], probe["analysis"]) == ([], False, []), argv
    if argv[:2] == ("study", "list"):
        assert "No studies yet" in out or '"studies": []' in out

"""`index build` defaults a lab can trust (issue 23 item 6): no silent replace, one build per
name (a stale lock is taken over), the model spec with its tag, interrupted builds listed with
how to resume, and tiny indices / FAISS trouble said in one sentence."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medheb_app.cli import main
from medheb_app.index.build import IndexExistsError, build_from_source
from medheb_app.index.catalog import list_indices, load_index
from medheb_app.index.faiss_index import IndexBuildError, VectorIndex
from medheb_app.index.lock import IndexLockedError, build_lock, lock_file
from medheb_app.models import registry
from medheb_app.settings import Settings
from medheb_app.store.owners import process_owner


def pngs(root: Path, n: int) -> Path:
    """`n` small greyscale PNGs (real files, decoded by the folder source)."""
    rng = np.random.default_rng(1)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (16, 16), dtype=np.uint8)).save(root / f"{i:03d}.png")
    return root


def build(source: Path, name: str, *extra: str) -> list[str]:
    return ["index", "build", "--source", f"folder:{source}", "--model", "random",
            "--name", name, *extra]  # fmt: skip


def test_building_over_an_existing_name_needs_replace(settings, tmp_path, capsys) -> None:
    source = pngs(tmp_path / "p", 5)
    assert main(build(source, "lab")) == 0
    first = list_indices(settings)[0]["created"]
    capsys.readouterr()
    assert main(build(source, "lab")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: Index 'lab' already exists for random (5 items from folder:")
    assert "--replace" in err[-1] and "Traceback" not in "\n".join(err)
    assert list_indices(settings)[0]["created"] == first  # untouched
    assert main(build(source, "lab", "--replace")) == 0
    # the admin's job path is the same builder: the same refusal without params["replace"]
    with pytest.raises(IndexExistsError, match="pass --replace"):
        build_from_source(f"folder:{source}", "random", "lab", settings)


def test_a_second_build_of_the_same_name_is_refused_with_who_holds_it(
    settings, tmp_path, capsys
) -> None:
    source = pngs(tmp_path / "p", 3)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        path = lock_file(settings, "lab")
        path.parent.mkdir(parents=True)
        owner = process_owner(holder.pid)
        path.write_text(json.dumps({
            "name": "lab", "pid": holder.pid, "host": owner.rsplit(":", 2)[0], "owner": owner,
            "since": "2026-12-01T23:00:00+00:00", "token": "other",
        }))  # fmt: skip
        assert main(build(source, "lab")) == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert f"process {holder.pid} on {owner.rsplit(':', 2)[0]}" in err
        assert "since 2026-12-01T23:00:00+00:00" in err and "being built" in err
        assert path.is_file() and list_indices(settings) == []  # the holder's lock stays
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_refuses_another_thread_of_the_same_process(settings) -> None:
    """The server runs admin jobs in threads: two builds of one name there are refused too."""
    entered, release, errors = threading.Event(), threading.Event(), []

    def first() -> None:
        with build_lock(settings, "lab"):
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=first)
    thread.start()
    assert entered.wait(10)
    try:
        with (
            pytest.raises(IndexLockedError, match=f"process {os.getpid()}"),
            build_lock(settings, "lab"),
        ):
            errors.append("entered")
    finally:
        release.set()
        thread.join()
    assert errors == [] and not lock_file(settings, "lab").exists()
    with build_lock(settings, "lab"), build_lock(settings, "lab"):  # re-entrant in a thread
        assert lock_file(settings, "lab").is_file()
    assert not lock_file(settings, "lab").exists()


def _dead_lock(settings: Settings, name: str) -> int:
    """A lock file left by a process that is gone (as after kill -9)."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    path = lock_file(settings, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    owner = process_owner().rsplit(":", 2)[0] + f":{gone.pid}:12345.000"
    path.write_text(json.dumps({
        "name": name, "pid": gone.pid, "host": owner.split(":")[0], "owner": owner,
        "since": "2026-12-01T22:00:00+00:00", "token": "dead",
    }))  # fmt: skip
    return gone.pid


def test_a_lock_left_by_a_killed_build_is_taken_over_with_a_note(
    settings, tmp_path, capsys
) -> None:
    source = pngs(tmp_path / "p", 3)
    pid = _dead_lock(settings, "lab")
    assert main(build(source, "lab")) == 0
    out = capsys.readouterr().out
    assert f"Note: taking over the build lock of 'lab' left by process {pid}" in out
    assert "no longer running" in out
    assert not lock_file(settings, "lab").exists()  # released after the build
    assert list_indices(settings)[0]["count"] == 3


class TaggedRandom:
    """The random embedder under the card name a tagged checkpoint has ("dual-lite" for
    dual-lite@label-aware), so the test needs no torch model to show which name is printed."""

    def __init__(self, settings: Settings) -> None:
        self.inner = registry.load_embedder("random", settings)
        self.card = replace(self.inner.card, name="dual-lite", version="label-aware-test")

    def encode(self, items):
        return self.inner.encode(items)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_the_model_spec_is_printed_with_its_tag(settings, tmp_path, capsys, monkeypatch):
    original = registry.load_embedder

    def load(spec, settings, device=None):
        if spec == "dual-lite@label-aware":
            return TaggedRandom(settings)
        return original(spec, settings, device=device)

    monkeypatch.setattr(registry, "load_embedder", load)
    source = pngs(tmp_path / "p", 4)
    command = build(source, "lab")
    command[command.index("random")] = "dual-lite@label-aware"
    assert main(command) == 0
    summary = capsys.readouterr().out.splitlines()[0]
    assert summary.startswith("Index lab (dual-lite@label-aware): 4 items")
    assert main(["index", "list"]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[:2] == ["lab", "dual-lite@label-aware"]
    assert main(["index", "info", "lab"]) == 0
    assert "  model dual-lite@label-aware (" in capsys.readouterr().out
    assert main(["index", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["model_spec"] == "dual-lite@label-aware"


def test_an_interrupted_build_is_listed_with_the_command_that_resumes_it(
    settings, tmp_path, capsys
) -> None:
    source = pngs(tmp_path / "p", 9)
    stop = threading.Event()

    def progress(fraction: float, message: str) -> None:
        if message.startswith("embedded"):
            stop.set()  # after the first committed shard, as a kill would

    with pytest.raises(InterruptedError):
        build_from_source(f"folder:{source}", "random", "lab", settings, shard_size=3,
                          progress=progress, stop=stop)  # fmt: skip
    _dead_lock(settings, "lab")  # kill -9 also leaves its lock behind
    assert main(["index", "list"]) == 0
    out = capsys.readouterr().out
    assert "No index has been built yet" not in out
    assert "lab (random): incomplete, 3 of 9 items committed" in out
    resume, footnote = (line.strip() for line in out.strip().splitlines()[-2:])
    assert resume.startswith("python -m medheb_app index build --source folder:PATH ")
    assert "--shard-size 3" in resume and "--name lab" in resume
    assert "PATH: the source path you built from" in footnote  # a folder path is never stored
    assert main(["index", "info", "lab"]) == 0
    assert "incomplete, 3 of 9 items committed" in capsys.readouterr().out
    filled = resume.replace("folder:PATH", f"folder:{source}")
    assert main(shlex.split(filled)[3:]) == 0  # the printed command, its PATH filled, resumes
    assert "Embedded 6, reused 3" in capsys.readouterr().out
    assert main(["index", "list"]) == 0
    out = capsys.readouterr().out
    assert "incomplete" not in out and out.splitlines()[1].split()[:2] == ["lab", "random"]


def test_a_tiny_ivfpq_index_is_built_exact_with_a_note(settings, tmp_path, capsys) -> None:
    """IVF-PQ on one image died with a raw FAISS RuntimeError (exit 1)."""
    source = pngs(tmp_path / "one", 1)
    assert main(build(source, "one", "--kind", "ivfpq")) == 0
    captured = capsys.readouterr()
    assert "Index one (random): 1 items, exact" in captured.out
    assert (
        "Note: IVF-PQ needs at least 624 items to train its quantisers; built an exact "
        "index over 1 item instead"
    ) in captured.out
    loaded = load_index("one", registry.load_embedder("random", settings), settings)
    assert loaded.index.kind == "exact" and loaded.info["requested_kind"] == "ivfpq"
    assert main(["index", "info", "one"]) == 0
    info = capsys.readouterr().out
    assert "note: IVF-PQ needs at least 624 items" in info
    assert ": 1 items, exact, " in info and "{}" not in info  # no empty parameter dict
    source = pngs(tmp_path / "few", 40)
    assert main(build(source, "few", "--kind", "ivf")) == 0
    assert "IVF needs at least 78 items" in capsys.readouterr().out


def _unit(n: int, dims: int = 32) -> np.ndarray:
    x = np.random.default_rng(0).normal(size=(n, dims)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_faiss_errors_and_warnings_are_one_sentence(capfd) -> None:
    x = _unit(300)
    ids = [f"s{i}" for i in range(300)]
    index = VectorIndex.build_ivfpq(lambda: iter([x]), ids, 32, "fp", nbits=8)
    err = capfd.readouterr().err
    assert "WARNING clustering" not in err and "please provide" not in err  # was 8 lines
    assert len(index.notes) == 1
    assert index.notes[0].startswith(
        "FAISS trained the IVF-PQ index over 300 items on fewer points than it advises"
    )
    assert "please provide at least 9984 training points" in index.notes[0]
    with pytest.raises(IndexBuildError) as caught:
        VectorIndex.build_ivfpq(lambda: iter([x[:1]]), ["a"], 32, "fp", nbits=8)
    message = str(caught.value)
    assert message == (
        "FAISS could not build the IVF-PQ index over 1 item: number of training points (1) "
        "should be at least as large as number of clusters (256)."
    )
    assert isinstance(caught.value, ValueError)  # the CLI says it in one line, exit 2
    with pytest.raises(IndexBuildError, match=r"^FAISS could not build the IVF index over 5 "):
        VectorIndex.build(x[:5], ids[:5], kind="ivf", nlist=8)

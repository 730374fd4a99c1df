"""A start-up phase loads without full cycle collections, still frees young cycles, freezes
what it loaded and leaves the collector's thresholds as it found them."""

from __future__ import annotations

import json
import subprocess
import sys

from medheb_app.settings import PROJECT_ROOT

# In a fresh process: a test worker's own collector is tuned (tests/conftest.py).
IN_A_FRESH_PROCESS = """
import gc, json, sys, weakref
from medheb_app.startup_heap import NO_FULL_COLLECTIONS, startup_phase

full = []
gc.callbacks.append(lambda phase, info: phase == "stop" and full.append(info["generation"] == 2))

def load(n):  # long-lived objects, as imports and model weights are
    return [{"row": i, "cells": [i, str(i)]} for i in range(n)]

class Node:
    pass

mode = sys.argv[1]
before = gc.get_threshold()
kept, inside, dropped_cycle_freed = None, None, None
if mode == "phase":
    with startup_phase():
        inside = gc.get_threshold()
        kept = load(300_000)
        node = Node(); node.self = node; alive = weakref.ref(node); del node
        load(20_000)  # enough allocations for a young collection to run
        dropped_cycle_freed = alive() is None
else:
    kept = load(300_000)
print(json.dumps({
    "full_collections": sum(full), "before": before, "after": gc.get_threshold(),
    "inside": inside, "frozen": gc.get_freeze_count(), "young_cycle_freed": dropped_cycle_freed,
    "never": NO_FULL_COLLECTIONS,
}))
"""


def run(mode: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", IN_A_FRESH_PROCESS, mode],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def test_a_start_up_phase_makes_no_full_collection_and_freezes_what_it_loaded() -> None:
    plain, phased = run("plain"), run("phase")
    assert plain["full_collections"] >= 1 and plain["frozen"] == 0  # what the phase avoids
    assert phased["full_collections"] == 0
    assert phased["inside"][:2] == phased["before"][:2]
    assert phased["inside"][2] == phased["never"]
    assert phased["after"] == phased["before"]  # the collector as it was, for what follows
    assert phased["frozen"] >= 300_000  # the loaded rows are out of later collections
    assert phased["young_cycle_freed"] is True  # young generations still collect

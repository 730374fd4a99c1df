"""Importing medheb_app keeps gradio from rewriting its type stubs, and gradio still works."""

from __future__ import annotations

import json
import subprocess
import sys

from medheb_app.settings import PROJECT_ROOT

IN_A_FRESH_PROCESS = """
import json, sys
import medheb_app
from medheb_app.gradio_stubs import _StubWriterRemover, skip_stub_writer

def hooks():
    return sum(isinstance(finder, _StubWriterRemover) for finder in sys.meta_path)
skip_stub_writer()
skip_stub_writer()
hooks_before = hooks()
import gradio as gr
hooks_after = hooks()
import gradio.blocks_events as blocks_events
import gradio.component_meta as meta

written = []
def record(component_class, *args):
    written.append(component_class.__name__)
meta_writer, events_writer = meta.create_or_modify_pyi, blocks_events.create_or_modify_pyi
meta.create_or_modify_pyi = record  # a class defined from here on would call it

class Flagged(gr.Textbox):
    pass

with gr.Blocks() as demo:
    box = gr.Textbox(value="kept")
print(json.dumps({
    "writer": meta_writer.__name__, "events_writer": events_writer.__name__,
    "written": written, "value": box.value, "textbox_events": "change" in dir(gr.Textbox),
    "hooks": [hooks_before, hooks_after],
}))
"""


def test_gradio_defines_components_without_its_stub_writer() -> None:
    done = subprocess.run(
        [sys.executable, "-c", IN_A_FRESH_PROCESS],
        cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # the stub writer was blanked before gradio's own classes (and blocks_events' import of it)
    assert result["writer"] == "_no_stub" and result["events_writer"] == "_no_stub"
    # the hook replaced a function, not gradio's class machinery: a subclass still reaches
    # the module's writer, components still build, their events are still defined
    assert result["written"] == ["Flagged"]
    assert result["value"] == "kept" and result["textbox_events"]
    # installed once however often it is asked, and gone once gradio's module was found
    assert result["hooks"] == [1, 0]


def test_the_hook_answers_only_for_gradios_module() -> None:
    from medheb_app.gradio_stubs import _StubWriterRemover

    assert _StubWriterRemover().find_spec("gradio.blocks", None) is None
    assert _StubWriterRemover().find_spec("json", None) is None

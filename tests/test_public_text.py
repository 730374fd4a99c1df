"""One scrubber for what a person reads of an error (the web page and the HTTP API share it)."""

from __future__ import annotations

import pytest

from medheb_app.api.problems import public_detail
from medheb_app.models.open_clip_embedder import OpenClipSpecError, parse_spec
from medheb_app.models.registry import UnknownModelError, load_embedder
from medheb_app.public_text import public_message
from medheb_app.settings import Settings
from medheb_app.ui.search_upload import GENERIC_FAILURE, user_message


def test_paths_and_class_names_are_taken_out() -> None:
    text = "ValueError: /srv/app/data/runtime/x.png is corrupt (C:\\data\\a.dcm)"
    assert public_message(text, "fallback") == "(a server file) is corrupt ((a server file))"


def test_object_reprs_are_taken_out_wherever_the_message_came_from() -> None:
    """A decoder's `<_io.BytesIO object at 0x...>` (adversarial pass at 994e87c) names a class
    and a live address; the page, the API and job logs all read through public_message."""
    text = "cannot identify image file <_io.BytesIO object at 0x7fab60eecc70>"
    assert public_message(text, "fallback") == "cannot identify image file the data"
    assert public_message("got <class 'numpy.ndarray'>", "fallback") == "got the data"
    assert user_message(OSError(text)) == public_detail(OSError(text))
    assert "0x" not in public_detail(OSError(text))


def test_a_key_error_reads_as_its_key_and_an_empty_message_as_the_fallback() -> None:
    assert public_message(KeyError("no run 7"), "fallback") == "no run 7"
    assert public_message(RuntimeError("RuntimeError:"), "fallback") == "fallback"
    assert public_message("one/segment stays", "fallback") == "one/segment stays"


def test_the_page_and_the_api_say_the_same_with_their_own_fallbacks() -> None:
    error = FileNotFoundError("/home/user/app/models/x.safetensors not found")
    assert user_message(error) == public_detail(error) == "(a server file) not found"
    assert user_message(ValueError("")) == GENERIC_FAILURE
    assert public_detail(ValueError("")) == "The request could not be completed."


def test_the_model_resolvers_spec_placeholders_survive_the_scrubber(tmp_path) -> None:
    """Their example paths read as server files and were scrubbed to 'open_cli(a server
    file)'; the placeholders are written as <weights.pt> and <model folder> instead."""
    with pytest.raises(UnknownModelError) as caught:
        load_embedder("nosuch", Settings(data_dir=tmp_path))
    shown = public_message(caught.value, "fallback")
    assert shown == str(caught.value) and "a server file" not in shown
    assert "open_clip:<config.json>@<weights.pt>" in shown and "mllm:<model folder>" in shown
    with pytest.raises(OpenClipSpecError) as bad:
        parse_spec("open_clip:ViT-B-32")
    assert public_message(bad.value, "fallback") == str(bad.value)

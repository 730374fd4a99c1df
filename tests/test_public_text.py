"""One scrubber for what a person reads of an error (the web page and the HTTP API share it)."""

from __future__ import annotations

from medheb_app.api.problems import public_detail
from medheb_app.public_text import public_message
from medheb_app.ui.search_upload import GENERIC_FAILURE, user_message


def test_paths_and_class_names_are_taken_out() -> None:
    text = "ValueError: /srv/app/data/runtime/x.png is corrupt (C:\\data\\a.dcm)"
    assert public_message(text, "fallback") == "(a server file) is corrupt ((a server file))"


def test_a_key_error_reads_as_its_key_and_an_empty_message_as_the_fallback() -> None:
    assert public_message(KeyError("no run 7"), "fallback") == "no run 7"
    assert public_message(RuntimeError("RuntimeError:"), "fallback") == "fallback"
    assert public_message("one/segment stays", "fallback") == "one/segment stays"


def test_the_page_and_the_api_say_the_same_with_their_own_fallbacks() -> None:
    error = FileNotFoundError("/home/user/app/models/x.safetensors not found")
    assert user_message(error) == public_detail(error) == "(a server file) not found"
    assert user_message(ValueError("")) == GENERIC_FAILURE
    assert public_detail(ValueError("")) == "The request could not be completed."

"""What a person may read of an error: one line with server paths and exception class names
taken out. The web page (ui/search_upload.user_message) and the HTTP API
(api/problems.public_detail) both pass their messages through `public_message`, each with its
own fallback sentence for a message that is left empty. A leaf: it imports nothing from
medheb_app.
"""

from __future__ import annotations

import re

# Two or more path segments ("/srv/app/x.png", "C:\\data\\a.dcm"): a server file, never shown.
SERVER_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.@+-]+){2,}[\\/]?")
# A Python object's repr ("<_io.BytesIO object at 0x7fab...>"): a class name and an address.
OBJECT_REPR = re.compile(r"<[^<>]*\bat 0x[0-9a-fA-F]+>|<[^<>]*(?:object|class)[^<>]*>")
_CLASS = re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Exception|Warning)\b:?\s*")


def public_message(error: object, fallback: str) -> str:
    """`error`'s text (a KeyError's key, not its repr) without paths, object reprs or class
    names; `fallback` when nothing is left."""
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    text = OBJECT_REPR.sub("the data", text)
    text = SERVER_PATH.sub("(a server file)", text)
    return _CLASS.sub("", text).strip() or fallback

"""Training configs as dataclasses: help text on each field, parsed from CLI flags or JSON.

A field's `metadata={"help": ...}` becomes its --flag help; values given on the command line
override those in a --config JSON file, which override the dataclass defaults. Validation
lives in each dataclass's __post_init__, so every path gets the same checks.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _scalar_type(annotation: Any) -> type:
    """int | None -> int; Literal['a', 'b'] -> str; tuple[str, ...] -> str."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
        origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return type(typing.get_args(annotation)[0])
    if origin is tuple:
        return typing.get_args(annotation)[0]
    return annotation


def add_config_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One --flag per dataclass field (default None, so only flags given override)."""
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if not field.init:
            continue
        annotation = hints[field.name]
        kind = _scalar_type(annotation)
        help_text = field.metadata.get("help", "")
        default = field.default if field.default is not dataclasses.MISSING else None
        kwargs: dict[str, Any] = {"dest": field.name, "default": None}
        if kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = kind
            if typing.get_origin(annotation) is tuple:
                kwargs["nargs"] = "+"
            if typing.get_origin(annotation) is typing.Literal:
                kwargs["choices"] = typing.get_args(annotation)
        parser.add_argument(_flag(field.name), help=f"{help_text} (default: {default})", **kwargs)


def config_from_sources(
    cls: type[T], json_path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> T:
    """Defaults <- JSON file <- overrides (e.g. vars(args)); unknown JSON keys are an error."""
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    values: dict[str, Any] = {}
    if json_path is not None:
        path = Path(json_path)
        if not path.is_file():
            raise FileNotFoundError(f"Config file not found: {path}")
        try:
            loaded = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not valid JSON: {error}") from error
        if not isinstance(loaded, dict):
            raise ValueError(f"{path} must hold a JSON object of settings.")
        unknown = sorted(set(loaded) - names)
        if unknown:
            raise ValueError(
                f"Unknown setting(s) in {path}: {', '.join(unknown)}; "
                f"valid: {', '.join(sorted(names))}"
            )
        values.update(loaded)
    for key, value in (overrides or {}).items():
        if key in names and value is not None:
            values[key] = value
    hints = typing.get_type_hints(cls)
    for key, value in values.items():
        if typing.get_origin(hints[key]) is tuple and isinstance(value, list):
            values[key] = tuple(value)
    return cls(**values)


def config_to_dict(config: object) -> dict[str, Any]:
    """JSON-ready dict of a config dataclass (tuples become lists)."""
    return json.loads(json.dumps(dataclasses.asdict(config), default=str))  # type: ignore[arg-type]

"""Mapping of every handler style's return value onto the one ToolResult shape.

An `Outcome` is `(success, content, data_json, error)`; see proto/README.md step 5.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ._types import to_json

__all__ = ["Outcome", "from_exception", "from_linkzone", "from_value", "to_json"]


class Outcome(NamedTuple):
    """The fields of a ToolResult besides call_id."""

    success: bool
    content: str
    data_json: str
    error: str


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return to_json(value)


def from_value(value: Any) -> Outcome:
    """HomeAgent handler / @tool function value.

    A string is the content as is; anything else is content = its JSON text and
    data_json = the same JSON; a dict with `isError: true` is a failure whose error is
    its `content`; None is an empty success.
    """
    if value is None:
        return Outcome(True, "", "", "")
    if isinstance(value, dict) and value.get("isError") is True:
        err = _text(value.get("content")) or _text(value.get("error")) or "tool reported an error"
        return Outcome(False, "", "", err)
    if isinstance(value, str):
        return Outcome(True, value, "", "")
    if isinstance(value, (bytes, bytearray)):
        return Outcome(True, bytes(value).decode("utf-8", "replace"), "", "")
    text = to_json(value)
    return Outcome(True, text, text, "")


def from_linkzone(value: Any) -> Outcome:
    """LinkZone `{success, content, data?, error?}` (or Cyrene `{success, output, error}`).

    Anything not shaped like that is mapped like a HomeAgent value.
    """
    if not (isinstance(value, dict) and "success" in value):
        return from_value(value)
    success = bool(value.get("success"))
    content = value.get("content")
    if content is None and "output" in value:
        content = value.get("output")
    data = value.get("data")
    data_json = "" if data is None else to_json(data)
    error = _text(value.get("error"))
    if not success and not error:
        error = _text(content) or "tool reported failure without an error text"
    return Outcome(success, _text(content), data_json, error)


def from_exception(exc: BaseException) -> Outcome:
    """A handler exception: failure with error text "<ExcType>: <message>"."""
    msg = str(exc)
    err = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    return Outcome(False, "", "", err)

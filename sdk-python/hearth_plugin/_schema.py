"""JSON Schema of a tool's arguments from a function's type hints and docstring."""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from typing import Any, Callable, Dict, List, Optional, Tuple

_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params|Returns|Return|Yields|Raises|"
                      r"Examples?|Notes?|Attributes|See Also|Warnings?)\s*:\s*$")
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")

_NONE = type(None)


class SchemaError(TypeError):
    """A type hint has no JSON Schema equivalent."""


def parse_docstring(doc: Optional[str]) -> Tuple[str, Dict[str, str]]:
    """Split a docstring into (description, {param: description}).

    The description is the first paragraph (lines joined with spaces); parameter
    descriptions come from a Google-style ``Args:`` section, continuation lines included.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    para: List[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line):
            break
        para.append(line.strip())
    description = " ".join(para)

    params: Dict[str, str] = {}
    in_args = False
    base_indent = None
    current = None
    for line in lines:
        m = _SECTION.match(line)
        if m:
            in_args = m.group(1) in ("Args", "Arguments", "Parameters", "Params")
            base_indent = None
            current = None
            continue
        if not in_args:
            continue
        if not line.strip():
            current = None
            continue
        indent = len(line) - len(line.lstrip())
        if base_indent is None:
            base_indent = indent
        if indent <= base_indent:
            am = _ARG_LINE.match(line.strip())
            if am:
                current = am.group(1).lstrip("*")
                params[current] = am.group(3).strip()
                continue
            if indent < base_indent:
                in_args = False
            current = None
        elif current is not None:
            params[current] = (params[current] + " " + line.strip()).strip()
    return description, params


def type_schema(hint: Any) -> Tuple[Dict[str, Any], bool]:
    """JSON Schema for one type hint, and whether the hint admits None."""
    if hint is inspect.Parameter.empty or hint is Any or hint is object:
        return {}, False
    if hint is _NONE or hint is None:
        return {"type": "null"}, True
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        schema, nullable = type_schema(args[0])
        for extra in args[1:]:
            if isinstance(extra, str):
                schema = {**schema, "description": extra}
        return schema, nullable
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        members = [a for a in args if a is not _NONE]
        nullable = len(members) != len(args)
        if len(members) == 1:
            return type_schema(members[0])[0], nullable
        return {"anyOf": [type_schema(m)[0] for m in members]}, nullable
    if origin is typing.Literal:
        values = list(args)
        schema: Dict[str, Any] = {"enum": values}
        kinds = {_json_type(v) for v in values}
        if len(kinds) == 1 and None not in kinds:
            schema = {"type": kinds.pop(), "enum": values}
        return schema, None in values
    if hint is bool:
        return {"type": "boolean"}, False
    if hint is int:
        return {"type": "integer"}, False
    if hint is float:
        return {"type": "number"}, False
    if hint is str:
        return {"type": "string"}, False
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [m.value for m in hint]
        kinds = {_json_type(v) for v in values}
        schema = {"enum": values}
        if len(kinds) == 1:
            schema = {"type": kinds.pop(), "enum": values}
        return schema, False
    if hint in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset,
                                                           typing.get_origin(typing.Sequence[int])):
        schema = {"type": "array"}
        if args and not (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
            if origin is tuple:
                items = [type_schema(a)[0] for a in args]
                schema.update({"prefixItems": items, "minItems": len(items), "maxItems": len(items)})
            else:
                schema["items"] = type_schema(args[0])[0]
        elif args:
            schema["items"] = type_schema(args[0])[0]
        return schema, False
    if hint is dict or origin is dict or origin is typing.get_origin(typing.Mapping[str, int]):
        schema = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            schema["additionalProperties"] = type_schema(args[1])[0]
        return schema, False
    if isinstance(hint, type) and typing.is_typeddict(hint):
        hints = typing.get_type_hints(hint)
        props = {k: type_schema(v)[0] for k, v in hints.items()}
        return {"type": "object", "properties": props,
                "required": sorted(getattr(hint, "__required_keys__", hints.keys()))}, False
    raise SchemaError(f"type {hint!r} has no JSON Schema mapping; pass parameters=... to @tool")


def _json_type(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "object"


def _is_sender(hint: Any) -> bool:
    from ._plugin import Sender
    return hint is Sender or (isinstance(hint, str) and hint.split(".")[-1] == "Sender")


def function_schema(func: Callable) -> Tuple[str, Dict[str, Any], Optional[str]]:
    """(description, JSON Schema, name of the Sender parameter or None) for `func`.

    Raises SchemaError naming the parameter when a hint cannot be mapped.
    """
    sig = inspect.signature(func)
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception:  # unresolvable forward references: fall back to raw annotations
        hints = {k: v for k, v in getattr(func, "__annotations__", {}).items()}
    description, arg_docs = parse_docstring(inspect.getdoc(func))
    props: Dict[str, Any] = {}
    required: List[str] = []
    sender_param = None
    for pname, param in sig.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = hints.get(pname, param.annotation)
        if _is_sender(hint) or (pname == "sender" and hint is inspect.Parameter.empty):
            sender_param = pname
            continue
        try:
            schema, nullable = type_schema(hint)
        except SchemaError as e:
            raise SchemaError(f"parameter `{pname}`: {e}") from None
        schema = dict(schema)
        if pname in arg_docs and arg_docs[pname] and "description" not in schema:
            schema["description"] = arg_docs[pname]
        if param.default is not inspect.Parameter.empty:
            if param.default is not None and _json_safe(param.default):
                schema["default"] = param.default
        elif not nullable:
            required.append(pname)
        props[pname] = schema
    out: Dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return description, out, sender_param


def _json_safe(value: Any) -> bool:
    if isinstance(value, enum.Enum):
        return False
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_json_safe(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_safe(v) for k, v in value.items())
    return False

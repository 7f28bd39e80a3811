"""In-process tests of the pure parts: schema from hints, docstrings, result mapping."""

import enum
from typing import Any, Dict, List, Literal, Optional, Union

import pytest

from hearth_plugin._result import from_exception, from_linkzone, from_value
from hearth_plugin._schema import SchemaError, function_schema, parse_docstring


def test_docstring_parsing():
    desc, args = parse_docstring('''Find things
    across lines.

    More text.

    Args:
        a (int): First
            continued.
        *rest: ignored name star.
        b: Second.

    Returns:
        Nothing useful.
    ''')
    assert desc == "Find things across lines."
    assert args == {"a": "First continued.", "rest": "ignored name star.", "b": "Second."}
    assert parse_docstring(None) == ("", {})


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def test_schema_types():
    def f(s: str, i: int, x: float, b: bool, l: List[int], d: Dict[str, int], c: Color,
          u: Union[int, str], any_: Any, o: Optional[int], p: int | None = None,
          lit: Literal[1, 2] = 1, *args, **kw) -> None:
        """Doc."""

    desc, schema, sender, _ = function_schema(f)
    assert desc == "Doc." and sender is None
    assert "additionalProperties" not in schema  # **kw takes any other argument
    props = schema["properties"]
    assert props["s"] == {"type": "string"} and props["i"] == {"type": "integer"}
    assert props["x"] == {"type": "number"} and props["b"] == {"type": "boolean"}
    assert props["l"] == {"type": "array", "items": {"type": "integer"}}
    assert props["d"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert props["c"] == {"type": "string", "enum": ["red", "blue"]}
    assert props["u"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert props["any_"] == {}
    assert props["o"] == {"type": ["integer", "null"]} and props["p"] == {"type": ["integer", "null"]}
    assert props["lit"] == {"type": "integer", "enum": [1, 2], "default": 1}
    assert "args" not in props and "kw" not in props
    assert schema["required"] == ["s", "i", "x", "b", "l", "d", "c", "u", "any_"]


def test_schema_error_names_the_parameter():
    def f(when: complex) -> None:
        pass

    with pytest.raises(SchemaError, match="parameter `when`"):
        function_schema(f)


def test_value_mapping():
    assert from_value("hi") == (True, "hi", "", "")
    assert from_value({"a": "é"}) == (True, '{"a": "é"}', '{"a": "é"}', "")
    assert from_value([1, 2]) == (True, "[1, 2]", "[1, 2]", "")
    assert from_value(3) == (True, "3", "3", "")
    assert from_value(None) == (True, "", "", "")
    assert from_value({"isError": True, "content": "bad"}) == (False, "", "", "bad")
    assert from_value({"isError": False, "content": "ok"}).success


def test_linkzone_mapping():
    assert from_linkzone({"success": True, "content": "c", "data": {"k": 1}}) == (True, "c", '{"k": 1}', "")
    assert from_linkzone({"success": False, "error": "e"}) == (False, "", "", "e")
    assert from_linkzone({"success": False, "content": "why"}) == (False, "why", "", "why")
    assert from_linkzone({"success": True, "output": "cyrene"}) == (True, "cyrene", "", "")
    assert from_linkzone("plain") == (True, "plain", "", "")


def test_exception_mapping():
    assert from_exception(KeyError("city")) == (False, "", "", "KeyError: 'city'")
    assert from_exception(RuntimeError()) == (False, "", "", "RuntimeError")

"""Typed tool parameters: nullable hints, nested dataclasses / TypedDicts / pydantic
models in the JSON Schema, and arguments arriving as the declared types."""

import dataclasses
import enum
import json
import subprocess
import sys
from typing import Annotated, Dict, List, Literal, Optional, Tuple, TypedDict, Union

import pytest

from hearth_plugin import ArgumentError, Plugin
from hearth_plugin._schema import function_schema
from hearth_plugin.testing import InvalidArguments, load, validate_arguments


def schema_of(f):
    return function_schema(f).parameters


def bind(f, args):
    return function_schema(f).bind(args)


def test_optional_and_pipe_none_are_nullable_and_accept_an_explicit_null():
    def f(coupon: Optional[str] = None, n: int | None = None, mode: Literal["a", "b"] | None = None,
          either: Union[int, str, None] = None, must: Optional[int] = 0) -> None:
        pass

    s = schema_of(f)
    assert s["properties"] == {
        "coupon": {"type": ["string", "null"]},
        "n": {"type": ["integer", "null"]},
        "mode": {"type": ["string", "null"], "enum": ["a", "b", None]},
        "either": {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]},
        "must": {"type": ["integer", "null"], "default": 0},
    }
    assert "required" not in s and s["additionalProperties"] is False
    for args in ({"coupon": None}, {"n": None, "mode": None, "either": None}, {"mode": "a", "either": "x"}):
        assert validate_arguments(s, args) is None, args
    assert validate_arguments(s, {"n": "1"}) == 'argument `n`: "1" is not of types "integer", "null"'
    assert validate_arguments(s, {"mode": "c"}).startswith('argument `mode`: "c" is not one of')


def test_nullable_without_default_is_optional_and_arrives_as_none():
    def f(city: str, zip: Optional[str]) -> None:
        pass

    assert schema_of(f)["required"] == ["city"]
    assert bind(f, {"city": "x"}) == {"city": "x", "zip": None}
    assert bind(f, {"city": "x", "zip": None}) == {"city": "x", "zip": None}


@dataclasses.dataclass
class Address:
    """A postal address.

    Attributes:
        city: The city.
        zip: Postal code, when known.
    """

    city: str
    zip: Optional[str] = None
    lines: List[str] = dataclasses.field(default_factory=list)


class Size(enum.Enum):
    S = "s"
    M = "m"


class Item(TypedDict):
    sku: str
    qty: int
    size: Size


@dataclasses.dataclass
class Order:
    items: List[Item]
    ship_to: Address
    gift: Optional[Address] = None
    dims: Tuple[int, int] = (0, 0)


@dataclasses.dataclass
class Node:
    """A tree."""

    label: str
    children: List["Node"] = dataclasses.field(default_factory=list)


def test_dataclasses_and_typeddicts_become_nested_objects():
    def f(order: Order, tags: Annotated[set[str], "Labels"] = frozenset()) -> None:
        """Place an order."""

    s = schema_of(f)
    address = {
        "type": "object", "description": "A postal address.",
        "properties": {"city": {"type": "string", "description": "The city."},
                       "zip": {"type": ["string", "null"], "description": "Postal code, when known."},
                       "lines": {"type": "array", "items": {"type": "string"}}},
        "required": ["city"], "additionalProperties": False,
    }
    assert s["properties"]["order"] == {
        "type": "object",
        "properties": {
            "items": {"type": "array", "items": {
                "type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"},
                               "size": {"type": "string", "enum": ["s", "m"]}},
                "required": ["sku", "qty", "size"], "additionalProperties": False}},
            "ship_to": address,
            "gift": {**address, "type": ["object", "null"]},
            "dims": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}],
                     "minItems": 2, "maxItems": 2, "default": [0, 0]},
        },
        "required": ["items", "ship_to"], "additionalProperties": False,
    }
    assert s["properties"]["tags"] == {"type": "array", "items": {"type": "string"}, "uniqueItems": True,
                                       "description": "Labels"}
    assert s["required"] == ["order"]


def test_arguments_arrive_as_the_declared_types():
    def f(order: Order, tags: set[str] = frozenset(), size: Size = Size.S, n: int = 0) -> None:
        pass

    got = bind(f, {"order": {"items": [{"sku": "a", "qty": 2, "size": "m"}],
                             "ship_to": {"city": "Paris"}, "gift": None, "dims": [3, 4]},
                   "tags": ["x", "x", "y"], "size": "m", "n": 3.0})
    order = got["order"]
    assert isinstance(order, Order) and isinstance(order.ship_to, Address)
    assert order.ship_to == Address("Paris") and order.gift is None and order.dims == (3, 4)
    assert order.items == [{"sku": "a", "qty": 2, "size": Size.M}]       # a TypedDict stays a dict
    assert got["tags"] == {"x", "y"} and got["size"] is Size.M
    assert got["n"] == 3 and type(got["n"]) is int


def test_binding_errors_name_the_argument():
    def f(order: Order, size: Size = Size.S) -> None:
        pass

    cases = [
        ({"order": {"items": [], "ship_to": {"city": "x"}}, "colour": 1},
         "arguments: unknown argument `colour` (the tool takes order, size)"),
        ({}, "arguments: missing argument `order`"),
        ({"order": {"items": []}}, "argument `order`: missing field `ship_to`"),
        ({"order": {"items": [], "ship_to": {"city": "x", "country": "y"}}},
         "argument `order.ship_to`: unknown field `country` (Address has city, zip, lines)"),
        ({"order": {"items": [], "ship_to": "Paris"}}, "argument `order.ship_to`: expected an object, got a string"),
        ({"order": {"items": [], "ship_to": {"city": "x"}}, "size": "xl"},
         'argument `size`: "xl" is not one of "s", "m"'),
    ]
    for args, message in cases:
        with pytest.raises(ArgumentError) as e:
            bind(f, args)
        assert str(e.value) == message


def test_a_type_that_contains_itself_goes_to_defs():
    def f(tree: Node) -> None:
        pass

    s = schema_of(f)
    assert s["properties"]["tree"] == {"$ref": "#/$defs/Node"}
    assert s["$defs"]["Node"] == {
        "type": "object", "description": "A tree.",
        "properties": {"label": {"type": "string"},
                       "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
        "required": ["label"], "additionalProperties": False}
    tree = bind(f, {"tree": {"label": "a", "children": [{"label": "b"}]}})["tree"]
    assert tree == Node("a", [Node("b")]) and isinstance(tree.children[0], Node)
    assert validate_arguments(s, {"tree": {"label": "a", "children": [{"label": 1}]}}) == \
        'argument `tree.children.0.label`: 1 is not of type "string"'


def test_kwargs_keep_extra_arguments_open():
    def f(a: int, **rest: str) -> None:
        pass

    s = schema_of(f)
    assert "additionalProperties" not in s
    assert bind(f, {"a": 1, "b": "x"}) == {"a": 1, "b": "x"}


PYDANTIC_PLUGIN = '''
from typing import Optional

import pydantic
from hearth_plugin import Plugin

plugin = Plugin("pyd")


class Geo(pydantic.BaseModel):
    lat: float
    lon: float


class Place(pydantic.BaseModel):
    name: str = pydantic.Field(min_length=1)
    geo: Geo
    note: Optional[str] = None


@plugin.tool
def visit(place: Place, also: list[Place] = []) -> dict:
    assert isinstance(place, Place) and isinstance(place.geo, Geo)
    return {"name": place.name, "lat": place.geo.lat, "n": len(also)}
'''


def test_pydantic_models_when_pydantic_is_installed(tmp_path):
    pytest.importorskip("pydantic")
    path = tmp_path / "pyd" / "main.py"
    path.parent.mkdir()
    path.write_text(PYDANTIC_PLUGIN)
    with load(path) as t:
        s = t.tools["visit"].parameters
        place = s["properties"]["place"]                   # pydantic's own schema of the model
        assert (place["title"], place["required"]) == ("Place", ["name", "geo"])
        assert place["properties"]["geo"] == {"$ref": "#/$defs/Geo"}
        assert set(s["$defs"]) == {"Geo"}                   # hoisted to the tool schema's root
        assert s["$defs"]["Geo"]["required"] == ["lat", "lon"]
        r = t.call("visit", {"place": {"name": "Paris", "geo": {"lat": 48.8, "lon": 2.3}},
                             "also": [{"name": "b", "geo": {"lat": 0, "lon": 0}}]})
        assert r.success and r.data == {"name": "Paris", "lat": 48.8, "n": 1}
        with pytest.raises(InvalidArguments, match=r"argument `place.geo`: \"lat\" is a required property"):
            t.call("visit", {"place": {"name": "x", "geo": {"lon": 1}}})
        # Pydantic's own validation still runs (here past the schema check).
        r = t.call("visit", {"place": {"name": "", "geo": {"lat": 0, "lon": 0}}}, validate_args=False)
        assert not r.success and r.error.startswith("tool visit: argument `place`: Place: name:")


def test_pydantic_is_never_imported_by_the_sdk(tmp_path):
    source = ("from dataclasses import dataclass\nfrom hearth_plugin import tool\n"
              "@dataclass\nclass A:\n    x: int\n@tool\ndef f(a: A) -> int:\n    return a.x\n")
    path = tmp_path / "p" / "main.py"
    path.parent.mkdir()
    path.write_text(source)
    code = ("import sys\nfrom hearth_plugin.testing import load\n"
            f"with load({str(path)!r}) as t:\n    assert t.call('f', {{'a': {{'x': 2}}}}).content == '2'\n"
            "print('pydantic' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_explicit_null_reaches_an_optional_parameter_through_the_broker_path(tmp_path):
    class Shop(Plugin):
        def __init__(self):
            super().__init__("shop")

        def start(self, sdk):
            pass

    shop = Shop()

    @shop.tool
    def checkout(total: float, coupon: Optional[str] = None, meta: Optional[Dict[str, int]] = None) -> str:
        return f"{total}:{coupon}:{meta}"

    with load(shop) as t:
        assert t.call("checkout", {"total": 3, "coupon": None, "meta": None}).content == "3:None:None"
        assert t.call("checkout", {"total": 3, "coupon": "X"}).content == "3:X:None"
        assert json.loads(json.dumps(t.tools["checkout"].parameters))["properties"]["meta"] == {
            "type": ["object", "null"], "additionalProperties": {"type": "integer"}}

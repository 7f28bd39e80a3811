"""Tool schemas as the broker sees them (`broker/src/schema.rs`): LinkZone `ai.tool`
parameter lists turned into JSON Schema, a registration-time check of a schema, and
argument validation before dispatch with the broker's error texts.

The validator covers JSON Schema 2020-12 as tools use it: type, enum, const,
properties, required, additionalProperties, patternProperties, propertyNames,
min/maxProperties, dependentRequired, items, prefixItems, contains, min/maxItems,
uniqueItems, min/maxLength, pattern, minimum, maximum, exclusiveMinimum,
exclusiveMaximum, multipleOf, allOf, anyOf, oneOf, not, if/then/else, boolean schemas,
and local `$ref`s (`#/$defs/…`, `#/definitions/…`, any `#/…` pointer). `format` is an
annotation (not checked, as the broker's validator does for 2020-12). A remote `$ref`
is an error of the harness. Messages follow the `jsonschema` crate the broker uses:
"argument `expression`: 12 is not of type \"string\"", "arguments: \"expression\" is a
required property".
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Callable, Dict, List, Optional

__all__ = ["SchemaProblem", "check_schema", "linkzone_schema", "linkzone_description", "validate"]

_TYPES = ("string", "number", "integer", "boolean", "object", "array", "null")


class SchemaProblem(ValueError):
    """A schema the broker would not accept, or one the harness cannot evaluate."""


def _show(value: Any) -> str:
    """A value as serde_json prints it (compact JSON)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _is_type(value: Any, kind: str) -> bool:
    if kind == "null":
        return value is None
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list)
    if kind == "object":
        return isinstance(value, dict)
    return False


def _eq(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but true != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_eq(a[k], b[k]) for k in a)
    return type(a) is type(b) and bool(a == b)


class _Error(Exception):
    def __init__(self, path: List[str], message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


class _Validator:
    """Evaluates a schema's keywords in the order of their names, as the broker's
    validator does (its JSON maps are sorted), so the first error is the broker's."""

    def __init__(self, root: Any) -> None:
        self.root = root

    def resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise SchemaProblem(f"$ref {ref!r}: only local references (#/...) are supported by the test harness")
        node = self.root
        for part in [p for p in ref[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise SchemaProblem(f"$ref {ref!r} does not resolve")
        return node

    def valid(self, schema: Any, value: Any) -> bool:
        try:
            self.check(schema, value, [])
            return True
        except _Error:
            return False

    def check(self, schema: Any, value: Any, path: List[str]) -> None:
        if schema is True:
            return
        if schema is False:
            raise _Error(path, f"False schema does not allow {_show(value)}")
        if not isinstance(schema, dict):
            return
        for key in sorted(schema):
            keyword = _KEYWORDS.get(key)
            if keyword is not None:
                keyword(self, schema, schema[key], value, path)


_Keyword = Callable[[_Validator, Dict[str, Any], Any, Any, List[str]], None]
_KEYWORDS: Dict[str, _Keyword] = {}


def _keyword(*names: str) -> Callable[[_Keyword], _Keyword]:
    def register(fn: _Keyword) -> _Keyword:
        for name in names:
            _KEYWORDS[name] = fn
        return fn
    return register


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


@_keyword("$ref")
def _ref(vd: _Validator, s: Dict[str, Any], ref: Any, v: Any, path: List[str]) -> None:
    vd.check(vd.resolve(str(ref)), v, path)


@_keyword("type")
def _type(vd: _Validator, s: Dict[str, Any], t: Any, v: Any, path: List[str]) -> None:
    if isinstance(t, str) and not _is_type(v, t):
        raise _Error(path, f'{_show(v)} is not of type "{t}"')
    if isinstance(t, list) and not any(_is_type(v, k) for k in t):
        raise _Error(path, f"{_show(v)} is not of types " + ", ".join(f'"{k}"' for k in sorted(t)))


@_keyword("enum")
def _enum(vd: _Validator, s: Dict[str, Any], options: Any, v: Any, path: List[str]) -> None:
    if isinstance(options, list) and not any(_eq(v, o) for o in options):
        raise _Error(path, _enum_message(v, options))


@_keyword("const")
def _const(vd: _Validator, s: Dict[str, Any], c: Any, v: Any, path: List[str]) -> None:
    if not _eq(v, c):
        raise _Error(path, f"{_show(c)} was expected")


def _bound(key: str, fails: Callable[[float, float], bool], says: str) -> None:
    def check(vd: _Validator, s: Dict[str, Any], limit: Any, v: Any, path: List[str]) -> None:
        if _is_number(v) and _is_number(limit) and fails(v, limit):
            raise _Error(path, f"{_show(v)} {says} {_show(limit)}")
    _KEYWORDS[key] = check


_bound("minimum", lambda v, m: v < m, "is less than the minimum of")
_bound("maximum", lambda v, m: v > m, "is greater than the maximum of")
_bound("exclusiveMinimum", lambda v, m: v <= m, "is less than or equal to the minimum of")
_bound("exclusiveMaximum", lambda v, m: v >= m, "is greater than or equal to the maximum of")
_bound("multipleOf", lambda v, m: m > 0 and not (math.isfinite(v / m) and abs(v / m - round(v / m)) < 1e-9),
       "is not a multiple of")


def _count(key: str, kind: type, less: bool, says: str, one: str, many: str) -> None:
    def check(vd: _Validator, s: Dict[str, Any], k: Any, v: Any, path: List[str]) -> None:
        if not isinstance(v, (str, list, dict)) or not isinstance(v, kind) or not isinstance(k, int):
            return
        n = len(v)
        if (n < k) if less else (n > k):
            raise _Error(path, f"{_show(v)} {says} {k} {one if k == 1 else many}")
    _KEYWORDS[key] = check


_count("minLength", str, True, "is shorter than", "character", "characters")
_count("maxLength", str, False, "is longer than", "character", "characters")
_count("minItems", list, True, "has less than", "item", "items")
_count("maxItems", list, False, "has more than", "item", "items")
_count("minProperties", dict, True, "has less than", "property", "properties")
_count("maxProperties", dict, False, "has more than", "property", "properties")


@_keyword("pattern")
def _pattern(vd: _Validator, s: Dict[str, Any], pat: Any, v: Any, path: List[str]) -> None:
    if isinstance(v, str) and re.search(str(pat), v) is None:
        raise _Error(path, f'{_show(v)} does not match "{pat}"')


@_keyword("uniqueItems")
def _unique(vd: _Validator, s: Dict[str, Any], on: Any, v: Any, path: List[str]) -> None:
    if on is True and isinstance(v, list):
        for i, a in enumerate(v):
            if any(_eq(a, b) for b in v[i + 1:]):
                raise _Error(path, f"{_show(v)} has non-unique elements")


@_keyword("prefixItems")
def _prefix(vd: _Validator, s: Dict[str, Any], subs: Any, v: Any, path: List[str]) -> None:
    if isinstance(v, list) and isinstance(subs, list):
        for i, (sub, item) in enumerate(zip(subs, v)):
            vd.check(sub, item, path + [str(i)])


@_keyword("items")
def _items(vd: _Validator, s: Dict[str, Any], items: Any, v: Any, path: List[str]) -> None:
    if not isinstance(v, list) or isinstance(items, list):
        return
    start = len(s.get("prefixItems") or [])
    for i in range(start, len(v)):
        vd.check(items, v[i], path + [str(i)])


@_keyword("contains")
def _contains(vd: _Validator, s: Dict[str, Any], sub: Any, v: Any, path: List[str]) -> None:
    if isinstance(v, list):
        n = sum(1 for x in v if vd.valid(sub, x))
        if n < s.get("minContains", 1) or ("maxContains" in s and n > s["maxContains"]):
            raise _Error(path, f"None of {_show(v)} are valid under the given schema")


@_keyword("required")
def _required(vd: _Validator, s: Dict[str, Any], names: Any, v: Any, path: List[str]) -> None:
    if isinstance(v, dict):
        for name in names or []:
            if name not in v:
                raise _Error(path, f"{_show(name)} is a required property")


@_keyword("dependentRequired")
def _dependent(vd: _Validator, s: Dict[str, Any], deps: Any, v: Any, path: List[str]) -> None:
    if isinstance(v, dict):
        for name, needs in sorted((deps or {}).items()):
            if name in v:
                for other in needs:
                    if other not in v:
                        raise _Error(path, f"{_show(other)} is a required property")


@_keyword("properties")
def _properties(vd: _Validator, s: Dict[str, Any], props: Any, v: Any, path: List[str]) -> None:
    if isinstance(v, dict) and isinstance(props, dict):
        for name in sorted(props):
            if name in v:
                vd.check(props[name], v[name], path + [name])


@_keyword("patternProperties")
def _pattern_props(vd: _Validator, s: Dict[str, Any], pats: Any, v: Any, path: List[str]) -> None:
    if isinstance(v, dict) and isinstance(pats, dict):
        for pat in sorted(pats):
            for name in sorted(v):
                if re.search(pat, name):
                    vd.check(pats[pat], v[name], path + [name])


@_keyword("propertyNames")
def _property_names(vd: _Validator, s: Dict[str, Any], sub: Any, v: Any, path: List[str]) -> None:
    if isinstance(v, dict):
        for name in sorted(v):
            vd.check(sub, name, path)


@_keyword("additionalProperties")
def _additional(vd: _Validator, s: Dict[str, Any], extra: Any, v: Any, path: List[str]) -> None:
    if not isinstance(v, dict):
        return
    props = s.get("properties") or {}
    pats = s.get("patternProperties") or {}
    unexpected = [k for k in sorted(v) if k not in props and not any(re.search(p, k) for p in pats)]
    if extra is False and unexpected:
        quoted = ", ".join(f"'{k}'" for k in unexpected)
        raise _Error(path, f"Additional properties are not allowed ({quoted} "
                           f"{'was' if len(unexpected) == 1 else 'were'} unexpected)")
    if isinstance(extra, dict):
        for k in unexpected:
            vd.check(extra, v[k], path + [k])


@_keyword("allOf")
def _all_of(vd: _Validator, s: Dict[str, Any], subs: Any, v: Any, path: List[str]) -> None:
    for sub in subs or []:
        vd.check(sub, v, path)


@_keyword("anyOf")
def _any_of(vd: _Validator, s: Dict[str, Any], subs: Any, v: Any, path: List[str]) -> None:
    if not any(vd.valid(sub, v) for sub in subs or []):
        raise _Error(path, f"{_show(v)} is not valid under any of the schemas listed in the 'anyOf' keyword")


@_keyword("oneOf")
def _one_of(vd: _Validator, s: Dict[str, Any], subs: Any, v: Any, path: List[str]) -> None:
    n = sum(1 for sub in subs or [] if vd.valid(sub, v))
    if n == 0:
        raise _Error(path, f"{_show(v)} is not valid under any of the schemas listed in the 'oneOf' keyword")
    if n > 1:
        raise _Error(path, f"{_show(v)} is valid under more than one of the schemas listed in the 'oneOf' keyword")


@_keyword("not")
def _not(vd: _Validator, s: Dict[str, Any], sub: Any, v: Any, path: List[str]) -> None:
    if vd.valid(sub, v):
        raise _Error(path, f"{_show(sub)} is not allowed for {_show(v)}")


@_keyword("if")
def _if(vd: _Validator, s: Dict[str, Any], cond: Any, v: Any, path: List[str]) -> None:
    branch = "then" if vd.valid(cond, v) else "else"
    if branch in s:
        vd.check(s[branch], v, path)


def _enum_message(value: Any, options: List[Any]) -> str:
    shown = [_show(o) for o in options]
    if len(shown) <= 3:
        listed = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]
    else:
        listed = ", ".join(shown[:2]) + f" or {len(shown) - 2} other candidates"
    return f"{_show(value)} is not one of {listed}"


def validate(schema: Any, args: Any) -> Optional[str]:
    """None when `args` satisfy `schema`, else the broker's message naming the argument:
    "argument `address.city`: …" or, at the top level, "arguments: …"."""
    if not isinstance(args, dict):
        return f"arguments must be a JSON object, got {_show(args)}"
    try:
        _Validator(schema).check(schema, args, [])
    except _Error as e:
        arg = ".".join(e.path)
        return f"argument `{arg}`: {e.message}" if arg else f"arguments: {e.message}"
    return None


def check_schema(schema: Any) -> None:
    """SchemaProblem when the broker would refuse `schema` as a tool's parameters: not
    an object schema, or keywords whose values have the wrong shape (a light check of
    the 2020-12 meta-schema), or a `$ref` that does not resolve."""
    if not isinstance(schema, dict):
        raise SchemaProblem("parameters must be a JSON Schema object")
    t = schema.get("type")
    if t is not None and t != "object":
        raise SchemaProblem(f'parameters must describe an object ("type": "object"), not {_show(t)}')
    _check_node(schema, schema, "")


def _check_node(root: Any, node: Any, at: str) -> None:
    if isinstance(node, bool):
        return
    if not isinstance(node, dict):
        raise SchemaProblem(f"parameters is not a valid JSON Schema at {at or '/'}: {_show(node)} is not of types \"boolean\", \"object\"")

    def bad(key: str, why: str) -> SchemaProblem:
        return SchemaProblem(f"parameters is not a valid JSON Schema at {at}/{key}: {why}")

    t = node.get("type")
    if t is not None:
        kinds = t if isinstance(t, list) else [t]
        if not kinds or any(k not in _TYPES for k in kinds):
            raise bad("type", f"{_show(t)} is not one of {', '.join(_TYPES)}")
    for key in ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"):
        if key in node:
            if not isinstance(node[key], dict):
                raise bad(key, f"{_show(node[key])} is not of type \"object\"")
            for name, sub in node[key].items():
                _check_node(root, sub, f"{at}/{key}/{name}")
    for key in ("required",):
        if key in node and not (isinstance(node[key], list) and all(isinstance(x, str) for x in node[key])):
            raise bad(key, f"{_show(node[key])} is not an array of strings")
    if "enum" in node and not isinstance(node["enum"], list):
        raise bad("enum", f"{_show(node['enum'])} is not of type \"array\"")
    for key in ("allOf", "anyOf", "oneOf", "prefixItems"):
        if key in node:
            if not isinstance(node[key], list) or (key != "prefixItems" and not node[key]):
                raise bad(key, f"{_show(node[key])} is not a non-empty array")
            for i, sub in enumerate(node[key]):
                _check_node(root, sub, f"{at}/{key}/{i}")
    for key in ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames"):
        if key in node:
            _check_node(root, node[key], f"{at}/{key}")
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
        if key in node and (isinstance(node[key], bool) or not isinstance(node[key], (int, float))):
            raise bad(key, f"{_show(node[key])} is not of type \"number\"")
    for key in ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
                "minContains", "maxContains"):
        if key in node and not (isinstance(node[key], int) and not isinstance(node[key], bool) and node[key] >= 0):
            raise bad(key, f"{_show(node[key])} is not a non-negative integer")
    if "pattern" in node:
        try:
            re.compile(str(node["pattern"]))
        except re.error as e:
            raise bad("pattern", f"not a regular expression: {e}") from None
    if "$ref" in node:
        try:
            _Validator(root).resolve(str(node["$ref"]))
        except SchemaProblem as e:
            raise bad("$ref", str(e)) from None


def linkzone_schema(ai_tool: Dict[str, Any]) -> Dict[str, Any]:
    """The JSON Schema the broker derives from a LinkZone `ai.tool` parameters list;
    SchemaProblem naming the parameter for an empty or duplicate name or an unknown type."""
    properties: Dict[str, Any] = {}
    required: List[str] = []
    for p in ai_tool.get("parameters") or []:
        name = str(p.get("name") or "")
        if not name.strip():
            raise SchemaProblem("a parameter has an empty name")
        if name in properties:
            raise SchemaProblem(f"parameter `{name}` is defined twice")
        kind = str(p.get("type") or "") or "string"
        if kind not in ("string", "number", "integer", "boolean", "object", "array"):
            raise SchemaProblem(f"parameter `{name}`: type `{kind}` is not one of string, number, "
                                "integer, boolean, object, array")
        prop: Dict[str, Any] = {"type": kind}
        if p.get("description"):
            prop["description"] = str(p["description"])
        if p.get("default") is not None:
            prop["default"] = p["default"]
        if p.get("enum") is not None:
            prop["enum"] = list(p["enum"])
        if p.get("example") is not None:
            ex = p["example"]
            prop["examples"] = [ex if isinstance(ex, str) else json.dumps(ex, ensure_ascii=False)]
        if p.get("required"):
            required.append(name)
        properties[name] = prop
    schema: Dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def linkzone_description(ai_tool: Dict[str, Any]) -> str:
    """The description the LLM reads for a LinkZone tool: usage, then "When to use: …"."""
    u = str(ai_tool.get("usage") or "").strip()
    w = str(ai_tool.get("when_to_use") or "").strip()
    if u and w:
        return f"{u}\nWhen to use: {w}"
    return u or (f"When to use: {w}" if w else "")

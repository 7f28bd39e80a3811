"""A tool's JSON Schema from a function's type hints and docstring, and the binder that
turns a call's arguments object into keyword arguments of the declared types.

Hints map to JSON Schema (draft 2020-12, what the broker validates with):

- `str`, `int`, `float`, `bool`; `list[T]` / `tuple[...]` / `set[T]`; `dict[str, T]`;
  `Literal[...]` and `Enum` (→ `enum`); `Union` (→ `anyOf`); `Annotated[T, "text"]`
  (→ a description);
- `X | None` / `Optional[X]`: nullable (`"type": [T, "null"]`, or `anyOf` with
  `{"type": "null"}` for schemas without one type) — an explicit null is accepted;
  without a default the parameter is optional and arrives as None when left out;
- dataclasses and `TypedDict`s: nested objects (`properties`, `required`,
  `additionalProperties: false`; the class docstring's first paragraph and its
  Google-style `Attributes:` lines are descriptions; a type that contains itself goes
  to `$defs` and is referred to with `$ref`);
- pydantic models, only when pydantic is already imported by the plugin (this module
  never imports it): `pydantic.TypeAdapter(model).json_schema()`, its `$defs` hoisted
  to the tool schema's root.

The tool schema itself is an object with `additionalProperties: false` unless the
function takes `**kwargs`. The binder (`FunctionSchema.bind`) checks names (unknown
and missing arguments are an `ArgumentError` naming them) and builds the declared types:
a dataclass parameter gets an instance built from the object, a pydantic model a
validated model, an Enum its member, a tuple/set a tuple/set, an `int` an int for a
whole float such as `3.0`; everything else arrives as decoded from JSON.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import sys
import types
import typing
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Set, Tuple, Type

from ._types import ArgumentError, JSONObject, Sender, to_json

_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Params|Attributes|Fields|Returns|Return|"
                      r"Yields|Raises|Examples?|Notes?|See Also|Warnings?)\s*:\s*$")
_ARG_SECTIONS = ("Args", "Arguments", "Parameters", "Params", "Attributes", "Fields")
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:\s*(.*)$")

_NONE = type(None)
_SEQUENCE_ORIGINS = (list, tuple, set, frozenset, typing.get_origin(typing.Sequence[int]),
                     typing.get_origin(typing.AbstractSet[int]))
_MAPPING_ORIGINS = (dict, typing.get_origin(typing.Mapping[str, int]))

#: Converts one decoded JSON value to the declared type: (value, argument path) → value.
Convert = Callable[[Any, str], Any]


class SchemaError(TypeError):
    """A type hint has no JSON Schema equivalent."""


class FunctionSchema(NamedTuple):
    """What a `@tool` function's signature gives: see `function_schema`."""

    description: str
    parameters: JSONObject
    sender_param: Optional[str]
    bind: Callable[[JSONObject], Dict[str, Any]]


def parse_docstring(doc: Optional[str]) -> Tuple[str, Dict[str, str]]:
    """Split a docstring into (description, {name: description}).

    The description is the first paragraph (lines joined with spaces); parameter
    descriptions come from a Google-style ``Args:`` (or ``Attributes:``) section,
    continuation lines included.
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
    base_indent: Optional[int] = None
    current: Optional[str] = None
    for line in lines:
        m = _SECTION.match(line)
        if m:
            in_args = m.group(1) in _ARG_SECTIONS
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


def _as_json(value: Any) -> Any:
    """A JSON-able default as JSON has it (tuples become lists)."""
    if isinstance(value, (list, tuple)):
        return [_as_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    return value


def _show(value: Any) -> str:
    """A value as the error messages show it: its JSON text, cut short."""
    text = to_json(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    return {None: "null", "boolean": "a boolean", "integer": "an integer", "number": "a number",
            "string": "a string"}.get(_json_type(value)) or (
        "an array" if isinstance(value, list) else "an object")


def nullable(schema: JSONObject) -> JSONObject:
    """`schema` that also accepts null: `"type": [T, "null"]` (and None in its `enum`)
    when it has one type, else `anyOf` with `{"type": "null"}`; an empty schema (any
    value) stays as it is."""
    t = schema.get("type")
    if isinstance(t, str) or isinstance(t, list):
        out = dict(schema)
        types_ = [t] if isinstance(t, str) else list(t)
        if "null" not in types_:
            types_.append("null")
        out["type"] = types_
        if isinstance(out.get("enum"), list) and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
        return out
    rest = {k: v for k, v in schema.items() if k not in ("description", "default", "title")}
    if not rest:
        return schema
    notes = {k: v for k, v in schema.items() if k in ("description", "default", "title")}
    if list(rest) == ["anyOf"] and isinstance(rest["anyOf"], list):
        members = rest["anyOf"]
        if {"type": "null"} not in members:
            members = [*members, {"type": "null"}]
        return {"anyOf": members, **notes}
    return {"anyOf": [rest, {"type": "null"}], **notes}


class _Built(NamedTuple):
    schema: JSONObject
    nullable: bool
    convert: Optional[Convert]


def _pydantic() -> Any:
    """The pydantic module when the plugin imported it (never imported here)."""
    return sys.modules.get("pydantic")


class _Builder:
    """Builds schemas and converters of one function; owns its `$defs`."""

    def __init__(self) -> None:
        self.defs: Dict[str, JSONObject] = {}
        self._def_owner: Dict[str, Any] = {}
        self._stack: List[type] = []
        self._recursive: Set[type] = set()
        self._converters: Dict[type, Optional[Convert]] = {}

    # ------------------------------------------------------------------ dispatch

    def build(self, hint: Any) -> _Built:
        if hint is inspect.Parameter.empty or hint is Any or hint is object:
            return _Built({}, False, None)
        if hint is _NONE or hint is None:
            return _Built({"type": "null"}, True, None)
        origin = typing.get_origin(hint)
        args = typing.get_args(hint)
        if origin is typing.Annotated:
            inner = self.build(args[0])
            schema = inner.schema
            for extra in args[1:]:
                if isinstance(extra, str):
                    schema = {**schema, "description": extra}
            return _Built(schema, inner.nullable, inner.convert)
        if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
            return self._union(args)
        if origin is typing.Literal:
            return self._literal(list(args))
        if hint is bool:
            return _Built({"type": "boolean"}, False, None)
        if hint is int:
            return _Built({"type": "integer"}, False, _to_int)
        if hint is float:
            return _Built({"type": "number"}, False, None)
        if hint is str:
            return _Built({"type": "string"}, False, None)
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return self._enum(hint)
        if hint in (list, tuple, set, frozenset) or origin in _SEQUENCE_ORIGINS:
            return self._sequence(hint, origin, args)
        if hint is dict or origin in _MAPPING_ORIGINS:
            return self._mapping(args)
        if isinstance(hint, type) and typing.is_typeddict(hint):
            return self._class(hint, self._typeddict)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            return self._class(hint, self._dataclass)
        pyd = _pydantic()
        if pyd is not None and isinstance(hint, type) and issubclass(hint, pyd.BaseModel):
            return self._pydantic_model(pyd, hint)
        raise SchemaError(f"type {hint!r} has no JSON Schema mapping; pass parameters=... to @tool")

    # ------------------------------------------------------------------ simple kinds

    def _union(self, args: Tuple[Any, ...]) -> _Built:
        members = [a for a in args if a is not _NONE]
        is_nullable = len(members) != len(args)
        if len(members) == 1:
            inner = self.build(members[0])
            schema = nullable(inner.schema) if is_nullable else inner.schema
            return _Built(schema, is_nullable or inner.nullable, _or_none(inner.convert) if is_nullable else inner.convert)
        built = [self.build(m) for m in members]
        any_of: JSONObject = {"anyOf": [b.schema for b in built]}
        if is_nullable:
            any_of = nullable(any_of)
        convert = None
        if any(b.convert is not None for b in built):
            convert = _union_converter([b.convert for b in built], is_nullable)
        return _Built(any_of, is_nullable or any(b.nullable for b in built), convert)

    def _literal(self, values: List[Any]) -> _Built:
        schema: JSONObject = {"enum": values}
        kinds = {_json_type(v) for v in values}
        has_none = None in kinds
        kinds.discard(None)
        if len(kinds) == 1:
            kind = kinds.pop()
            schema = {"type": [kind, "null"] if has_none else kind, "enum": values}
        return _Built(schema, has_none, None)

    def _enum(self, cls: Type[enum.Enum]) -> _Built:
        values = [m.value for m in cls]
        kinds = {_json_type(v) for v in values}
        schema: JSONObject = {"enum": values}
        if len(kinds) == 1 and None not in kinds:
            schema = {"type": kinds.pop(), "enum": values}

        def convert(value: Any, path: str) -> Any:
            try:
                return cls(value)
            except ValueError:
                raise ArgumentError(f"argument `{path}`: {_show(value)} is not one of "
                                    f"{', '.join(_show(v) for v in values)}") from None

        return _Built(schema, False, convert)

    def _sequence(self, hint: Any, origin: Any, args: Tuple[Any, ...]) -> _Built:
        container = origin if origin is not None else hint
        abstract_set = typing.get_origin(typing.AbstractSet[int])
        schema: JSONObject = {"type": "array"}
        item_convs: List[Optional[Convert]] = []
        fixed = False  # tuple[A, B]: one converter per position
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if args == ((),):  # tuple[()]
                schema["maxItems"] = 0
            else:
                items = [self.build(a) for a in args]
                schema.update({"prefixItems": [b.schema for b in items], "minItems": len(items),
                               "maxItems": len(items)})
                item_convs = [b.convert for b in items]
                fixed = True
        elif args:
            item = self.build(args[0])
            schema["items"] = item.schema
            item_convs = [item.convert]
        if container in (set, frozenset) or container is abstract_set:
            schema["uniqueItems"] = True
        make: Optional[Callable[[List[Any]], Any]] = {
            tuple: tuple, set: set, frozenset: frozenset, abstract_set: set}.get(container)
        if make is None and not any(c is not None for c in item_convs):
            return _Built(schema, False, None)

        def convert(value: Any, path: str) -> Any:
            if not isinstance(value, list):
                raise ArgumentError(f"argument `{path}`: expected an array, got {_kind(value)}")
            out = []
            for i, v in enumerate(value):
                if fixed:
                    conv = item_convs[i] if i < len(item_convs) else None
                else:
                    conv = item_convs[0] if item_convs else None
                out.append(conv(v, f"{path}.{i}") if conv is not None and v is not None else v)
            return make(out) if make is not None else out

        return _Built(schema, False, convert)

    def _mapping(self, args: Tuple[Any, ...]) -> _Built:
        schema: JSONObject = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            value = self.build(args[1])
            schema["additionalProperties"] = value.schema
            if value.convert is not None:
                conv = value.convert

                def convert(v: Any, path: str) -> Any:
                    if not isinstance(v, dict):
                        raise ArgumentError(f"argument `{path}`: expected an object, got {_kind(v)}")
                    return {k: conv(x, f"{path}.{k}") for k, x in v.items()}

                return _Built(schema, False, convert)
        return _Built(schema, False, None)

    # ------------------------------------------------------------------ classes

    def _class(self, cls: type, build: Callable[[type], Tuple[JSONObject, Optional[Convert]]]) -> _Built:
        """A dataclass or TypedDict: inline, or `$ref` to `$defs` when it contains itself."""
        name = cls.__name__
        if cls in self._stack:
            self._recursive.add(cls)
            self._claim(name, cls)
            return _Built({"$ref": f"#/$defs/{name}"}, False, self._late(cls))
        self._stack.append(cls)
        try:
            schema, convert = build(cls)
        finally:
            self._stack.pop()
        self._converters[cls] = convert
        if cls in self._recursive:
            self.defs[name] = schema
            return _Built({"$ref": f"#/$defs/{name}"}, False, convert)
        return _Built(schema, False, convert)

    def _claim(self, name: str, owner: Any) -> None:
        prev = self._def_owner.setdefault(name, owner)
        if prev is not owner:
            raise SchemaError(f"two types are named {name} ({prev!r} and {owner!r}); "
                              "rename one, or pass parameters=... to @tool")

    def _late(self, cls: type) -> Convert:
        """The converter of a class still being built (recursion)."""
        def convert(value: Any, path: str) -> Any:
            conv = self._converters.get(cls)
            return conv(value, path) if conv is not None else value
        return convert

    def _fields(self, cls: type, hints: Dict[str, Any], names: List[str],
                has_default: Callable[[str], bool]) -> Tuple[JSONObject, Dict[str, Convert], List[str], Set[str]]:
        """Properties, converters, required names and nullable names of a class's fields."""
        description, field_docs = parse_docstring(_own_doc(cls))
        props: JSONObject = {}
        convs: Dict[str, Convert] = {}
        required: List[str] = []
        nullables: Set[str] = set()
        for fname in names:
            try:
                built = self.build(hints.get(fname, Any))
            except SchemaError as e:
                raise SchemaError(f"{cls.__name__}.{fname}: {e}") from None
            schema = dict(built.schema)
            if field_docs.get(fname) and "description" not in schema:
                schema["description"] = field_docs[fname]
            props[fname] = schema
            if built.convert is not None:
                convs[fname] = built.convert
            if built.nullable:
                nullables.add(fname)
            if not has_default(fname) and not built.nullable:
                required.append(fname)
        return props, convs, required, nullables

    def _object_schema(self, cls: type, props: JSONObject, required: List[str]) -> JSONObject:
        schema: JSONObject = {"type": "object"}
        description, _ = parse_docstring(_own_doc(cls))
        if description:
            schema["description"] = description
        schema["properties"] = props
        if required:
            schema["required"] = required
        schema["additionalProperties"] = False
        return schema

    def _dataclass(self, cls: type) -> Tuple[JSONObject, Optional[Convert]]:
        hints = _hints(cls)
        fields = [f for f in dataclasses.fields(cls) if f.init]
        defaults = {f.name for f in fields
                    if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
        names = [f.name for f in fields]
        props, convs, required, nullables = self._fields(cls, hints, names, lambda n: n in defaults)
        for f in fields:
            if f.default is not dataclasses.MISSING and f.default is not None and _json_safe(f.default):
                props[f.name] = {**props[f.name], "default": _as_json(f.default)}
        known = set(names)

        def convert(value: Any, path: str) -> Any:
            if isinstance(value, cls):
                return value
            if not isinstance(value, dict):
                raise ArgumentError(f"argument `{path}`: expected an object, got {_kind(value)}")
            unknown = [k for k in value if k not in known]
            if unknown:
                raise ArgumentError(f"argument `{path}`: unknown field{'s' if len(unknown) > 1 else ''} "
                                    f"{', '.join(f'`{k}`' for k in unknown)} ({cls.__name__} has "
                                    f"{', '.join(names) or 'no fields'})")
            kwargs: Dict[str, Any] = {}
            for fname in names:
                if fname in value:
                    v = value[fname]
                    conv = convs.get(fname)
                    kwargs[fname] = conv(v, f"{path}.{fname}") if conv is not None and v is not None else v
                elif fname in defaults:
                    continue
                elif fname in nullables:
                    kwargs[fname] = None
                else:
                    raise ArgumentError(f"argument `{path}`: missing field `{fname}`")
            try:
                return cls(**kwargs)
            except Exception as e:  # __post_init__ validation, pydantic dataclasses
                raise ArgumentError(f"argument `{path}`: {cls.__name__}: {type(e).__name__}: {e}") from None

        return self._object_schema(cls, props, required), convert

    def _typeddict(self, cls: type) -> Tuple[JSONObject, Optional[Convert]]:
        hints = _hints(cls)
        names = list(hints)
        required_keys = set(getattr(cls, "__required_keys__", names))
        props, convs, _, _ = self._fields(cls, hints, names, lambda n: n not in required_keys)
        required = [n for n in names if n in required_keys]
        schema = self._object_schema(cls, props, required)
        if not convs:
            return schema, None

        def convert(value: Any, path: str) -> Any:
            if not isinstance(value, dict):
                raise ArgumentError(f"argument `{path}`: expected an object, got {_kind(value)}")
            out = dict(value)
            for k, conv in convs.items():
                if k in out and out[k] is not None:
                    out[k] = conv(out[k], f"{path}.{k}")
            return out

        return schema, convert

    def _pydantic_model(self, pyd: Any, model: type) -> _Built:
        adapter = pyd.TypeAdapter(model)
        schema: JSONObject = dict(adapter.json_schema())
        for name, sub in (schema.pop("$defs", None) or {}).items():
            if name in self.defs and self.defs[name] != sub:
                raise SchemaError(f"two types are named {name} in the $defs of {model.__name__}; "
                                  "rename one, or pass parameters=... to @tool")
            self.defs[name] = sub
            self._def_owner.setdefault(name, ("pydantic", name))

        def convert(value: Any, path: str) -> Any:
            if isinstance(value, model):
                return value
            try:
                return adapter.validate_python(value)
            except pyd.ValidationError as e:
                problems = []
                for err in e.errors():
                    loc = ".".join(str(x) for x in err.get("loc", ()))
                    problems.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
                raise ArgumentError(f"argument `{path}`: {model.__name__}: {'; '.join(problems)}") from None

        return _Built(schema, False, convert)


def _own_doc(cls: type) -> Optional[str]:
    """The class's own docstring (not the generated dataclass signature, not inherited)."""
    doc = cls.__dict__.get("__doc__")
    if not isinstance(doc, str):
        return None
    if dataclasses.is_dataclass(cls) and doc.startswith(cls.__name__ + "("):
        return None
    return doc


def _hints(obj: Any) -> Dict[str, Any]:
    try:
        return typing.get_type_hints(obj, include_extras=True)
    except Exception:  # unresolvable forward references: the raw annotations
        return dict(getattr(obj, "__annotations__", {}))


def _to_int(value: Any, path: str) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _or_none(conv: Optional[Convert]) -> Optional[Convert]:
    if conv is None:
        return None

    def convert(value: Any, path: str) -> Any:
        return None if value is None else conv(value, path)

    return convert


def _union_converter(convs: List[Optional[Convert]], is_nullable: bool) -> Convert:
    """The first member that converts the value wins; plain members take it as is."""

    def convert(value: Any, path: str) -> Any:
        if value is None and is_nullable:
            return None
        errors = []
        for conv in convs:
            if conv is None:
                continue
            try:
                return conv(value, path)
            except ArgumentError as e:
                errors.append(str(e))
        if any(c is None for c in convs):
            return value
        raise ArgumentError(errors[0] if len(errors) == 1 else
                            f"argument `{path}`: {_show(value)} fits none of the types ({'; '.join(errors)})")

    return convert


def _is_sender(hint: Any) -> bool:
    return hint is Sender or (isinstance(hint, str) and hint.split(".")[-1] == "Sender")


def function_schema(func: Callable[..., Any]) -> FunctionSchema:
    """The description, JSON Schema, Sender parameter and argument binder of `func`.

    Raises SchemaError naming the parameter when a hint cannot be mapped.
    """
    sig = inspect.signature(func)
    hints = _hints(func)
    description, arg_docs = parse_docstring(inspect.getdoc(func))
    builder = _Builder()
    props: JSONObject = {}
    required: List[str] = []
    sender_param: Optional[str] = None
    convs: Dict[str, Convert] = {}
    fill_none: List[str] = []
    takes_extra = False
    for pname, param in sig.parameters.items():
        if param.kind == param.VAR_KEYWORD:
            takes_extra = True
            continue
        if param.kind == param.VAR_POSITIONAL:
            continue
        hint = hints.get(pname, param.annotation)
        if _is_sender(hint) or (pname == "sender" and hint is inspect.Parameter.empty):
            sender_param = pname
            continue
        try:
            built = builder.build(hint)
        except SchemaError as e:
            raise SchemaError(f"parameter `{pname}`: {e}") from None
        schema = dict(built.schema)
        if pname in arg_docs and arg_docs[pname] and "description" not in schema:
            schema["description"] = arg_docs[pname]
        if built.convert is not None:
            convs[pname] = built.convert
        if param.default is not inspect.Parameter.empty:
            if param.default is not None and _json_safe(param.default):
                schema["default"] = _as_json(param.default)
        elif built.nullable:
            fill_none.append(pname)
        else:
            required.append(pname)
        props[pname] = schema
    out: JSONObject = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    if not takes_extra:
        out["additionalProperties"] = False
    if builder.defs:
        out["$defs"] = builder.defs
    bind = _binder(list(props), required, fill_none, convs, takes_extra)
    return FunctionSchema(description, out, sender_param, bind)


def _binder(names: List[str], required: List[str], fill_none: List[str], convs: Dict[str, Convert],
            takes_extra: bool) -> Callable[[JSONObject], Dict[str, Any]]:
    known = frozenset(names)
    takes = ", ".join(names) if names else "no arguments"

    def bind(args: JSONObject) -> Dict[str, Any]:
        if not takes_extra and not known.issuperset(args):
            unknown = [k for k in args if k not in known]
            raise ArgumentError(f"arguments: unknown argument{'s' if len(unknown) > 1 else ''} "
                                f"{', '.join(f'`{k}`' for k in unknown)} (the tool takes {takes})")
        missing = [k for k in required if k not in args]
        if missing:
            raise ArgumentError(f"arguments: missing argument{'s' if len(missing) > 1 else ''} "
                                f"{', '.join(f'`{k}`' for k in missing)}")
        if not convs and not fill_none:
            return dict(args)
        out = dict(args)
        for k in fill_none:
            out.setdefault(k, None)
        for k, conv in convs.items():
            v = out.get(k)
            if v is not None:
                out[k] = conv(v, k)
        return out

    return bind

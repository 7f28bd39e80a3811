"""HomeAgent stage hooks: the `Stage` names and the `StageContext` handlers mutate.

Wire ↔ object conversion (`from_wire` / `to_wire`) parses the `*_json` fields
(context_msgs, tool_calls[].arguments, tool_results[].result, extra) so handlers see
plain Python values; the protobuf module is imported only by those two functions.
"""

from __future__ import annotations

import enum
import json
from typing import Any, Callable, Dict, Generic, List, Optional, Tuple, TypeVar, Union, cast, overload

_T = TypeVar("_T")

__all__ = ["Stage", "StageContext", "ToolCall", "ToolResult", "MemItem", "STAGES", "StageHookEntry",
           "from_wire", "to_wire", "stage_of", "priority_number"]


class Stage(str, enum.Enum):
    """HomeAgent pipeline stages; each member *is* its name string (`Stage.ON_INPUT == "on_input"`)."""

    ON_INPUT = "on_input"                 # message arrived, untouched (raw_message writable)
    PRE_ACTION = "pre_action"             # before the LLM call (context_msgs writable)
    POST_ACTION = "post_action"           # LLM answered (llm_text, tool_calls writable)
    BEFORE_TOOLCALL = "before_toolcall"   # before one tool call (tool_calls[].deny)
    AFTER_TOOLCALL = "after_toolcall"     # after one tool call (tool_results writable)
    BEFORE_OUTPUT = "before_output"       # final text ready (final_text writable)
    AFTER_OUTPUT = "after_output"         # reply sent (read only)

    def __str__(self) -> str:
        return self.value


#: Stage names in pipeline order; the wire enum value is index + 1.
STAGES = tuple(s.value for s in Stage)
_BY_NUMBER = {i + 1: s for i, s in enumerate(Stage)}


def stage_of(stage: Union[Stage, str, int], plugin: str) -> Stage:
    """A stage name ("on_input", any case), a `Stage`, or the wire number 1..7 → `Stage`."""
    if isinstance(stage, Stage):
        return stage
    if isinstance(stage, int) and not isinstance(stage, bool) and stage in _BY_NUMBER:
        return _BY_NUMBER[stage]
    if isinstance(stage, str) and stage.lower() in STAGES:
        return Stage(stage.lower())
    raise ValueError(f"plugin {plugin}: unknown stage {stage!r} (expected one of {', '.join(STAGES)})")


class _Record:
    """Attribute bag with a readable repr and equality by fields (`_fields`, else the
    slots)."""

    __slots__: Tuple[str, ...] = ()

    def _field_names(self) -> Tuple[str, ...]:
        names: Tuple[str, ...] = getattr(type(self), "_fields", None) or self.__slots__
        return names

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._field_names())
        return f"{type(self).__name__}({fields})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, k) == getattr(other, k) for k in self._field_names())

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> Dict[str, Any]:
        return {k: getattr(self, k) for k in self._field_names()}


class ToolCall(_Record):
    """A tool call the LLM asked for (HomeAgent ToolCall, plus `deny`).

    In `before_toolcall`, set `deny = True` (and `deny_reason`) to refuse this call only.
    """

    __slots__ = ("id", "name", "plugin", "arguments", "deny", "deny_reason")

    def __init__(self, id: str = "", name: str = "", plugin: str = "",
                 arguments: Optional[Dict[str, Any]] = None, deny: bool = False,
                 deny_reason: str = "") -> None:
        self.id = id
        self.name = name
        self.plugin = plugin
        self.arguments = {} if arguments is None else arguments
        self.deny = deny
        self.deny_reason = deny_reason


class ToolResult(_Record):
    """The result of one tool call as stage hooks see it (HomeAgent ToolResult)."""

    __slots__ = ("call_id", "name", "plugin", "success", "result")

    def __init__(self, call_id: str = "", name: str = "", plugin: str = "",
                 success: bool = False, result: Any = None) -> None:
        self.call_id = call_id
        self.name = name
        self.plugin = plugin
        self.success = success
        self.result = result


class MemItem(_Record):
    """One recalled memory item (HomeAgent MemItem)."""

    __slots__ = ("role", "content", "score")

    def __init__(self, role: str = "", content: str = "", score: float = 0.0) -> None:
        self.role = role
        self.content = content
        self.score = score


#: A lazy field not decoded from the wire yet.
_UNSET: Any = object()


class _Lazy(Generic[_T]):
    """A field decoded from the context's wire message on first use (read or write)."""

    __slots__ = ("slot", "decode")

    def __init__(self, name: str, decode: Callable[[Any], _T]) -> None:
        self.slot = "_" + name
        self.decode = decode

    @overload
    def __get__(self, obj: None, owner: Any) -> "_Lazy[_T]": ...

    @overload
    def __get__(self, obj: object, owner: Any) -> _T: ...

    def __get__(self, obj: Optional[object], owner: Any) -> Union[_T, "_Lazy[_T]"]:
        if obj is None:
            return self
        value = getattr(obj, self.slot)
        if value is _UNSET:
            value = self.decode(getattr(obj, "_wire"))
            setattr(obj, self.slot, value)
        result: _T = value
        return result

    def __set__(self, obj: object, value: _T) -> None:
        setattr(obj, self.slot, value)


class StageContext(_Record):
    """HomeAgent StageContext, as a stage handler sees and changes it.

    Attributes: `raw_message`, `user_id`, `group_id`, `context_msgs` (list of message
    dicts), `llm_text`, `reasoning_content`, `token_usage` (dict of ints), `tool_calls`
    (list of `ToolCall`), `tool_results` (list of `ToolResult`), `final_text`,
    `response` (None, or a string that short-circuits the pipeline to after_output),
    `phase` (the `Stage`), `memory` (list of `MemItem`), `no_memory`, `extra` (dict).
    Read only, not part of the context sent back: `traceparent` / `tracestate`, the W3C
    trace context of the broker's span for this hook run ("" when it does not trace).

    The handler changes it in place (or returns a new `StageContext`); the context goes
    back to the broker, which keeps only what the stage may write. The JSON-shaped
    fields of a context from the broker are decoded when first used: a hook that never
    touches `context_msgs` costs no JSON work for it.
    """

    _fields = ("raw_message", "user_id", "group_id", "context_msgs", "llm_text",
               "reasoning_content", "token_usage", "tool_calls", "tool_results", "final_text",
               "response", "phase", "memory", "no_memory", "extra")
    __slots__ = ("raw_message", "user_id", "group_id", "_context_msgs", "llm_text",
                 "reasoning_content", "_token_usage", "_tool_calls", "_tool_results", "final_text",
                 "response", "phase", "_memory", "no_memory", "_extra", "_wire", "traceparent",
                 "tracestate")

    def __init__(self, raw_message: str = "", user_id: str = "", group_id: str = "",
                 context_msgs: Optional[List[Dict[str, Any]]] = None, llm_text: str = "",
                 reasoning_content: str = "", token_usage: Optional[Dict[str, int]] = None,
                 tool_calls: Optional[List[ToolCall]] = None,
                 tool_results: Optional[List[ToolResult]] = None, final_text: str = "",
                 response: Optional[str] = None, phase: Any = "", memory: Optional[List[MemItem]] = None,
                 no_memory: bool = False, extra: Optional[Dict[str, Any]] = None) -> None:
        self._wire: Any = None
        self.traceparent = ""
        self.tracestate = ""
        self.raw_message = raw_message
        self.user_id = user_id
        self.group_id = group_id
        self._context_msgs = [] if context_msgs is None else context_msgs
        self.llm_text = llm_text
        self.reasoning_content = reasoning_content
        self._token_usage = {} if token_usage is None else token_usage
        self._tool_calls = [] if tool_calls is None else tool_calls
        self._tool_results = [] if tool_results is None else tool_results
        self.final_text = final_text
        self.response = response
        self.phase = phase
        self._memory = [] if memory is None else memory
        self.no_memory = no_memory
        self._extra = {} if extra is None else extra

    context_msgs: _Lazy[List[Dict[str, Any]]] = _Lazy(
        "context_msgs", lambda c: _parse(c.context_msgs_json, [], "context_msgs_json"))
    token_usage: _Lazy[Dict[str, int]] = _Lazy(
        "token_usage", lambda c: {k: int(v) for k, v in c.token_usage.items()})
    tool_calls: _Lazy[List[ToolCall]] = _Lazy("tool_calls", lambda c: [
        ToolCall(t.id, t.name, t.plugin, _parse(t.arguments_json, {}, "tool_calls.arguments_json"),
                 t.deny, t.deny_reason) for t in c.tool_calls])
    tool_results: _Lazy[List[ToolResult]] = _Lazy("tool_results", lambda c: [
        ToolResult(r.call_id, r.name, r.plugin, r.success,
                   _parse(r.result_json, None, "tool_results.result_json")) for r in c.tool_results])
    memory: _Lazy[List[MemItem]] = _Lazy(
        "memory", lambda c: [MemItem(m.role, m.content, m.score) for m in c.memory])
    extra: _Lazy[Dict[str, Any]] = _Lazy("extra", lambda c: _parse(c.extra_json, {}, "extra_json"))


class StageHookEntry:
    """One registered hook (internal)."""

    __slots__ = ("hook_id", "stage", "own_tools_only", "handler", "no_context_msgs")

    def __init__(self, hook_id: str, stage: Stage, own_tools_only: bool,
                 handler: Callable[[StageContext], Any], no_context_msgs: bool = False) -> None:
        self.hook_id = hook_id
        self.stage = stage
        self.own_tools_only = own_tools_only
        self.handler = handler
        self.no_context_msgs = no_context_msgs


#: Input priority levels (seed): background 1, message 2, interactive 3, critical 4.
PRIORITIES = ("background", "message", "interactive", "critical")


def priority_number(priority: Any, plugin: str) -> int:
    """None → 0 (the default of the path); a level name or 1–4 → its wire number."""
    if priority is None:
        return 0
    if isinstance(priority, int) and not isinstance(priority, bool) and 1 <= priority <= 4:
        return priority
    if isinstance(priority, str) and priority.lower() in PRIORITIES:
        return PRIORITIES.index(priority.lower()) + 1
    raise ValueError(f"plugin {plugin}: unknown priority {priority!r} "
                     f"(expected one of {', '.join(PRIORITIES)} or 1-4)")


# ---------------------------------------------------------------- wire conversion


def _parse(text: str, empty: Any, what: str) -> Any:
    if not text:
        return empty
    try:
        return json.loads(text)
    except ValueError as e:
        raise ValueError(f"StageContext.{what} is not JSON: {e}") from None


def _json(value: Any) -> str:
    return "" if value is None else json.dumps(value, ensure_ascii=False, default=str)


def _get(item: Any, key: str, default: Any = None) -> Any:
    """A field of a list item given as an object or a dict."""
    if isinstance(item, dict):
        return item.get(key, default)
    return getattr(item, key, default)


def from_wire(c: Any) -> StageContext:
    """Wire `hearth.v1.StageContext` → `StageContext`; its JSON fields are parsed when
    the handler first uses them."""
    ctx = StageContext.__new__(StageContext)
    ctx._wire = c
    ctx.traceparent = ctx.tracestate = ""
    ctx.raw_message = c.raw_message
    ctx.user_id = c.user_id
    ctx.group_id = c.group_id
    ctx.llm_text = c.llm_text
    ctx.reasoning_content = c.reasoning_content
    ctx.final_text = c.final_text
    ctx.response = c.response if c.HasField("response") else None
    ctx.phase = _BY_NUMBER.get(c.phase, "")
    ctx.no_memory = c.no_memory
    ctx._context_msgs = ctx._token_usage = ctx._tool_calls = _UNSET
    ctx._tool_results = ctx._memory = ctx._extra = _UNSET
    return ctx


def _unused(ctx: Any, name: str) -> bool:
    """True when `ctx` came from the wire and the handler never used field `name`."""
    return getattr(ctx, "_wire", None) is not None and getattr(ctx, "_" + name, None) is _UNSET


def to_wire(ctx: StageContext) -> Any:
    """`StageContext` → wire `hearth.v1.StageContext` (list items may be objects or dicts).
    Fields of a context from the wire that the handler never used go back as they came."""
    from .v1 import plugin_pb2 as pb  # protobuf: loaded when a plugin is served

    def s(v: Any) -> str:
        return "" if v is None else str(v)

    wire: Optional[pb.StageContext] = getattr(ctx, "_wire", None)
    phase = cast("pb.Stage", STAGES.index(str(ctx.phase)) + 1 if str(ctx.phase) in STAGES else 0)
    lazy = ("context_msgs", "token_usage", "tool_calls", "tool_results", "memory", "extra")
    if wire is not None and all(_unused(ctx, f) for f in lazy):
        # Only plain fields can differ: copy the wire and set them.
        w = pb.StageContext()
        w.CopyFrom(wire)
        w.raw_message, w.user_id, w.group_id = s(ctx.raw_message), s(ctx.user_id), s(ctx.group_id)
        w.llm_text, w.reasoning_content = s(ctx.llm_text), s(ctx.reasoning_content)
        w.final_text, w.phase, w.no_memory = s(ctx.final_text), phase, bool(ctx.no_memory)
        if ctx.response is None:
            w.ClearField("response")
        else:
            w.response = str(ctx.response)
        return w
    kept = wire if wire is not None else pb.StageContext()  # only read where _unused()
    w = pb.StageContext(
        raw_message=s(ctx.raw_message),
        user_id=s(ctx.user_id),
        group_id=s(ctx.group_id),
        context_msgs_json=kept.context_msgs_json if _unused(ctx, "context_msgs") else _json(ctx.context_msgs),
        llm_text=s(ctx.llm_text),
        reasoning_content=s(ctx.reasoning_content),
        token_usage=(kept.token_usage if _unused(ctx, "token_usage")
                     else {str(k): int(v or 0) for k, v in (ctx.token_usage or {}).items()}),
        final_text=s(ctx.final_text),
        phase=phase,
        no_memory=bool(ctx.no_memory),
        extra_json=kept.extra_json if _unused(ctx, "extra") else _json(ctx.extra),
    )
    if _unused(ctx, "tool_calls"):
        w.tool_calls.extend(kept.tool_calls)
    if _unused(ctx, "tool_results"):
        w.tool_results.extend(kept.tool_results)
    if _unused(ctx, "memory"):
        w.memory.extend(kept.memory)
    for t in [] if _unused(ctx, "tool_calls") else ctx.tool_calls or []:
        w.tool_calls.add(id=s(_get(t, "id")), name=s(_get(t, "name")), plugin=s(_get(t, "plugin")),
                         arguments_json=_json(_get(t, "arguments")), deny=bool(_get(t, "deny")),
                         deny_reason=s(_get(t, "deny_reason")))
    for r in [] if _unused(ctx, "tool_results") else ctx.tool_results or []:
        w.tool_results.add(call_id=s(_get(r, "call_id")), name=s(_get(r, "name")),
                           plugin=s(_get(r, "plugin")), success=bool(_get(r, "success")),
                           result_json=_json(_get(r, "result")))
    for m in [] if _unused(ctx, "memory") else ctx.memory or []:
        w.memory.add(role=s(_get(m, "role")), content=s(_get(m, "content")),
                     score=float(_get(m, "score") or 0.0))
    if ctx.response is not None:
        w.response = str(ctx.response)
    return w

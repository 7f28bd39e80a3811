"""Types every other module shares: `HostError`, `Sender`, `ToolInfo`, `ToolEntry`, the
current call behind `progress()` and `current_trace_context()`, and the JSON aliases.

This module imports nothing of ours, so any module may import it without a cycle
(the loader, the runtime, the schema code, the host clients and the test harness all
do). It imports no gRPC either: `import hearth_plugin` stays cheap.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
from typing import Any, Awaitable, Callable, Dict, Generator, List, Optional, Tuple, Union

__all__ = ["JSON", "JSONObject", "ArgumentError", "HostError", "PluginLoadError", "StatusCode",
           "Sender", "ToolInfo", "ToolEntry", "CallContext", "current_call", "current_trace",
           "current_trace_context", "is_async_callable", "progress", "to_json"]

#: Any JSON value as Python builds it from JSON text.
JSON = Union[None, bool, int, float, str, List["JSON"], Dict[str, "JSON"]]
#: A JSON object (tool arguments, settings dumps …).
JSONObject = Dict[str, Any]


# One encoder for every call: json.dumps with options builds a new one each time.
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)


def to_json(value: Any) -> str:
    """JSON text of `value` (UTF-8 kept as is; unknown objects via str())."""
    return _ENCODER.encode(value)


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """Whether calling `fn` gives a coroutine to await (an `async def`, a partial of
    one, or an object whose `__call__` is one)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


class StatusCode(str):
    """A gRPC status name (`"NOT_FOUND"`) that also equals the `grpc.StatusCode` member
    of that name and keeps its `.name`, so both `e.code == "NOT_FOUND"` and
    `e.code == grpc.StatusCode.NOT_FOUND` hold."""

    __slots__ = ()

    @property
    def name(self) -> str:
        """The status name itself (as `grpc.StatusCode.X.name`)."""
        return str(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return str.__eq__(self, other)
        name = getattr(other, "name", None)
        return type(other).__name__ == "StatusCode" and isinstance(name, str) and str.__eq__(self, name)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__

    def __repr__(self) -> str:
        return f"StatusCode({str(self)!r})"


class HostError(Exception):
    """A host-service call failed; the message names the plugin, the method and the status.

    `code` is the gRPC status name as a `StatusCode` (`e.code == "NOT_FOUND"`; it also
    equals `grpc.StatusCode.NOT_FOUND` and has `.name`); `UNIMPLEMENTED` while the
    broker does not serve the service. `details` is the broker's own message,
    `method` the full rpc name (`hearth.v1.Settings/Get`).
    """

    code: Optional[StatusCode]

    def __init__(self, message: str, code: Any = None, method: str = "", details: str = "") -> None:
        super().__init__(message)
        if code is not None and not isinstance(code, StatusCode):
            code = StatusCode(code if isinstance(code, str) else getattr(code, "name", str(code)))
        self.code = code
        self.method = method
        self.details = details or message


class _Sent:
    """What `Sender.reply` returns: awaitable (a no-op) so `await sender.reply(...)` works."""

    __slots__ = ()

    def __await__(self) -> Generator[None, None, None]:
        return
        yield  # a generator that ends at once

    def __repr__(self) -> str:
        return "<reply sent>"


_SENT = _Sent()


class Sender:
    """Who a call is made for (LinkZone `sender`), plus the event of an inject call.

    Attributes: `user_id`, `group_id`, `channel`, `session_id`; for `handle_event`
    also `message` (the matched text) and `params` (parsed parameters). `traceparent` and
    `tracestate`: the W3C trace context of the broker span the call belongs to, "" when
    the broker does not trace (see `current_trace_context()`).
    """

    __slots__ = ("user_id", "group_id", "channel", "session_id", "message", "params", "_reply",
                 "traceparent", "tracestate")

    def __init__(self, user_id: str = "", group_id: str = "", channel: str = "",
                 session_id: str = "", message: str = "", params: Optional[List[str]] = None,
                 reply: Optional[Callable[[str], None]] = None, traceparent: str = "",
                 tracestate: str = "") -> None:
        self.user_id = user_id
        self.group_id = group_id
        self.channel = channel
        self.session_id = session_id
        self.message = message
        self.params: List[str] = list(params or [])
        self._reply = reply
        self.traceparent = traceparent
        self.tracestate = tracestate

    def param(self, index: int) -> Optional[str]:
        """Parameter `index` of the matched command (LinkZone `sender.param(i)`), or None."""
        if 0 <= index < len(self.params):
            return self.params[index]
        return None

    def reply(self, text: Any) -> Awaitable[None]:
        """Send `text` to the user (inject mode; may be called several times, in order).

        Callable from both async handlers and plain handlers running in a thread. The
        message is queued at once; the return value may be awaited (`await
        sender.reply(...)`, as LinkZone's Node plugins write it) or ignored. Values that
        are not strings are sent as JSON text.
        """
        if self._reply is None:
            raise RuntimeError("sender.reply() is only available in handle_event")
        self._reply(text if isinstance(text, str) else to_json(text))
        return _SENT

    def __repr__(self) -> str:
        return (f"Sender(user_id={self.user_id!r}, group_id={self.group_id!r}, "
                f"channel={self.channel!r}, session_id={self.session_id!r})")


class ToolInfo:
    """What a `@tool` / `@plugin.tool` decoration declares about one function.

    `description` and `parameters` left as None are derived from the function's
    docstring and type hints when the plugin registers.
    """

    __slots__ = ("func", "name", "description", "parameters", "serial", "owner")

    def __init__(self, func: Callable[..., Any], name: str, description: Optional[str],
                 parameters: Optional[JSONObject], serial: bool, owner: Optional[object] = None) -> None:
        self.func = func
        self.name = name
        self.description = description
        self.parameters = parameters
        self.serial = serial
        #: The Plugin instance of `@plugin.tool`; None for `@tool` (the module's plugin).
        self.owner = owner


class ToolEntry:
    """One tool as the runtime registers and calls it (internal).

    `kind` says how it is called: "value" (HomeAgent `handler(args)`), "kwargs" (a
    `@tool` function, its arguments bound by `bind`) or "linkzone"
    (`execute_tool(sender, args)`). `bind` turns the arguments object into keyword
    arguments of the declared types, raising `ArgumentError` before the handler runs.
    `is_async`: `func` is awaited on the event loop (else it runs in the thread pool).
    """

    __slots__ = ("name", "description", "parameters", "ai_tool", "serial", "kind", "func",
                 "sender_param", "bind", "is_async")

    def __init__(self, name: str, *, description: str = "", parameters: Optional[JSONObject] = None,
                 ai_tool: Optional[JSONObject] = None, serial: bool = False, kind: str,
                 func: Callable[..., Any], sender_param: Optional[str] = None,
                 bind: Optional[Callable[[JSONObject], Dict[str, Any]]] = None) -> None:
        self.name = name
        self.description = description
        self.parameters = parameters
        self.ai_tool = ai_tool
        self.serial = serial
        self.kind = kind
        self.func = func
        self.sender_param = sender_param
        self.bind = bind
        self.is_async = is_async_callable(func)


class ArgumentError(ValueError):
    """The arguments of a call do not fit the tool's parameters (unknown or missing
    arguments, a value that cannot become the declared type); raised before the
    handler runs. The message names the argument: "argument `address.zip`: …"."""


class PluginLoadError(Exception):
    """The plugin could not be loaded, does not define a plugin, or its `start()`
    failed; the message names the file or the plugin."""


class CallContext:
    """The call a handler is running for; reached through `progress()`.

    `traceparent` / `tracestate`: the W3C trace context the broker sent with the call
    ("" when it does not trace)."""

    __slots__ = ("call_id", "tool", "send_progress", "traceparent", "tracestate")

    def __init__(self, call_id: int, tool_name: str,
                 send_progress: Callable[[int, str, float, float, float], None],
                 traceparent: str = "", tracestate: str = "") -> None:
        self.call_id = call_id
        self.tool = tool_name
        #: (call_id, message, fraction, progress, total) → sends one Progress message.
        self.send_progress = send_progress
        self.traceparent = traceparent
        self.tracestate = tracestate


current_call: contextvars.ContextVar[Optional[CallContext]] = contextvars.ContextVar(
    "hearth_current_call", default=None)

#: (traceparent, tracestate) of the tool call, stage hook or event running in this
#: thread / task; set by the runtime for all three.
current_trace: contextvars.ContextVar[Tuple[str, str]] = contextvars.ContextVar(
    "hearth_current_trace", default=("", ""))


def current_trace_context() -> Tuple[str, str]:
    """`(traceparent, tracestate)` of the call running in this thread or task: the W3C
    trace context of the broker span the tool call, stage hook or event belongs to, as
    the broker sent it. `("", "")` when the broker does not trace, or outside a call.

    When `opentelemetry-api` is installed the SDK already runs handlers inside this
    context (spans a handler starts are children of the broker's span); this is for
    handlers that propagate it some other way (an HTTP header, another tracer).
    """
    return current_trace.get()


def _number(name: str, v: Any) -> float:
    try:
        return float(v)
    except (TypeError, ValueError):
        raise TypeError(f"hearth_plugin.progress(): {name} must be a number, got {v!r}") from None


def progress(message: str = "", fraction: Optional[float] = None, *,
             value: Optional[float] = None, total: Optional[float] = None) -> None:
    """Report progress of the current tool call (extends its timeout on the broker).

    Works in async handlers and in plain handlers running in the thread pool.
    `fraction` is 0..1 when known, negative or None otherwise. `value` (work done) and
    `total` (all of it, when known) report a count instead: `progress("page 3",
    value=3, total=10)` is "3 of 10"; the broker passes counts on to callers as they are
    (MCP `progress` / `total`). When only counts are given, the fraction is derived from
    them (value / total) for brokers that read only the fraction. Outside a tool call it
    raises `RuntimeError`.
    """
    ctx = current_call.get()
    if ctx is None:
        raise RuntimeError("hearth_plugin.progress() called outside a tool call")
    done = 0.0 if value is None else _number("value", value)
    whole = 0.0 if total is None else _number("total", total)
    if fraction is not None:
        frac = _number("fraction", fraction)
    elif whole > 0 and value is not None:
        frac = min(max(done / whole, 0.0), 1.0)
    else:
        frac = -1.0
    ctx.send_progress(ctx.call_id, str(message), frac, done, whole)

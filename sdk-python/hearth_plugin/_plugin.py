"""What plugin code touches: `Plugin`, `@tool`, `Sender`, `PluginSDK`, `progress()`.

This module imports nothing heavy (no grpc, no inspect) so that `import hearth_plugin` stays
cheap; the runtime (`hearth_plugin._runtime`) is imported only when a plugin is served.
"""

from __future__ import annotations

import contextvars
import threading
TYPE_CHECKING = False

if TYPE_CHECKING:  # typing costs ~5 ms at import; annotations are strings here
    from typing import Any, Callable, Dict, List, Optional

__all__ = ["HostError", "Plugin", "PluginSDK", "Sender", "StatusCode", "ToolInfo", "tool", "progress"]


class StatusCode(str):
    """A gRPC status name (`"NOT_FOUND"`) that also equals the `grpc.StatusCode` member
    of that name and keeps its `.name`, so both `e.code == "NOT_FOUND"` and
    `e.code == grpc.StatusCode.NOT_FOUND` hold."""

    __slots__ = ()

    @property
    def name(self) -> str:
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

    def __init__(self, message: str, code: Any = None, method: str = "", details: str = "") -> None:
        super().__init__(message)
        if code is not None and not isinstance(code, StatusCode):
            code = StatusCode(code if isinstance(code, str) else getattr(code, "name", str(code)))
        self.code = code
        self.method = method
        self.details = details or message


class ToolInfo:
    """What a `@tool` / `@plugin.tool` decoration declares about one function.

    `description` and `parameters` left as None are derived from the function's
    docstring and type hints when the plugin registers.
    """

    __slots__ = ("func", "name", "description", "parameters", "serial")

    def __init__(self, func: Callable, name: str, description: Optional[str],
                 parameters: Optional[dict], serial: bool) -> None:
        self.func = func
        self.name = name
        self.description = description
        self.parameters = parameters
        self.serial = serial


def _mark(func: Callable, name: Optional[str], description: Optional[str],
          parameters: Optional[dict], serial: bool) -> Callable:
    if not callable(func):
        raise TypeError(f"@tool: {func!r} is not callable")
    tool_name = name or getattr(func, "__name__", None)
    if not tool_name or not isinstance(tool_name, str):
        raise TypeError(f"@tool: cannot name the tool for {func!r}; pass name=...")
    func.__hearth_tool__ = ToolInfo(func, tool_name, description, parameters, serial)  # type: ignore[attr-defined]
    return func


def tool(func: Optional[Callable] = None, *, name: Optional[str] = None,
         description: Optional[str] = None, parameters: Optional[dict] = None,
         serial: bool = False) -> Any:
    """Declare a function as a tool; usable bare (`@tool`) or with options (`@tool(name=...)`).

    On a module-level function, `python -m hearth_plugin run` registers it. On a method of a
    `Plugin` subclass, the plugin instance registers the bound method.

    The JSON Schema of the arguments comes from the type hints (str, int, float, bool,
    list[...], dict, Optional[...], Literal[...]; a parameter with a default is not
    required) unless `parameters` gives one; the description is the docstring's first
    paragraph unless `description` is given; Google-style ``Args:`` lines describe the
    parameters. A parameter annotated `hearth.Sender` receives the caller and is not
    part of the schema. Handlers may be `async def` or plain `def` (run in a thread).
    """
    if func is not None:
        return _mark(func, name, description, parameters, serial)
    return lambda f: _mark(f, name, description, parameters, serial)


class Sender:
    """Who a call is made for (LinkZone `sender`), plus the event of an inject call.

    Attributes: `user_id`, `group_id`, `channel`, `session_id`; for `handle_event`
    also `message` (the matched text) and `params` (parsed parameters).
    """

    __slots__ = ("user_id", "group_id", "channel", "session_id", "message", "params", "_reply")

    def __init__(self, user_id: str = "", group_id: str = "", channel: str = "",
                 session_id: str = "", message: str = "", params: Optional[List[str]] = None,
                 reply: Optional[Callable[[str], None]] = None) -> None:
        self.user_id = user_id
        self.group_id = group_id
        self.channel = channel
        self.session_id = session_id
        self.message = message
        self.params = list(params or [])
        self._reply = reply

    def param(self, index: int) -> Optional[str]:
        """Parameter `index` of the matched command (LinkZone `sender.param(i)`), or None."""
        if 0 <= index < len(self.params):
            return self.params[index]
        return None

    def reply(self, text: Any) -> "_Sent":
        """Send `text` to the user (inject mode; may be called several times, in order).

        Callable from both async handlers and plain handlers running in a thread. The
        message is queued at once; the return value may be awaited (`await
        sender.reply(...)`, as LinkZone's Node plugins write it) or ignored. Values that
        are not strings are sent as JSON text.
        """
        if self._reply is None:
            raise RuntimeError("sender.reply() is only available in handle_event")
        if not isinstance(text, str):
            from ._result import to_json
            text = to_json(text)
        self._reply(text)
        return _SENT

    def __repr__(self) -> str:
        return (f"Sender(user_id={self.user_id!r}, group_id={self.group_id!r}, "
                f"channel={self.channel!r}, session_id={self.session_id!r})")


class _Sent:
    """What `Sender.reply` returns: awaitable (a no-op) so `await sender.reply(...)` works."""

    __slots__ = ()

    def __await__(self):  # type: ignore[no-untyped-def]
        return iter(())

    def __repr__(self) -> str:
        return "<reply sent>"


_SENT = _Sent()


class _CallContext:
    """The call a handler is running for; reached through `progress()`."""

    __slots__ = ("call_id", "tool", "send_progress")

    def __init__(self, call_id: int, tool_name: str, send_progress: Callable[[int, str, float], None]):
        self.call_id = call_id
        self.tool = tool_name
        self.send_progress = send_progress


_current_call: contextvars.ContextVar[Optional[_CallContext]] = contextvars.ContextVar(
    "hearth_current_call", default=None)


def progress(message: str = "", fraction: float = -1.0) -> None:
    """Report progress of the current tool call (extends its timeout on the broker).

    Works in async handlers and in plain handlers running in the thread pool;
    `fraction` is 0..1 when known, negative otherwise.
    """
    ctx = _current_call.get()
    if ctx is None:
        raise RuntimeError("hearth.progress() called outside a tool call")
    ctx.send_progress(ctx.call_id, str(message), float(fraction))


class ToolEntry:
    """One tool as the runtime registers it (internal)."""

    __slots__ = ("name", "description", "parameters", "ai_tool", "serial", "kind", "func",
                 "sender_param")

    def __init__(self, name: str, *, description: str = "", parameters: Optional[dict] = None,
                 ai_tool: Optional[dict] = None, serial: bool = False, kind: str, func: Callable,
                 sender_param: Optional[str] = None):
        self.name = name
        self.description = description
        self.parameters = parameters
        self.ai_tool = ai_tool
        self.serial = serial
        # "value" (HomeAgent handler(args)), "kwargs" (@tool function), "linkzone"
        # (execute_tool(sender, args)).
        self.kind = kind
        self.func = func
        # For "kwargs" tools: the parameter that receives the Sender, if any.
        self.sender_param = sender_param


class PluginSDK:
    """The object HomeAgent-style plugins receive in `start(self, sdk)`.

    `register_tool(name, tool_def, handler)`: `tool_def` is a dict (or an object with
    attributes) with `description` and `parameters` (a JSON Schema of the arguments
    object; `name` optional); `handler(args)` gets the arguments dict and returns any
    value: a string is the content as is, other values travel as JSON, and a dict with
    `isError: True` is an error result whose text is its `content`.

    `register_stage(stage, handler)` / `register_stage_own_tools(stage, handler)` add
    pipeline hooks (in `start()` only); the handler gets a `hearth.StageContext`.
    `inject_text(source, channel, text)` (and `_no_memory`, `inject_interrupt_text`) and
    the typed APIs `settings()`, `memory()`, `text_memory()`, `doc_memory()`,
    `knowledge()`, `llm()` (seed names, plain Python values) reach the broker's host
    services; `host` (and `input()`) are the generic clients returning the wire
    messages. Blocking in plain code, awaitable on the plugin's event loop; failures
    raise `HostError`.
    """

    def __init__(self, plugin_name: str) -> None:
        self._plugin_name = plugin_name
        self._tools: Dict[str, ToolEntry] = {}
        self._stages: List[Any] = []  # StageHookEntry, in registration order
        self._started = False  # set once start() returned: no more stage hooks
        self._lock = threading.Lock()
        self._loop: Any = None  # the serving event loop (set by the loader)
        self._conn: Any = None  # hearth._host.Connection, created on first host call
        self._clients: Dict[str, Any] = {}  # generic clients (sdk.host.*)
        self._apis: Dict[str, Any] = {}  # typed APIs (sdk.settings() …)
        # Set by the runtime once registered: sends later registrations on the stream.
        self._live_register: Optional[Callable[[ToolEntry], None]] = None
        self._live_unregister: Optional[Callable[[str], None]] = None

    @property
    def plugin_name(self) -> str:
        """Name of the plugin this SDK object belongs to."""
        return self._plugin_name

    def register_tool(self, name: str, tool_def: Any, handler: Callable[[dict], Any]) -> None:
        """Register tool `name` (unique across all plugins) with its definition and handler."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"plugin {self._plugin_name}: register_tool: name must be a non-empty string")
        if not callable(handler):
            raise TypeError(f"plugin {self._plugin_name}: tool {name}: handler is not callable")

        def field(key: str) -> Any:
            if isinstance(tool_def, dict):
                return tool_def.get(key)
            return getattr(tool_def, key, None) or getattr(tool_def, key.capitalize(), None)

        params = field("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, dict):
            raise TypeError(f"plugin {self._plugin_name}: tool {name}: parameters must be a JSON Schema dict")
        entry = ToolEntry(name, description=str(field("description") or ""), parameters=params,
                          serial=bool(field("serial")), kind="value", func=handler)
        with self._lock:
            if name in self._tools:
                raise ValueError(f"plugin {self._plugin_name}: tool {name} registered twice")
            self._tools[name] = entry
            live = self._live_register
        if live is not None:
            live(entry)

    def unregister_tool(self, name: str) -> None:
        """Remove tool `name` registered earlier by this plugin."""
        with self._lock:
            if self._tools.pop(name, None) is None:
                raise KeyError(f"plugin {self._plugin_name}: no tool {name} to unregister")
            live = self._live_unregister
        if live is not None:
            live(name)


    # ---------------------------------------------------------------- stage hooks

    def register_stage(self, stage: Any, handler: Callable[[Any], Any], *,
                       context_msgs: bool = True) -> None:
        """Run `handler(ctx)` at pipeline stage `stage` (HomeAgent `RegisterStage`).

        `stage` is "on_input" … "after_output" or a `hearth.Stage`. The handler (sync or
        async) gets a `hearth.StageContext` with the fields its stage may read (see the
        README's permission matrix) and changes it in place (or returns a new one);
        raising fails the hook with the exception's text. Hooks of one stage run in
        registration order. Only in `start()`: hooks travel in `Register`.

        `context_msgs=False` declares that a pre_action hook does not read the
        conversation (`ctx.context_msgs` arrives empty and what it holds afterwards is
        ignored), which saves sending the whole history to it. `async def` handlers run
        on the plugin's event loop; plain `def` ones in a thread pool (one thread hop,
        ~0.1 ms, per call).
        """
        self._add_stage(stage, handler, False, context_msgs)

    def register_stage_own_tools(self, stage: Any, handler: Callable[[Any], Any], *,
                                 context_msgs: bool = True) -> None:
        """Like `register_stage`, but in before_toolcall / after_toolcall the hook sees only
        calls of this plugin's own tools (HomeAgent `RegisterStageOwnTools`); at other
        stages it is a plain `register_stage`."""
        self._add_stage(stage, handler, True, context_msgs)

    def _add_stage(self, stage: Any, handler: Callable[[Any], Any], own_tools_only: bool,
                   context_msgs: bool = True) -> None:
        from ._stages import StageHookEntry, stage_of
        st = stage_of(stage, self._plugin_name)
        what = f"plugin {self._plugin_name}: stage hook {st.value}"
        if not callable(handler):
            raise TypeError(f"{what}: handler is not callable")
        with self._lock:
            if self._started:
                raise RuntimeError(f"{what}: stage hooks can only be registered in start()")
            hook_id = f"{st.value}#{len(self._stages)}"
            self._stages.append(StageHookEntry(hook_id, st, own_tools_only, handler,
                                               no_context_msgs=not context_msgs))

    # ---------------------------------------------------------------- host services

    def _connection(self) -> Any:
        with self._lock:
            if self._conn is None:
                if self._loop is None:
                    raise RuntimeError(f"plugin {self._plugin_name}: host services are only "
                                       "available while the plugin is served by the broker")
                from ._host import Connection
                self._conn = Connection(self._plugin_name, self._loop)
            return self._conn

    def _client(self, attr: str) -> Any:
        client = self._clients.get(attr)
        if client is None:
            from ._host import ServiceClient
            client = self._clients.setdefault(attr, ServiceClient(self._connection, self._plugin_name, attr))
        return client

    @property
    def host(self) -> Any:
        """All host-service clients as attributes: `sdk.host.settings`, `.memory`,
        `.text_memory`, `.doc_memory`, `.knowledge`, `.llm`, `.input`."""
        from ._host import Host
        return Host(self._client, self._plugin_name)

    def _api(self, attr: str) -> Any:
        api = self._apis.get(attr)
        if api is None:
            from ._apis import APIS
            api = self._apis.setdefault(attr, APIS[attr](self._connection, self._plugin_name))
        return api

    def settings(self) -> Any:
        """HomeAgent `Settings()`: a `hearth.SettingsAPI` (`get(key)` → value, `set(key,
        value)`, `list(prefix)`, `get_core` / `set_core` / `list_core`, `get_plugin` /
        `set_plugin` / `list_plugin`, `register_def`, `defs`, `dump`, `plugins`)."""
        return self._api("settings")

    def memory(self) -> Any:
        """HomeAgent `Memory()`: a `hearth.MemoryAPI` (graph memory: `recall`, `commit`,
        `introspect`, `merge_entities`, `purge`)."""
        return self._api("memory")

    def text_memory(self) -> Any:
        """HomeAgent `TextMemory()`: a `hearth.TextMemoryAPI` (`append`)."""
        return self._api("text_memory")

    def doc_memory(self) -> Any:
        """HomeAgent `DocMemory()`: a `hearth.DocMemoryAPI` (`query`, `insert`, `remove`,
        `stats`)."""
        return self._api("doc_memory")

    def knowledge(self) -> Any:
        """HomeAgent `Knowledge()`: a `hearth.KnowledgeAPI` (`search`, `add`, `list`)."""
        return self._api("knowledge")

    def llm(self) -> Any:
        """HomeAgent `LLM()`: a `hearth.LLMAPI` (`list_sources`, `set_source`,
        `current_source`)."""
        return self._api("llm")

    def input(self) -> Any:
        """`Input` service: `inject_text`, `inject_text_no_memory`, `inject_interrupt_text`."""
        return self._client("input")

    def _inject(self, method: str, source: Optional[str], channel: str, text: str,
                user_id: str, group_id: str, priority: Any) -> Any:
        from ._stages import priority_number
        call = getattr(self.input(), method)
        return call(source=source or self._plugin_name, channel=str(channel), text=str(text),
                    user_id=str(user_id or ""), group_id=str(group_id or ""),
                    priority=priority_number(priority, self._plugin_name))

    def inject_text(self, source: Optional[str], channel: str, text: str, *,
                    user_id: str = "", group_id: str = "", priority: Any = None) -> Any:
        """Queue `text` as input on `channel` (HomeAgent `InjectText`); `source` empty or
        None = this plugin's name. Blocks in plain code; in async code `await` it.

        The input goes to a conversation: the group `group_id` on `channel` when given,
        else the private chat of `user_id` (default: `source`) on `channel`. It speaks as
        this plugin (`plugin:<name>`); a `source` or `user_id` naming anyone else needs
        capability `input_as_user` (else `HostError` PERMISSION_DENIED). Its turns
        run in order; other conversations run at the same time. `priority`
        (`"background"` (default), `"message"`, `"interactive"`, `"critical"` or 1–4)
        orders inputs waiting for a free turn slot. Raises `HostError` with code
        `RESOURCE_EXHAUSTED` when that conversation already has too many waiting
        (`[agent] queue_per_conversation`).
        """
        return self._inject("inject_text", source, channel, text, user_id, group_id, priority)

    def inject_text_no_memory(self, source: Optional[str], channel: str, text: str, *,
                              user_id: str = "", group_id: str = "", priority: Any = None) -> Any:
        """Like `inject_text`, without recording the message in memory."""
        return self._inject("inject_text_no_memory", source, channel, text, user_id, group_id,
                            priority)

    def inject_interrupt_text(self, source: Optional[str], channel: str, text: str, *,
                              user_id: str = "", group_id: str = "") -> Any:
        """Cut into the running turn of the conversation (as in `inject_text`): its LLM
        request in flight is cancelled and asked again with `text` as a system message.
        When no turn of that conversation runs, `text` goes to the front of its queue."""
        return self._inject("inject_interrupt_text", source, channel, text, user_id, group_id,
                            None)


class Plugin:
    """Base class of every plugin style.

    HomeAgent style: override `name()`, `start(self, sdk)` (calls
    `sdk.register_tool(...)`, `sdk.register_stage(...)`), `stop()`.
    LinkZone style: a `metadata` dict (module level or class attribute) and
    `execute_tool(self, sender, args)` returning `{success, content, data?, error?}`;
    inject mode: `handle_event(self, sender)` with `sender.param(i)` / `sender.reply()`.
    Decorator style: `plugin = Plugin("name")` then `@plugin.tool` on functions, or
    `@tool` on methods of a subclass.
    `start`, `stop`, `execute_tool` and `handle_event` may be sync or async.
    """

    #: LinkZone metadata (`name`, `triggers`, `ai: {tool, inject}`); module-level
    #: `metadata` is used when the class has none.
    metadata: Optional[dict] = None

    # Test hooks for fault injection (tests/plugins/stress.py); real plugins leave them
    # alone, and when they are None the session does exactly what it always does.

    #: Protocol version sent in Hello instead of the SDK's own, e.g. "99.0.0" to make the
    #: broker answer Rejected (the plugin then exits 3).
    hearth_protocol_version: Optional[str] = None

    #: Called with no arguments (sync or async) once Hello has been written to the stream,
    #: before Register is sent. Returning None goes on to register; returning an int ends
    #: the session with that exit code (Register is never sent); never returning leaves
    #: the plugin unregistered. Nothing is read from the broker while it runs.
    hearth_after_hello: Optional[Callable[[], Any]] = None

    def __init__(self, name: Optional[str] = None, *, version: str = "",
                 description: str = "", author: str = "") -> None:
        self._hearth_name = name
        self._hearth_info = {"version": version, "description": description, "author": author}
        self._hearth_tools: List[ToolInfo] = []

    def name(self) -> str:
        """The plugin's name (HomeAgent `Name()`); defaults to the name given to `Plugin(...)`."""
        return getattr(self, "_hearth_name", None) or ""

    def start(self, sdk: PluginSDK) -> None:
        """Called once before registration; HomeAgent plugins register tools here."""

    def stop(self) -> None:
        """Called on Shutdown (and when the broker goes away) to release resources."""

    def execute_tool(self, sender: Sender, args: dict) -> Any:
        """LinkZone direct mode: run the plugin's tool; return `{success, content, data?, error?}`."""
        raise NotImplementedError(f"{type(self).__name__}.execute_tool is not implemented")

    def handle_event(self, sender: Sender) -> Any:
        """LinkZone inject mode: a trigger matched; answer with `sender.reply(text)`."""
        raise NotImplementedError(f"{type(self).__name__}.handle_event is not implemented")

    def tool(self, func: Optional[Callable] = None, *, name: Optional[str] = None,
             description: Optional[str] = None, parameters: Optional[dict] = None,
             serial: bool = False) -> Any:
        """Decorator registering `func` as a tool of this plugin instance (see `hearth.tool`)."""

        def add(f: Callable) -> Callable:
            _mark(f, name, description, parameters, serial)
            tools = self.__dict__.setdefault("_hearth_tools", [])
            tools.append(f.__hearth_tool__)  # type: ignore[attr-defined]
            return f

        return add(func) if func is not None else add

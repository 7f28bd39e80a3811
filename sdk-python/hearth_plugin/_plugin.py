"""What plugin code touches: `Plugin`, `@tool`, `PluginSDK` (HomeAgent's `sdk`).

The shared types (`Sender`, `HostError`, `ToolEntry` …) live in `hearth_plugin._types`;
this module adds the classes plugins subclass and call. It imports no gRPC and no
asyncio (the host clients load them when a plugin is served), so `import
hearth_plugin` stays cheap.
"""

from __future__ import annotations

import os
import threading
from types import ModuleType
from typing import (Any, Awaitable, Callable, Dict, List, Optional, ParamSpec, Type, TypeVar,
                    Union, overload)

from ._apis import (DocMemoryAPI, KnowledgeAPI, LLMAPI, McpAPI, MemoryAPI, SettingsAPI,
                    TextMemoryAPI, _API)
from ._host import Connection, Host, ServiceClient
from ._stages import Stage, StageContext, StageHookEntry, priority_number, stage_of
from ._types import (HostError, JSONObject, Sender, StatusCode, ToolEntry, ToolInfo, progress)

__all__ = ["HostError", "Plugin", "PluginSDK", "Sender", "StageHandler", "StatusCode", "Target",
           "ToolHandler", "ToolInfo", "tool", "progress"]

P = ParamSpec("P")
R = TypeVar("R")
_A = TypeVar("_A", bound=_API)

#: A HomeAgent tool handler: gets the arguments object, returns any value (or an awaitable).
ToolHandler = Callable[[JSONObject], Any]
#: A stage hook: gets the `StageContext`, changes it in place or returns a new one
#: (plain or async).
StageHandler = Callable[[StageContext], Union[None, StageContext, Awaitable[Optional[StageContext]]]]


def _mark(func: Callable[P, R], name: Optional[str], description: Optional[str],
          parameters: Optional[JSONObject], serial: bool, owner: Optional[object] = None) -> Callable[P, R]:
    if not callable(func):
        raise TypeError(f"@tool: {func!r} is not callable")
    tool_name = name or getattr(func, "__name__", None)
    if not tool_name or not isinstance(tool_name, str):
        raise TypeError(f"@tool: cannot name the tool for {func!r}; pass name=...")
    setattr(func, "__hearth_tool__", ToolInfo(func, tool_name, description, parameters, serial, owner))
    return func


@overload
def tool(func: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def tool(func: None = None, /, *, name: Optional[str] = None, description: Optional[str] = None,
         parameters: Optional[JSONObject] = None,
         serial: bool = False) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def tool(func: Optional[Callable[P, R]] = None, /, *, name: Optional[str] = None,
         description: Optional[str] = None, parameters: Optional[JSONObject] = None,
         serial: bool = False) -> Union[Callable[P, R], Callable[[Callable[P, R]], Callable[P, R]]]:
    """Declare a function as a tool; usable bare (`@tool`) or with options (`@tool(name=...)`).

    Returns the function itself, unchanged (type checkers keep its signature). On a
    module-level function, `python -m hearth_plugin run` registers it; on a method of a
    `Plugin` subclass, the plugin instance registers the bound method.

    The JSON Schema of the arguments comes from the type hints (see the README,
    "Parameters": str, int, float, bool, list/tuple/set, dict, Literal, Enum, Union,
    `X | None` (nullable), dataclasses, TypedDicts, pydantic models) unless
    `parameters` gives one; the description is the docstring's first paragraph unless
    `description` is given; Google-style ``Args:`` lines describe the parameters. A
    parameter annotated `Sender` receives the caller and is not part of the schema.
    Arguments arrive as keyword arguments of the declared types; unknown or missing
    ones fail the call before the handler runs. Handlers may be `async def` or plain
    `def` (run in a thread). `serial=True` asks the broker not to run calls of this
    tool concurrently with others of one LLM turn.
    """
    if func is not None:
        return _mark(func, name, description, parameters, serial)

    def decorate(f: Callable[P, R]) -> Callable[P, R]:
        return _mark(f, name, description, parameters, serial)

    return decorate


class PluginSDK:
    """The object HomeAgent-style plugins receive in `start(self, sdk)`.

    `register_tool(name, tool_def, handler)`: `tool_def` is a dict (or an object with
    attributes) with `description` and `parameters` (a JSON Schema of the arguments
    object; `name` optional); `handler(args)` gets the arguments dict and returns any
    value: a string is the content as is, other values travel as JSON, and a dict with
    `isError: True` is an error result whose text is its `content`.

    `register_stage(stage, handler)` / `register_stage_own_tools(stage, handler)` add
    pipeline hooks (in `start()` only); the handler gets a `hearth_plugin.StageContext`.
    `inject_text(source, channel, text)` (and `_no_memory`, `inject_interrupt_text`) and
    the typed APIs `settings()`, `memory()`, `text_memory()`, `doc_memory()`,
    `knowledge()`, `llm()` (seed names, plain Python values) and `mcp()` (MCP servers'
    resources and prompts) reach the broker's host services; `host` (and `input()`) are
    the generic clients returning the wire messages. Blocking in plain code, awaitable on the plugin's event loop; failures
    raise `HostError`.
    """

    def __init__(self, plugin_name: str) -> None:
        self._plugin_name = plugin_name
        self._tools: Dict[str, ToolEntry] = {}
        self._stages: List[StageHookEntry] = []  # in registration order
        self._started = False  # set once start() returned: no more stage hooks
        self._lock = threading.Lock()
        # The broker connection, set by the runtime before start() runs.
        self._conn: Optional[Connection] = None
        self._clients: Dict[str, ServiceClient] = {}  # generic clients (sdk.host.*)
        self._apis: Dict[str, Any] = {}  # typed APIs (sdk.settings() …)
        # Set by the runtime once registered: sends later registrations on the stream.
        self._live_register: Optional[Callable[[ToolEntry], None]] = None
        self._live_unregister: Optional[Callable[[str], None]] = None

    @property
    def plugin_name(self) -> str:
        """Name of the plugin this SDK object belongs to."""
        return self._plugin_name

    def register_tool(self, name: str, tool_def: Any, handler: ToolHandler) -> None:
        """Register tool `name` (unique across all plugins) with its definition and handler.

        `tool_def` is a dict (or an object with attributes) with `description` and
        `parameters` (the JSON Schema of the arguments object; default: no
        parameters), optionally `serial`. `handler(args)` (plain or async) gets the
        arguments dict. Called after registration (from a handler), it registers the
        tool at run time. Raises ValueError for an empty or duplicate name, TypeError
        for a handler that is not callable or parameters that are not a dict.
        """
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

    def register_stage(self, stage: Union[Stage, str, int], handler: StageHandler, *,
                       context_msgs: bool = True) -> None:
        """Run `handler(ctx)` at pipeline stage `stage` (HomeAgent `RegisterStage`).

        `stage` is "on_input" … "after_output" or a `hearth_plugin.Stage`. The handler (sync or
        async) gets a `hearth_plugin.StageContext` with the fields its stage may read (see the
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

    def register_stage_own_tools(self, stage: Union[Stage, str, int], handler: StageHandler, *,
                                 context_msgs: bool = True) -> None:
        """Like `register_stage`, but in before_toolcall / after_toolcall the hook sees only
        calls of this plugin's own tools (HomeAgent `RegisterStageOwnTools`); at other
        stages it is a plain `register_stage`."""
        self._add_stage(stage, handler, True, context_msgs)

    def _add_stage(self, stage: Union[Stage, str, int], handler: StageHandler, own_tools_only: bool,
                   context_msgs: bool = True) -> None:
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

    def _connection(self) -> Connection:
        conn = self._conn
        if conn is None:
            raise RuntimeError(f"plugin {self._plugin_name}: host services are only "
                               "available while the plugin is served by the broker")
        return conn

    def _client(self, attr: str) -> ServiceClient:
        client = self._clients.get(attr)
        if client is None:
            client = self._clients.setdefault(attr, ServiceClient(self._connection, self._plugin_name, attr))
        return client

    @property
    def host(self) -> Host:
        """All host-service clients as attributes: `sdk.host.settings`, `.memory`,
        `.text_memory`, `.doc_memory`, `.knowledge`, `.llm`, `.input`, `.mcp`."""
        return Host(self._client, self._plugin_name)

    def _api(self, cls: Type[_A]) -> _A:
        api = self._apis.get(cls._attr)
        if api is None:
            api = self._apis.setdefault(cls._attr, cls(self._connection, self._plugin_name))
        assert isinstance(api, cls)
        return api

    def settings(self) -> SettingsAPI:
        """HomeAgent `Settings()`: a `hearth_plugin.SettingsAPI` (`get(key)` → value, `set(key,
        value)`, `list(prefix)`, `get_core` / `set_core` / `list_core`, `get_plugin` /
        `set_plugin` / `list_plugin`, `register_def`, `defs`, `dump`, `plugins`)."""
        return self._api(SettingsAPI)

    def memory(self) -> MemoryAPI:
        """HomeAgent `Memory()`: a `hearth_plugin.MemoryAPI` (graph memory: `recall`, `commit`,
        `introspect`, `merge_entities`, `purge`)."""
        return self._api(MemoryAPI)

    def text_memory(self) -> TextMemoryAPI:
        """HomeAgent `TextMemory()`: a `hearth_plugin.TextMemoryAPI` (`append`)."""
        return self._api(TextMemoryAPI)

    def doc_memory(self) -> DocMemoryAPI:
        """HomeAgent `DocMemory()`: a `hearth_plugin.DocMemoryAPI` (`query`, `insert`, `remove`,
        `stats`)."""
        return self._api(DocMemoryAPI)

    def knowledge(self) -> KnowledgeAPI:
        """HomeAgent `Knowledge()`: a `hearth_plugin.KnowledgeAPI` (`search`, `add`, `list`)."""
        return self._api(KnowledgeAPI)

    def llm(self) -> LLMAPI:
        """HomeAgent `LLM()`: a `hearth_plugin.LLMAPI` (`list_sources`, `set_source`,
        `current_source`)."""
        return self._api(LLMAPI)

    def mcp(self) -> McpAPI:
        """A `hearth_plugin.McpAPI`: resources and prompts of the MCP servers the broker
        runs as plugins (capability `mcp`): `request(server, method, params)` → the
        result, `resources`, `resource_templates`, `read_resource(server, uri)` → contents,
        `prompts`, `get_prompt(server, name, arguments)`."""
        return self._api(McpAPI)

    def input(self) -> ServiceClient:
        """`Input` service: `inject_text`, `inject_text_no_memory`, `inject_interrupt_text`."""
        return self._client("input")

    def _inject(self, method: str, source: Optional[str], channel: str, text: str,
                user_id: str, group_id: str, priority: Any) -> Any:
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
    metadata: Optional[JSONObject] = None

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

    def start(self, sdk: PluginSDK) -> Optional[Awaitable[None]]:
        """Called once before registration (plain or `async def`); HomeAgent plugins
        register tools and stage hooks here. Host calls work here already."""
        return None

    def stop(self) -> Optional[Awaitable[None]]:
        """Called on Shutdown (and when the broker goes away) to release resources
        (plain or `async def`)."""
        return None

    def execute_tool(self, sender: Sender, args: JSONObject) -> Any:
        """LinkZone direct mode: run the plugin's tool; return `{success, content, data?, error?}`."""
        raise NotImplementedError(f"{type(self).__name__}.execute_tool is not implemented")

    def handle_event(self, sender: Sender) -> Any:
        """LinkZone inject mode: a trigger matched; answer with `sender.reply(text)`."""
        raise NotImplementedError(f"{type(self).__name__}.handle_event is not implemented")

    @overload
    def tool(self, func: Callable[P, R], /) -> Callable[P, R]: ...

    @overload
    def tool(self, func: None = None, /, *, name: Optional[str] = None,
             description: Optional[str] = None,
             parameters: Optional[JSONObject] = None,
             serial: bool = False) -> Callable[[Callable[P, R]], Callable[P, R]]: ...

    def tool(self, func: Optional[Callable[..., Any]] = None, /, *, name: Optional[str] = None,
             description: Optional[str] = None, parameters: Optional[JSONObject] = None,
             serial: bool = False) -> Any:
        """Decorator registering `func` as a tool of this plugin instance (options and
        schema as `hearth_plugin.tool`); returns `func` unchanged, so type checkers keep
        its signature."""

        def add(f: Callable[..., Any]) -> Callable[..., Any]:
            _mark(f, name, description, parameters, serial, owner=self)
            tools: List[ToolInfo] = self.__dict__.setdefault("_hearth_tools", [])
            tools.append(getattr(f, "__hearth_tool__"))
            return f

        return add(func) if func is not None else add


#: What `run()`, `serve()` and `hearth_plugin.testing.load()` accept: a `Plugin`
#: instance or subclass, a path to a plugin file, a module, or None (`__main__`).
Target = Union[Plugin, Type[Plugin], str, "os.PathLike[str]", ModuleType, None]

"""The test harness: a plugin loaded in process, served by its own session code to a
`FakeBroker`, driven the way the broker drives it. See `hearth_plugin.testing`."""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets as _secrets
import threading
from dataclasses import dataclass, field
from typing import Any, Coroutine, Dict, Iterable, List, Mapping, Optional, Tuple, TypeVar, Union, cast

from .._apis import ConfigDef
from .._host import Connection
from .._loader import LoadedPlugin, resolve
from .._loader import load as load_plugin
from .._plugin import Plugin, PluginSDK, Target
from .._runtime import Pools, Session, start
from .._stages import STAGES, Stage, StageContext, from_wire, stage_of, to_wire
from .._types import Sender
from ..v1 import plugin_pb2 as pb
from . import _matrix
from ._broker import BrokerSession, FakeBroker, def_from_wire
from ._jsonschema import SchemaProblem, check_schema, linkzone_description, linkzone_schema, validate
from ._store import FakeHost, StoreError
from ._triggers import Trigger, compile_trigger, match_event, match_message, words

__all__ = ["DEFAULT_CAPABILITIES", "AsyncPluginHarness", "DroppedWrite", "EventResult", "HarnessError",
           "HookFailure", "InvalidArguments", "NoTriggerMatched", "PluginExited", "PluginHarness",
           "ProgressReport", "RegisteredHook", "RegisteredTool", "Registration", "RegistrationRejected",
           "RejectedItem", "StageRun", "ToolCallResult", "UnknownTool", "load", "load_async"]

_T = TypeVar("_T")

#: Capabilities of a plugin whose plugin.json has no `capabilities` (the broker's
#: `DEFAULT_CAPABILITIES`): not other plugins' or core settings, not input as a user.
DEFAULT_CAPABILITIES = ("memory", "knowledge", "llm", "input")
#: The broker's time limit for one stage hook (`DEFAULT_HOOK_TIMEOUT_MS`).
HOOK_TIMEOUT_S = 5.0

_module_ids = itertools.count(1)

SenderLike = Union[Sender, Mapping[str, str], None]


# ---------------------------------------------------------------------------- errors


class HarnessError(Exception):
    """Base of the harness's own errors (the plugin's errors arrive as results)."""


class InvalidArguments(HarnessError, ValueError):
    """The arguments of `call()` violate the tool's JSON Schema; the broker would not
    have called the plugin. The message is the broker's: "tool calculator: argument
    `expression`: 12 is not of type \\"string\\""."""


class UnknownTool(HarnessError, LookupError):
    """`call()` named a tool the plugin did not register."""


class NoTriggerMatched(HarnessError, LookupError):
    """`trigger()` / `broker_event()`: no registered trigger matches."""


class PluginExited(HarnessError):
    """The plugin's session ended (before registering, or during a call)."""


@dataclass(frozen=True)
class RejectedItem:
    """One part of a registration the broker would refuse: `kind` ("tool", "trigger",
    "inject", "stage", "config_def"), its `name`, and the `reason`."""

    kind: str
    name: str
    reason: str


class RegistrationRejected(HarnessError):
    """The broker would refuse part of the registration (`items`); raised by `load()`
    unless `strict=False`."""

    def __init__(self, plugin: str, items: List[RejectedItem]) -> None:
        lines = "; ".join(f"{i.kind} {i.name}: {i.reason}" for i in items)
        super().__init__(f"plugin {plugin}: registration rejected: {lines}")
        self.items = items


# ---------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ProgressReport:
    """One `progress(message, fraction, value=, total=)` a handler sent: `fraction`
    (negative when unknown), `value` and `total` (the counts; 0 when not given)."""

    message: str
    fraction: float
    value: float = 0.0
    total: float = 0.0


@dataclass(frozen=True)
class ToolCallResult:
    """What a tool call answered (the wire `ToolResult`): `success`, `content` (the
    text the LLM reads), `error` (when not successful), `data_json` (structured data as
    JSON text, "" when none) and `data` (it decoded, None when none), plus the
    `progress` reports sent during the call."""

    tool: str
    success: bool
    content: str
    error: str
    data_json: str
    progress: Tuple[ProgressReport, ...] = ()

    @property
    def data(self) -> Any:
        """`data_json` decoded (None when empty)."""
        return json.loads(self.data_json) if self.data_json else None


@dataclass(frozen=True)
class RegisteredTool:
    """A registered tool as the broker sees it: `parameters` is the JSON Schema the
    arguments are checked against (derived from `ai_tool` for LinkZone tools, as the
    broker derives it), `description` what the LLM reads."""

    name: str
    description: str
    parameters: Dict[str, Any]
    ai_tool: Optional[Dict[str, Any]]
    serial: bool


@dataclass(frozen=True)
class RegisteredHook:
    """A registered stage hook: its `hook_id` ("on_input#0"), `stage`, whether it sees
    only its own plugin's tool calls, and whether it receives `context_msgs`."""

    hook_id: str
    stage: Stage
    own_tools_only: bool
    context_msgs: bool


@dataclass
class Registration:
    """What the plugin registered: `plugin` info (name, version, author, description),
    `tools` by name, `hooks` in registration order, `inject` (usage, format, args) or
    None, `triggers`, `config_defs` (declared in Register), and `rejected` items
    (only with `strict=False`). Tools registered or removed at run time are kept up to
    date."""

    plugin: Dict[str, str]
    tools: Dict[str, RegisteredTool]
    hooks: List[RegisteredHook]
    inject: Optional[Dict[str, Any]]
    triggers: List[Trigger]
    config_defs: List[Dict[str, Any]] = field(default_factory=list)
    rejected: List[RejectedItem] = field(default_factory=list)


@dataclass(frozen=True)
class DroppedWrite:
    """A hook's change the permission matrix did not keep: `field` ("raw_message",
    "tool_call.deny", "user_id" …) written by hook `hook_id`."""

    hook_id: str
    field: str


@dataclass(frozen=True)
class HookFailure:
    """A hook that failed (raised, or timed out); its writes were skipped."""

    hook_id: str
    error: str


@dataclass
class StageRun:
    """The outcome of `run_stage()`: `context` after every hook ran with the matrix
    applied (what the pipeline goes on with), `ran` (hook ids, in order), `dropped`
    writes, `errors`, and `short_circuit`: the hook id that set `response` (or denied a
    call in before_toolcall), which ends the stage."""

    stage: Stage
    context: StageContext
    ran: List[str]
    dropped: List[DroppedWrite]
    errors: List[HookFailure]
    short_circuit: Optional[str] = None

    @property
    def dropped_fields(self) -> List[str]:
        """The names of the dropped fields, in order."""
        return [d.field for d in self.dropped]


@dataclass(frozen=True)
class EventResult:
    """What an event delivery (`handle_event`, `trigger`, `broker_event`) produced: the
    `sender.reply` texts in order, the handler's `error` ("" when none: "<ExcType>:
    <message>" otherwise), the `trigger` that matched and the `params` delivered."""

    replies: List[str]
    error: str
    trigger: Optional[Trigger]
    params: List[str]


# ---------------------------------------------------------------------------- helpers


def _sender(sender: SenderLike) -> Dict[str, str]:
    if sender is None:
        return {}
    if isinstance(sender, Sender):
        return {"user_id": sender.user_id, "group_id": sender.group_id, "channel": sender.channel,
                "session_id": sender.session_id}
    allowed = ("user_id", "group_id", "channel", "session_id")
    unknown = [k for k in sender if k not in allowed]
    if unknown:
        raise TypeError(f"sender: unknown field {unknown[0]!r} (fields: {', '.join(allowed)})")
    return {k: str(v) for k, v in sender.items()}


def _def_dict(d: Union[ConfigDef, Mapping[str, Any]]) -> Dict[str, Any]:
    return ConfigDef.from_dict(d if isinstance(d, ConfigDef) else dict(d)).to_dict()


def _manifest_capabilities(loaded: LoadedPlugin) -> Tuple[str, ...]:
    caps = loaded.manifest.get("capabilities")
    if isinstance(caps, list) and all(isinstance(c, str) for c in caps):
        return tuple(caps)
    return DEFAULT_CAPABILITIES


# ---------------------------------------------------------------------------- async harness


class AsyncPluginHarness:
    """A plugin loaded in process and served to a `FakeBroker`, for async tests.

    `async with load_async("main.py") as t: r = await t.call("tool", {...})`. The
    methods are those of `PluginHarness`, as coroutines; everything runs on the
    caller's event loop (plain handlers in a thread pool of the harness's own).
    Options: see `load()`.
    """

    def __init__(self, target: Target, *, settings: Optional[Mapping[str, Any]] = None,
                 secrets: Optional[Mapping[str, Any]] = None,
                 defs: Iterable[Union[ConfigDef, Mapping[str, Any]]] = (),
                 core_settings: Optional[Mapping[str, Any]] = None,
                 plugin_settings: Optional[Mapping[str, Mapping[str, Any]]] = None,
                 capabilities: Optional[Iterable[str]] = None, host: Optional[FakeHost] = None,
                 llm_sources: Optional[Iterable[str]] = None, name: Optional[str] = None,
                 strict: bool = True, timeout: float = 30.0, tcp: bool = False) -> None:
        self._target = target
        self._settings = dict(settings or {})
        self._secrets = dict(secrets or {})
        self._defs = [_def_dict(d) for d in defs]
        self._core = dict(core_settings or {})
        self._others = {k: dict(v) for k, v in (plugin_settings or {}).items()}
        self._capabilities = None if capabilities is None else tuple(capabilities)
        self._name = name
        self._strict = strict
        self._tcp = tcp
        self.timeout = timeout
        #: The in-memory host services (shared with `host=`).
        self.host = host if host is not None else FakeHost()
        if llm_sources is not None:
            self.host.llm.sources = list(llm_sources)
        self._broker: Optional[FakeBroker] = None
        self._session: Optional[BrokerSession] = None
        self._loaded: Optional[LoadedPlugin] = None
        self._registration: Optional[Registration] = None
        self._task: Optional[asyncio.Task[int]] = None
        self._conn: Optional[Connection] = None
        self._pools: Optional[Pools] = None
        self._closed = False
        #: The session's exit code once it ended (0 after `close()`), else None.
        self.exit_code: Optional[int] = None

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> "AsyncPluginHarness":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def start(self) -> "AsyncPluginHarness":
        """Load the plugin, run its start(), attach and check its registration.

        Raises `hearth_plugin.PluginLoadError` (import error, no plugin, start() failed),
        `RegistrationRejected`, `PluginExited`, or TimeoutError."""
        try:
            await asyncio.wait_for(self._start(), self.timeout)
        except BaseException:
            await self.close()
            raise
        return self

    async def _start(self) -> None:
        module_name = f"__hearth_test_{next(_module_ids)}__"
        plugin, module, path = resolve(self._target, module_name=module_name)
        loaded = self._loaded = load_plugin(plugin, module, path, fallback_name=self._name)
        name = loaded.name
        settings = self.host.settings
        for d in self._defs:
            settings.register_def(name, d)
        for key, value in self._secrets.items():
            # As `hearth settings set --plugin NAME --secret KEY VALUE`: the value is set
            # (checked against a def of the key, if any), then the key's def (a new one
            # with only the key if it has none) is marked secret.
            settings.set(name, key, value)
            if not settings.is_secret(name, key):
                found = [d for d in settings.defs(name, key) if d["key"] == key]
                settings.register_def(name, {**found[0], "secret": True} if found
                                      else {"key": key, "type": "", "display_name": "", "secret": True})
        for key, value in self._settings.items():
            settings.set(name, key, value)
        for key, value in self._core.items():
            settings.set(None, key, value)
        for other, values in self._others.items():
            for key, value in values.items():
                settings.set(other, key, value)

        broker = self._broker = FakeBroker(self.host, tcp=self._tcp, keep_inbox=False)
        await broker.start()
        token = _secrets.token_hex(16)
        caps = self._capabilities if self._capabilities is not None else _manifest_capabilities(loaded)
        broker.admit(token, name, caps)
        self._pools = Pools()
        self._conn = Connection(name, asyncio.get_running_loop(), broker.addr, token)
        await start(loaded, self._conn, self._pools)
        self._task = asyncio.ensure_future(Session(loaded, self._conn, self._pools).run())
        got = asyncio.ensure_future(broker.next_session(timeout=self.timeout))
        done, _ = await asyncio.wait({got, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if got not in done:
            # A plugin that attached and ended at once: the broker's side of that session
            # may still be on its way; give it a moment before saying it never attached.
            await asyncio.wait({got}, timeout=1.0)
            if got.done() and not got.cancelled() and got.exception() is None:
                done = {got}
        if got not in done:
            got.cancel()
            self.exit_code = self._task.result()
            raise PluginExited(f"plugin {name}: the session ended before it attached "
                               f"(exit code {self.exit_code})")
        sess = self._session = got.result()
        reg_wait = asyncio.ensure_future(sess.registration(timeout=self.timeout))
        done, _ = await asyncio.wait({reg_wait, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if reg_wait not in done:
            reg_wait.cancel()
            self.exit_code = self._task.result()
            raise PluginExited(f"plugin {name}: the session ended before Register "
                               f"(exit code {self.exit_code})")
        self._registration = self._register(reg_wait.result())
        sess.on_live_registration = self._live_registration

    def _register(self, reg: pb.Register) -> Registration:
        """Check the registration as the broker does and answer Registered (or Rejected)."""
        assert self._session is not None
        name = reg.plugin.name
        rejected: List[RejectedItem] = []
        tools: Dict[str, RegisteredTool] = {}
        for spec in reg.tools:
            tool, why = self._tool(spec)
            if tool is None:
                rejected.append(RejectedItem("tool", spec.name, why))
            elif tool.name in tools:
                rejected.append(RejectedItem("tool", spec.name, "registered twice by this plugin"))
            else:
                tools[tool.name] = tool
        hooks = []
        for h in reg.stages:
            if not 1 <= h.stage <= 7:
                rejected.append(RejectedItem("stage", h.hook_id, f"unknown stage {h.stage}"))
                continue
            hooks.append(RegisteredHook(h.hook_id, Stage(STAGES[h.stage - 1]), h.own_tools_only,
                                        not h.no_context_msgs))
        triggers = []
        for t in reg.triggers:
            trig = Trigger(int(t.type), t.pattern)
            problem = compile_trigger(trig)
            if problem is None:
                triggers.append(trig)
            else:
                rejected.append(RejectedItem("trigger", t.pattern, problem))
        inject: Optional[Dict[str, Any]] = None
        if reg.HasField("inject"):
            if not reg.inject.format.strip():
                rejected.append(RejectedItem("inject", reg.inject.usage,
                                             "ai.inject has no format: the LLM would not know what to write"))
            else:
                inject = {"usage": reg.inject.usage, "format": reg.inject.format, "args": dict(reg.inject.args)}
        defs = []
        for d in reg.config_defs:
            try:
                dd = def_from_wire(d)
                self.host.settings.register_def(name, dd)
                defs.append(dd)
            except StoreError as e:  # the message names the def
                rejected.append(RejectedItem("config_def", d.key, str(e)))
        if rejected and (self._strict or reg.all_or_nothing):
            self._session.send(pb.HostMessage(rejected=pb.Rejected(
                reason="registration rejected",
                items=[pb.RejectedItem(kind=i.kind, name=i.name, reason=i.reason) for i in rejected])))
            raise RegistrationRejected(name, rejected)
        # The features the broker offers, as it offers them: those of Hello it knows.
        offered = [f for f in ("cancel", "progress", "batch")
                   if self._session.hello is not None and f in self._session.hello.features]
        self._session.accept([pb.RejectedItem(kind=i.kind, name=i.name, reason=i.reason) for i in rejected],
                             features=offered)
        info = {"name": name, "version": reg.plugin.version, "author": reg.plugin.author,
                "description": reg.plugin.description}
        return Registration(info, tools, hooks, inject, triggers, defs, rejected)

    @staticmethod
    def _tool(spec: pb.ToolSpec) -> Tuple[Optional[RegisteredTool], str]:
        if not spec.name.strip():
            return None, "a tool has an empty name"
        try:
            if spec.HasField("ai_tool"):
                ai = _ai_tool_dict(spec.ai_tool)
                schema = linkzone_schema(ai)
                return RegisteredTool(spec.name, linkzone_description(ai), schema, ai, spec.serial), ""
            text = spec.parameters_json.strip()
            try:
                schema = json.loads(text) if text else {"type": "object", "properties": {}}
            except ValueError as e:
                return None, f"parameters is not valid JSON: {e}"
            check_schema(schema)
            return RegisteredTool(spec.name, spec.description, schema, None, spec.serial), ""
        except SchemaProblem as e:
            return None, str(e)

    def _live_registration(self, msg: pb.PluginMessage) -> Optional[pb.HostMessage]:
        reg = self._registration
        assert reg is not None
        if msg.WhichOneof("msg") == "register_tool":
            rt = msg.register_tool
            tool, why = self._tool(rt.tool)
            if tool is not None and tool.name in reg.tools:
                tool, why = None, "registered twice by this plugin"
            if tool is not None:
                reg.tools[tool.name] = tool
            return pb.HostMessage(tool_registration=pb.ToolRegistration(
                request_id=rt.request_id, name=rt.tool.name, ok=tool is not None, error=why))
        ut = msg.unregister_tool
        ok = reg.tools.pop(ut.name, None) is not None
        return pb.HostMessage(tool_registration=pb.ToolRegistration(
            request_id=ut.request_id, name=ut.name, ok=ok, error="" if ok else f"no tool {ut.name}"))

    async def close(self, grace: float = 2.0) -> None:
        """Shut the plugin down as the broker does (Shutdown: its stop() runs), then
        stop the fake broker. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        task, sess = self._task, self._session
        if task is not None and not task.done():
            if sess is not None:
                sess.shutdown(grace_ms=int(grace * 1000), reason="test harness closed")
            try:
                self.exit_code = await asyncio.wait_for(asyncio.shield(task), grace + 5.0)
            except (asyncio.TimeoutError, Exception):
                task.cancel()
        elif task is not None and task.done() and not task.cancelled() and task.exception() is None:
            self.exit_code = task.result()
        if self._conn is not None:
            await self._conn.close()
        if sess is not None:
            sess.close()  # ends the broker's side of the stream
        if self._broker is not None:
            await self._broker.stop(0)
        if self._pools is not None:
            self._pools.shutdown()

    # ------------------------------------------------------------------ views

    def _need(self, live: bool = True) -> Tuple[BrokerSession, Registration, LoadedPlugin]:
        """The session, registration and plugin; PluginExited when `live` and the session
        has ended (the read-only views stay available after `close()`)."""
        if self._session is None or self._registration is None or self._loaded is None:
            raise HarnessError("the harness is not started (use `async with load_async(...)` or `await start()`)")
        if live and self._task is not None and self._task.done():
            code = None if self._task.cancelled() or self._task.exception() else self._task.result()
            raise PluginExited(f"plugin {self._loaded.name}: the session has ended (exit code {code})")
        return self._session, self._registration, self._loaded

    @property
    def name(self) -> str:
        """The plugin's name."""
        return self._need(live=False)[2].name

    @property
    def registration(self) -> Registration:
        """What the plugin registered."""
        return self._need(live=False)[1]

    @property
    def tools(self) -> Dict[str, RegisteredTool]:
        """The registered tools by name."""
        return self._need(live=False)[1].tools

    @property
    def hooks(self) -> List[RegisteredHook]:
        """The registered stage hooks, in registration order."""
        return self._need(live=False)[1].hooks

    @property
    def plugin(self) -> Plugin:
        """The plugin object."""
        return self._need(live=False)[2].plugin

    @property
    def sdk(self) -> PluginSDK:
        """The `sdk` the plugin got in start(); its host calls reach the fake host."""
        return self._need(live=False)[2].sdk

    @property
    def broker(self) -> FakeBroker:
        """The fake broker (host-call log `host_calls`, `override(...)`)."""
        if self._broker is None:
            raise HarnessError("the harness is not started")
        return self._broker

    @property
    def session(self) -> BrokerSession:
        """The broker's side of the plugin's session (raw protocol access)."""
        return self._need()[0]

    # ------------------------------------------------------------------ tools

    async def call(self, tool: str, args: Optional[Mapping[str, Any]] = None, *,
                   sender: SenderLike = None, validate_args: bool = True,
                   timeout: Optional[float] = None, traceparent: str = "",
                   tracestate: str = "") -> ToolCallResult:
        """Call `tool` as the broker does: `args` (default `{}`) are checked against its
        JSON Schema first — a violation raises `InvalidArguments` with the broker's
        message and the plugin is not called (`validate_args=False` sends them
        anyway). `sender`: a `Sender` or a dict of user_id, group_id, channel,
        session_id. `traceparent` / `tracestate`: the W3C trace context a tracing
        broker would send with the call. Returns the `ToolCallResult`; raises
        `UnknownTool`, `PluginExited`, or TimeoutError (then the call is cancelled)."""
        sess, reg, loaded = self._need()
        spec = reg.tools.get(tool)
        if spec is None:
            raise UnknownTool(f"plugin {loaded.name} has no tool {tool!r} "
                              f"(its tools: {', '.join(sorted(reg.tools)) or 'none'})")
        payload: Dict[str, Any] = dict(args or {})
        if validate_args:
            problem = validate(spec.parameters, payload)
            if problem is not None:
                raise InvalidArguments(f"tool {tool}: {problem}")
        try:
            raw = json.dumps(payload, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise TypeError(f"tool {tool}: the arguments are not JSON: {e}") from None
        wait = self.timeout if timeout is None else timeout
        cid = sess.invoke(tool, payload, raw_args=raw, sender=_sender(sender), timeout_ms=int(wait * 1000),
                          traceparent=traceparent, tracestate=tracestate)
        try:
            r = await sess.result(cid, wait)
        except asyncio.TimeoutError:
            sess.cancel(cid, "timeout")
            raise asyncio.TimeoutError(f"tool {tool}: no result within {wait}s (the call was cancelled)") from None
        except ConnectionError:
            raise PluginExited(f"plugin {loaded.name}: the session ended during tool {tool}") from None
        reports = tuple(ProgressReport(p.message, p.fraction, p.progress, p.total) for p in sess.progress.pop(cid, []))
        return ToolCallResult(tool, r.success, r.content, r.error, r.data_json, reports)

    # ------------------------------------------------------------------ stages

    def _tool_owner(self, stage: int, ctx: pb.StageContext) -> Optional[str]:
        reg = self._need(live=False)[1]
        name, plugin = "", ""
        if stage == _matrix.BEFORE_TOOLCALL and ctx.tool_calls:
            name, plugin = ctx.tool_calls[0].name, ctx.tool_calls[0].plugin
        elif stage == _matrix.AFTER_TOOLCALL and ctx.tool_results:
            name, plugin = ctx.tool_results[0].name, ctx.tool_results[0].plugin
        if plugin:
            return plugin
        return reg.plugin["name"] if name in reg.tools else None

    async def run_stage(self, stage: Union[Stage, str, int], context: Optional[StageContext] = None, *,
                        tool_owner: Optional[str] = None, timeout: Optional[float] = None,
                        traceparent: str = "", tracestate: str = "", **fields: Any) -> StageRun:
        """Run the plugin's hooks of `stage` as the pipeline does and apply the
        permission matrix after each (`broker/src/pipeline`).

        The context is `context`, or a `StageContext(**fields)` (e.g.
        `run_stage("on_input", raw_message="hi", user_id="u1")`). Each hook receives the
        fields its stage may read, in registration order, seeing the previous hook's
        kept writes; a hook that raises or times out (`timeout`, default the broker's
        5 s) is skipped. The stage stops at the first hook that sets `response` (or, in
        before_toolcall, denies a call). Own-tools hooks run at before/after_toolcall
        only when the call's tool is this plugin's (`tool_owner`: the plugin owning the
        tool; default: the call's `plugin` field, else this plugin when it has a tool of
        that name). after_output hooks all see the same context and change nothing.
        `traceparent` / `tracestate` go with each RunStage. Returns a `StageRun`."""
        sess, reg, loaded = self._need()
        if context is not None and fields:
            raise TypeError("run_stage: give a StageContext or its fields, not both")
        st = stage_of(stage, loaded.name)
        number = STAGES.index(st.value) + 1
        ctx = to_wire(context if context is not None else StageContext(**fields))
        ctx.phase = number
        owner = tool_owner if tool_owner is not None else self._tool_owner(number, ctx)
        toolcall = number in (_matrix.BEFORE_TOOLCALL, _matrix.AFTER_TOOLCALL)
        hooks = [h for h in reg.hooks if h.stage is st
                 and not (toolcall and h.own_tools_only and owner != loaded.name)]
        wait = HOOK_TIMEOUT_S if timeout is None else timeout
        run = StageRun(st, from_wire(ctx), [], [], [])

        async def call(hook: RegisteredHook, sent: pb.StageContext) -> Optional[pb.StageContext]:
            cid = sess.run_stage(number, hook.hook_id, sent, timeout_ms=int(wait * 1000),
                                 traceparent=traceparent, tracestate=tracestate)
            try:
                result = await sess.stage_result(cid, wait)
            except asyncio.TimeoutError:
                sess.cancel(cid, "timeout")
                run.errors.append(HookFailure(hook.hook_id, f"stage hook {hook.hook_id}: timed out after {wait}s"))
                return None
            except ConnectionError:
                raise PluginExited(f"plugin {loaded.name}: the session ended during hook {hook.hook_id}") from None
            run.ran.append(hook.hook_id)
            if result.error:
                run.errors.append(HookFailure(hook.hook_id, result.error))
                return None
            if not result.HasField("context"):
                run.errors.append(HookFailure(hook.hook_id, "the hook answered no context"))
                return None
            answer = pb.StageContext()
            answer.CopyFrom(result.context)
            answer.phase = cast("pb.Stage", number)
            return answer

        if number == _matrix.AFTER_OUTPUT:
            vis = _matrix.visible(number, True)
            sent = _matrix.view(number, ctx, vis)
            answers = await asyncio.gather(*(call(h, sent) for h in hooks))
            for h, answer in zip(hooks, answers):
                if answer is not None:
                    seen = pb.StageContext()
                    seen.CopyFrom(sent)
                    run.dropped.extend(DroppedWrite(h.hook_id, f) for f in _matrix.apply(number, vis, seen, answer))
            run.context = from_wire(ctx)
            return run
        for h in hooks:
            vis = _matrix.visible(number, h.context_msgs)
            answer = await call(h, _matrix.view(number, ctx, vis))
            if answer is None:
                continue
            run.dropped.extend(DroppedWrite(h.hook_id, f) for f in _matrix.apply(number, vis, ctx, answer))
            if ctx.HasField("response") or (number == _matrix.BEFORE_TOOLCALL and any(c.deny for c in ctx.tool_calls)):
                run.short_circuit = h.hook_id
                break
        run.context = from_wire(ctx)
        return run

    # ------------------------------------------------------------------ events

    async def handle_event(self, message: str, params: Optional[Iterable[str]] = None, *,
                           sender: SenderLike = None, trigger: Optional[Trigger] = None,
                           timeout: Optional[float] = None, traceparent: str = "",
                           tracestate: str = "") -> EventResult:
        """Deliver `HandleEvent` directly (no trigger matching): `params` default to the
        words after the message's first word; `traceparent` / `tracestate` as for
        `call()`. Returns the `EventResult` (replies in order, the handler's error)."""
        sess, _, loaded = self._need()
        plist = list(params) if params is not None else words(message)[1:]
        trig = trigger or Trigger(0, message.split(" ", 1)[0])
        wait = self.timeout if timeout is None else timeout
        cid = sess.handle_event(message, plist, sender=_sender(sender), trigger=(trig.type, trig.pattern),
                                timeout_ms=int(wait * 1000), traceparent=traceparent, tracestate=tracestate)
        try:
            replies, error = await sess.event_outcome(cid, wait)
        except asyncio.TimeoutError:
            sess.cancel(cid, "timeout")
            raise asyncio.TimeoutError(f"handle_event {message!r}: no EventDone within {wait}s") from None
        except ConnectionError:
            raise PluginExited(f"plugin {loaded.name}: the session ended during handle_event") from None
        return EventResult(replies, error, trig, plist)

    async def trigger(self, text: str, *, sender: SenderLike = None,
                      timeout: Optional[float] = None) -> EventResult:
        """Match `text` against the plugin's triggers (types 0–3) as the broker does and
        deliver the event with the parsed params. Raises `NoTriggerMatched`."""
        _, reg, loaded = self._need()
        m = match_message(reg.triggers, text)
        if m is None:
            listed = ", ".join(f"{t.type}:{t.pattern!r}" for t in reg.triggers) or "none"
            raise NoTriggerMatched(f"plugin {loaded.name}: no trigger matches {text!r} (triggers: {listed})")
        return await self.handle_event(text.strip(), m.params, sender=sender, trigger=m.trigger, timeout=timeout)

    async def broker_event(self, event: str, text: str, *, sender: SenderLike = None,
                           timeout: Optional[float] = None) -> EventResult:
        """Emit broker event `event` ("message" or "reply") with `text` to a type-4
        trigger of the plugin; raises `NoTriggerMatched` when it has none for it."""
        _, reg, loaded = self._need()
        m = match_event(reg.triggers, event, text)
        if m is None:
            raise NoTriggerMatched(f"plugin {loaded.name}: no event trigger for {event!r}")
        return await self.handle_event(text, m.params, sender=sender, trigger=m.trigger, timeout=timeout)


def _ai_tool_dict(ai: pb.AiTool) -> Dict[str, Any]:
    params = []
    for p in ai.parameters:
        d: Dict[str, Any] = {"name": p.name, "type": p.type, "description": p.description,
                             "required": p.required}
        if p.default_json:
            d["default"] = json.loads(p.default_json)
        if p.enum_json:
            d["enum"] = json.loads(p.enum_json)
        if p.example:
            d["example"] = p.example
        params.append(d)
    out: Dict[str, Any] = {"parameters": params, "usage": ai.usage, "when_to_use": ai.when_to_use,
                           "continue": ai.continue_conversation, "max_calls": ai.max_calls,
                           "confirm": ai.confirm, "cooldown": ai.cooldown_s, "timeout": ai.timeout_s}
    if ai.HasField("chainable"):
        out["chainable"] = ai.chainable
    return out


# ---------------------------------------------------------------------------- sync harness


class PluginHarness:
    """A plugin loaded in process and served to a `FakeBroker`, for plain (sync) tests.

    Made by `load()`; already started. An event loop of its own runs in a background
    thread, so no pytest-asyncio is needed; every method blocks until the broker-side
    answer arrives. Use it as a context manager (or call `close()`)::

        with hearth_plugin.testing.load("main.py", settings={"city": "北京"}) as t:
            r = t.call("weather", {"city": "上海"})
            assert r.success and "上海" in r.content

    Attributes and methods (the same as `AsyncPluginHarness`, which documents them):
    `name`, `registration`, `tools`, `hooks`, `plugin`, `sdk`, `host` (the `FakeHost`),
    `broker`, `session`, `exit_code`; `call()`, `run_stage()`, `handle_event()`,
    `trigger()`, `broker_event()`, `close()`.
    """

    def __init__(self, target: Target, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="hearth-testing", daemon=True)
        self._thread.start()
        self._async = AsyncPluginHarness(target, **options)
        try:
            self._run(self._async.start())
        except BaseException:
            self._stop_loop()
            raise

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        if self._loop.is_closed():
            coro.close()
            raise PluginExited(f"plugin {self._async.name}: the session has ended (the harness is closed)")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    async def _cancel_pending(self) -> None:
        """Cancel what is left on the harness's loop (gRPC's server tasks) and let it end."""
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        await self._loop.shutdown_asyncgens()

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(self._cancel_pending(), self._loop).result(10.0)
            except Exception:
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._loop.is_running() and not self._loop.is_closed():
            self._loop.close()

    def __enter__(self) -> "PluginHarness":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self, grace: float = 2.0) -> None:
        """Shut the plugin down (its stop() runs) and stop the fake broker and the
        harness's event loop. Safe to call twice."""
        if self._loop.is_closed():
            return
        try:
            self._run(self._async.close(grace))
        finally:
            self._stop_loop()

    @property
    def name(self) -> str:
        """The plugin's name."""
        return self._async.name

    @property
    def registration(self) -> Registration:
        """What the plugin registered (see `Registration`)."""
        return self._async.registration

    @property
    def tools(self) -> Dict[str, RegisteredTool]:
        """The registered tools by name."""
        return self._async.tools

    @property
    def hooks(self) -> List[RegisteredHook]:
        """The registered stage hooks, in registration order."""
        return self._async.hooks

    @property
    def plugin(self) -> Plugin:
        """The plugin object."""
        return self._async.plugin

    @property
    def sdk(self) -> PluginSDK:
        """The `sdk` the plugin got in start(); its host calls block here."""
        return self._async.sdk

    @property
    def host(self) -> FakeHost:
        """The in-memory host services: read and seed them."""
        return self._async.host

    @property
    def broker(self) -> FakeBroker:
        """The fake broker (`host_calls`, `override(...)`)."""
        return self._async.broker

    @property
    def session(self) -> BrokerSession:
        """The broker's side of the session (raw protocol access; its coroutines must
        run on the harness's loop)."""
        return self._async.session

    @property
    def exit_code(self) -> Optional[int]:
        """The session's exit code once it ended, else None."""
        return self._async.exit_code

    def call(self, tool: str, args: Optional[Mapping[str, Any]] = None, *, sender: SenderLike = None,
             validate_args: bool = True, timeout: Optional[float] = None, traceparent: str = "",
             tracestate: str = "") -> ToolCallResult:
        """See `AsyncPluginHarness.call`."""
        return self._run(self._async.call(tool, args, sender=sender, validate_args=validate_args,
                                          timeout=timeout, traceparent=traceparent, tracestate=tracestate))

    def run_stage(self, stage: Union[Stage, str, int], context: Optional[StageContext] = None, *,
                  tool_owner: Optional[str] = None, timeout: Optional[float] = None,
                  traceparent: str = "", tracestate: str = "", **fields: Any) -> StageRun:
        """See `AsyncPluginHarness.run_stage`."""
        return self._run(self._async.run_stage(stage, context, tool_owner=tool_owner, timeout=timeout,
                                               traceparent=traceparent, tracestate=tracestate, **fields))

    def handle_event(self, message: str, params: Optional[Iterable[str]] = None, *,
                     sender: SenderLike = None, trigger: Optional[Trigger] = None,
                     timeout: Optional[float] = None, traceparent: str = "",
                     tracestate: str = "") -> EventResult:
        """See `AsyncPluginHarness.handle_event`."""
        return self._run(self._async.handle_event(message, params, sender=sender, trigger=trigger,
                                                  timeout=timeout, traceparent=traceparent,
                                                  tracestate=tracestate))

    def trigger(self, text: str, *, sender: SenderLike = None, timeout: Optional[float] = None) -> EventResult:
        """See `AsyncPluginHarness.trigger`."""
        return self._run(self._async.trigger(text, sender=sender, timeout=timeout))

    def broker_event(self, event: str, text: str, *, sender: SenderLike = None,
                     timeout: Optional[float] = None) -> EventResult:
        """See `AsyncPluginHarness.broker_event`."""
        return self._run(self._async.broker_event(event, text, sender=sender, timeout=timeout))


def load(target: Target, *, settings: Optional[Mapping[str, Any]] = None,
         secrets: Optional[Mapping[str, Any]] = None,
         defs: Iterable[Union[ConfigDef, Mapping[str, Any]]] = (),
         core_settings: Optional[Mapping[str, Any]] = None,
         plugin_settings: Optional[Mapping[str, Mapping[str, Any]]] = None,
         capabilities: Optional[Iterable[str]] = None, host: Optional[FakeHost] = None,
         llm_sources: Optional[Iterable[str]] = None, name: Optional[str] = None,
         strict: bool = True, timeout: float = 30.0, tcp: bool = False) -> PluginHarness:
    """Load a plugin in process and serve it to a fake broker; returns a started
    `PluginHarness` (use it in a `with` block).

    `target`: a plugin file path (`"main.py"`, imported afresh each time), a module, a
    `Plugin` instance or subclass — any of the three styles.

    Host state, set before the plugin's start() runs (all optional):
    `settings` (this plugin's keys → JSON values), `secrets` (keys → values, set as
    `hearth settings set --secret` does: then the key's def, or a new one with only the
    key, is marked secret), `defs` (`ConfigDef`s or dicts registered first: a seeded
    value that does not fit its def's type raises `StoreError` INVALID_ARGUMENT with
    the broker's message), `core_settings`, `plugin_settings` ({plugin: {key: value}}),
    `llm_sources` (names, priority order), or a whole `host` (`FakeHost`) to seed and
    share. `capabilities`: what the plugin may call (default: plugin.json's
    `capabilities` next to the file, else the broker's defaults memory, knowledge, llm,
    input). `name`: the fallback name (HEARTH_PLUGIN's role). `strict` (default True):
    a registration the broker would partly refuse raises `RegistrationRejected`; with
    False the bad items are left out as the broker does (`registration.rejected`).
    `timeout`: seconds for start-up and for each call. `tcp`: listen on 127.0.0.1
    instead of a Unix socket.

    Raises `hearth_plugin.PluginLoadError` (the file fails to import, defines no plugin,
    or start() raises), `RegistrationRejected`, `PluginExited`, TimeoutError.
    """
    return PluginHarness(target, settings=settings, secrets=secrets, defs=defs, core_settings=core_settings,
                         plugin_settings=plugin_settings, capabilities=capabilities, host=host,
                         llm_sources=llm_sources, name=name, strict=strict, timeout=timeout, tcp=tcp)


def load_async(target: Target, *, settings: Optional[Mapping[str, Any]] = None,
               secrets: Optional[Mapping[str, Any]] = None,
               defs: Iterable[Union[ConfigDef, Mapping[str, Any]]] = (),
               core_settings: Optional[Mapping[str, Any]] = None,
               plugin_settings: Optional[Mapping[str, Mapping[str, Any]]] = None,
               capabilities: Optional[Iterable[str]] = None, host: Optional[FakeHost] = None,
               llm_sources: Optional[Iterable[str]] = None, name: Optional[str] = None,
               strict: bool = True, timeout: float = 30.0, tcp: bool = False) -> AsyncPluginHarness:
    """`load()` for async tests, on the running event loop: returns an
    `AsyncPluginHarness` not yet started — `async with load_async("main.py") as t:` (or
    `t = await load_async(...).start()` … `await t.close()`). Options and errors as
    `load()`."""
    return AsyncPluginHarness(target, settings=settings, secrets=secrets, defs=defs,
                              core_settings=core_settings, plugin_settings=plugin_settings,
                              capabilities=capabilities, host=host, llm_sources=llm_sources, name=name,
                              strict=strict, timeout=timeout, tcp=tcp)

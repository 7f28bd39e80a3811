"""A fake Hearth broker: a real gRPC server (grpc.aio) on a temporary Unix socket (or
TCP loopback) serving `PluginHost.Attach` and every host service, so a plugin's own
session code runs against it unchanged.

The host services answer from a `FakeHost` (in-memory stores with the broker's
semantics, `._store`), checking the caller's token and capabilities as the broker
does (`broker/src/grpc/host.rs`, `grpc/agent.rs`): PERMISSION_DENIED naming the
capability, secrets of the core and of other plugins masked without
`settings_secrets`, INVALID_ARGUMENT / NOT_FOUND with the broker's messages. Every call
is recorded in `FakeBroker.host_calls`; `override(service, method, reply)` answers a
method with a fixed reply or a failure instead (fault injection).

The broker side of each Attach stream is a `BrokerSession`: send `InvokeTool`,
`RunStage`, `HandleEvent`, `Ping`, `Shutdown` …; results are matched by call id.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Dict, Iterable, List, Optional, Tuple, cast

import grpc
import grpc.aio

from .._channel import MAX_MESSAGE
from .._host import TOKEN_METADATA
from ..v1 import host_pb2, host_pb2_grpc
from ..v1 import plugin_pb2 as pb
from ..v1 import plugin_pb2_grpc as pb_grpc
from ._store import FakeHost, Injected, StoreError, json_loads, json_text

__all__ = ["ALL_CAPABILITIES", "BrokerSession", "FakeBroker", "HostCall"]

#: Every capability a plugin.json may grant (`broker/src/manifest.rs`).
ALL_CAPABILITIES = ("memory", "knowledge", "mcp", "llm", "input", "input_as_user", "settings_core",
                    "settings_cross", "settings_secrets")

#: The capability each host-service method needs (None: none).
_NEEDS: Dict[str, Optional[str]] = {
    "Settings.Get": None, "Settings.Set": None, "Settings.List": None, "Settings.RegisterDef": None,
    "Settings.Defs": None, "Settings.Plugins": None,
    "Settings.GetCore": "settings_core", "Settings.SetCore": "settings_core",
    "Settings.ListCore": "settings_core",
    "Settings.GetPlugin": "settings_cross", "Settings.SetPlugin": "settings_cross",
    "Settings.ListPlugin": "settings_cross", "Settings.Dump": "settings_cross",
    "Memory.*": "memory", "TextMemory.*": "memory", "DocMemory.*": "memory",
    "Knowledge.*": "knowledge", "Llm.*": "llm", "Input.*": "input", "Mcp.*": "mcp",
}

HOST_SERVICES = ("Settings", "Memory", "TextMemory", "DocMemory", "Knowledge", "Llm", "Input", "Mcp")


@dataclass(frozen=True)
class HostCall:
    """One host-service call a plugin made: `service` ("Settings"), `method` ("Get"),
    the calling `plugin` (by its token; "" for an unknown token), the `token` and the
    request message."""

    service: str
    method: str
    plugin: str
    token: str
    request: Any


class _Admission:
    def __init__(self, plugin: Optional[str], capabilities: Optional[Iterable[str]]) -> None:
        self.plugin = plugin
        self.capabilities = None if capabilities is None else frozenset(capabilities)
        self.registered: Optional[str] = None  # the name its session registered

    def name(self) -> str:
        return self.plugin or self.registered or "plugin"

    def holds(self, cap: str) -> bool:
        return self.capabilities is None or cap in self.capabilities


class BrokerSession:
    """The broker's side of one Attach stream.

    Everything the plugin sends is in `received` (a PluginBatch's messages one by one,
    counted in `batches`); tool results resolve `result(call_id)`,
    pongs `ping()`, stage results `stage_result(call_id)`, event replies and EventDone
    `event_outcome(call_id)`, progress goes to `progress[call_id]`. With `keep_inbox`
    (the default) every other message is also queued for `next()`.
    """

    def __init__(self, context: Any, *, keep_inbox: bool = True) -> None:
        self.context = context
        self.keep_inbox = keep_inbox
        self.outbox: asyncio.Queue[Optional[pb.HostMessage]] = asyncio.Queue()
        self.inbox: asyncio.Queue[pb.PluginMessage] = asyncio.Queue()
        self.received: List[pb.PluginMessage] = []
        #: PluginBatch messages received (their messages are in `received`, in order).
        self.batches = 0
        self.results: Dict[int, asyncio.Future[pb.ToolResult]] = {}
        self.stage_results: Dict[int, asyncio.Future[pb.StageResult]] = {}
        self.event_done: Dict[int, asyncio.Future[Tuple[List[str], str]]] = {}
        self.replies: Dict[int, List[str]] = {}
        self.progress: Dict[int, List[pb.Progress]] = {}
        self.pongs: Dict[int, asyncio.Future[float]] = {}
        self.ended = asyncio.Event()
        self.hello: Optional[pb.Hello] = None
        self.register: Optional[pb.Register] = None
        self.token = ""
        #: Answers a live RegisterTool / UnregisterTool (None: leave it unanswered).
        self.on_live_registration: Optional[Callable[[pb.PluginMessage], Optional[pb.HostMessage]]] = None
        self._ids = itertools.count(1)
        self._registered = asyncio.Event()

    def _future(self, table: Dict[int, "asyncio.Future[Any]"], call_id: int) -> "asyncio.Future[Any]":
        fut = table.get(call_id)
        if fut is None:
            fut = table[call_id] = asyncio.get_running_loop().create_future()
        return fut

    async def _reader(self) -> None:
        try:
            while True:
                msg = await self.context.read()
                if msg is grpc.aio.EOF:
                    break
                self._take(msg)
        except Exception:
            pass
        finally:
            self.ended.set()
            for table in (self.results, self.stage_results, self.event_done):
                for fut in table.values():
                    if not fut.done():
                        fut.set_exception(ConnectionError("the plugin's session ended"))

    def _take(self, msg: pb.PluginMessage) -> None:
        kind = msg.WhichOneof("msg")
        if kind == "batch":  # sent only when accept() offered "batch"
            self.batches += 1
            for inner in msg.batch.msgs:
                self._take(inner)
            return
        self.received.append(msg)
        if kind == "tool_result":
            fut = self._future(self.results, msg.tool_result.call_id)
            if not fut.done():
                fut.set_result(msg.tool_result)
            return
        if kind == "pong":
            pong = self.pongs.get(msg.pong.nonce)
            if pong is not None and not pong.done():
                pong.set_result(time.monotonic())
            return
        if kind == "hello":
            self.hello = msg.hello
        elif kind == "register":
            self.register = msg.register
            self._registered.set()
        elif kind == "stage_result":
            fut = self._future(self.stage_results, msg.stage_result.call_id)
            if not fut.done():
                fut.set_result(msg.stage_result)
        elif kind == "reply":
            self.replies.setdefault(msg.reply.call_id, []).append(msg.reply.text)
        elif kind == "event_done":
            done = msg.event_done
            fut = self._future(self.event_done, done.call_id)
            if not fut.done():
                fut.set_result((self.replies.pop(done.call_id, []), done.error))
        elif kind == "progress":
            self.progress.setdefault(msg.progress.call_id, []).append(msg.progress)
        elif kind in ("register_tool", "unregister_tool") and self.on_live_registration is not None:
            answer = self.on_live_registration(msg)
            if answer is not None:
                self.send(answer)
        if self.keep_inbox:
            self.inbox.put_nowait(msg)

    # ------------------------------------------------------------------ handshake

    async def next(self, kind: Optional[str] = None, timeout: float = 10.0) -> pb.PluginMessage:
        """The next message that is not a tool result or a pong (optionally of `kind`;
        another kind fails with AssertionError). Needs `keep_inbox`."""
        msg = await asyncio.wait_for(self.inbox.get(), timeout)
        if kind is not None:
            assert msg.WhichOneof("msg") == kind, f"expected {kind}, got {msg}"
        return msg

    async def registration(self, timeout: float = 10.0) -> pb.Register:
        """The plugin's Register message, once it came."""
        await asyncio.wait_for(self._registered.wait(), timeout)
        assert self.register is not None
        return self.register

    async def handshake(self, accept: bool = True) -> None:
        """Read Hello and Register (from the inbox); answer Registered naming every tool
        when `accept`."""
        self.hello = (await self.next("hello")).hello
        self.register = (await self.next("register")).register
        if accept:
            self.accept()

    def accept(self, rejected: Iterable[pb.RejectedItem] = (),
               features: Iterable[str] = ("cancel", "progress")) -> None:
        """Answer Registered with every tool of Register (minus `rejected` ones) and
        `features` ("batch" lets the plugin send PluginBatch)."""
        assert self.register is not None
        items = list(rejected)
        refused = {i.name for i in items if i.kind == "tool"}
        self.send(pb.HostMessage(registered=pb.Registered(
            plugin=self.register.plugin.name,
            tools=[t.name for t in self.register.tools if t.name not in refused],
            rejected=items, protocol_version="1.0.0", features=list(features))))

    def send(self, msg: pb.HostMessage) -> None:
        """Queue one message to the plugin."""
        self.outbox.put_nowait(msg)

    def close(self) -> None:
        """End the stream from the broker side (status OK)."""
        self.outbox.put_nowait(None)

    def next_id(self) -> int:
        """A fresh call id."""
        return next(self._ids)

    # ------------------------------------------------------------------ calls

    def invoke(self, tool: str, args: Any, *, sender: Optional[Dict[str, str]] = None,
               call_id: Optional[int] = None, raw_args: Optional[str] = None,
               timeout_ms: int = 10000, traceparent: str = "", tracestate: str = "") -> int:
        """Send InvokeTool (with the W3C trace context `traceparent` / `tracestate`, as a
        tracing broker sends it); returns its call_id."""
        cid = call_id if call_id is not None else self.next_id()
        self._future(self.results, cid)
        self.send(pb.HostMessage(invoke_tool=pb.InvokeTool(
            call_id=cid, tool=tool,
            args_json=raw_args if raw_args is not None else json.dumps(args, ensure_ascii=False),
            sender=pb.Sender(**(sender or {})), timeout_ms=timeout_ms, traceparent=traceparent,
            tracestate=tracestate)))
        return cid

    async def result(self, call_id: int, timeout: float = 10.0) -> pb.ToolResult:
        """The ToolResult of call `call_id`."""
        return await asyncio.wait_for(asyncio.shield(self._future(self.results, call_id)), timeout)

    async def call(self, tool: str, args: Any, timeout: float = 10.0, **kw: Any) -> pb.ToolResult:
        """One InvokeTool round trip."""
        return await self.result(self.invoke(tool, args, **kw), timeout)

    def run_stage(self, stage: int, hook_id: str, context: pb.StageContext, *,
                  call_id: Optional[int] = None, timeout_ms: int = 5000, traceparent: str = "",
                  tracestate: str = "") -> int:
        """Send RunStage; returns its call_id."""
        cid = call_id if call_id is not None else self.next_id()
        self._future(self.stage_results, cid)
        self.send(pb.HostMessage(run_stage=pb.RunStage(
            call_id=cid, stage=cast("pb.Stage", stage), hook_id=hook_id, context=context,
            timeout_ms=timeout_ms, traceparent=traceparent, tracestate=tracestate)))
        return cid

    async def stage_result(self, call_id: int, timeout: float = 10.0) -> pb.StageResult:
        """The StageResult of call `call_id`."""
        return await asyncio.wait_for(asyncio.shield(self._future(self.stage_results, call_id)), timeout)

    def handle_event(self, message: str, params: List[str], *, call_id: Optional[int] = None,
                     sender: Optional[Dict[str, str]] = None,
                     trigger: Optional[Tuple[int, str]] = None, timeout_ms: int = 10000,
                     traceparent: str = "", tracestate: str = "") -> int:
        """Send HandleEvent (as the broker does when a trigger matched); returns its call_id."""
        cid = call_id if call_id is not None else self.next_id()
        self._future(self.event_done, cid)
        ttype, pattern = trigger or (0, message.split(" ", 1)[0])
        self.send(pb.HostMessage(handle_event=pb.HandleEvent(
            call_id=cid, message=message, params=params, sender=pb.Sender(**(sender or {})),
            trigger=pb.Trigger(type=cast("pb.TriggerType", ttype), pattern=pattern),
            timeout_ms=timeout_ms, traceparent=traceparent, tracestate=tracestate)))
        return cid

    async def event_outcome(self, call_id: int, timeout: float = 10.0) -> Tuple[List[str], str]:
        """([reply texts in order], EventDone.error) of event call `call_id`."""
        return await asyncio.wait_for(asyncio.shield(self._future(self.event_done, call_id)), timeout)

    async def events(self, call_ids: List[int], timeout: float = 10.0) -> Dict[int, Tuple[List[str], str]]:
        """Read the inbox until every call in `call_ids` sent EventDone: {call_id: ([reply
        texts in order], EventDone.error)}. Any other message fails (AssertionError)."""
        got: Dict[int, List[str]] = {cid: [] for cid in call_ids}
        done: Dict[int, Tuple[List[str], str]] = {}
        while len(done) < len(call_ids):
            msg = await self.next(timeout=timeout)
            kind = msg.WhichOneof("msg")
            if kind == "reply" and msg.reply.call_id in got and msg.reply.call_id not in done:
                got[msg.reply.call_id].append(msg.reply.text)
            elif kind == "event_done" and msg.event_done.call_id in got:
                done[msg.event_done.call_id] = (got[msg.event_done.call_id], msg.event_done.error)
            else:
                raise AssertionError(f"unexpected message while waiting for events {call_ids}: {msg}")
        return done

    async def event(self, message: str, params: List[str], timeout: float = 10.0,
                    **kw: Any) -> Tuple[List[str], str]:
        """One HandleEvent round trip read from the inbox: ([reply texts], error)."""
        cid = self.handle_event(message, params, **kw)
        return (await self.events([cid], timeout))[cid]

    def cancel(self, call_id: int, reason: str = "") -> None:
        """Send Cancel for `call_id`."""
        self.send(pb.HostMessage(cancel=pb.Cancel(call_id=call_id, reason=reason)))

    async def ping(self, nonce: int, timeout: float = 5.0) -> float:
        """Send Ping and return the seconds until its Pong."""
        fut: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.pongs[nonce] = fut
        t0 = time.monotonic()
        self.send(pb.HostMessage(ping=pb.Ping(nonce=nonce)))
        t1 = await asyncio.wait_for(fut, timeout)
        return t1 - t0

    def shutdown(self, grace_ms: int = 2000, reason: str = "") -> None:
        """Send Shutdown."""
        self.send(pb.HostMessage(shutdown=pb.Shutdown(grace_ms=grace_ms, reason=reason)))


class _PluginHost(pb_grpc.PluginHostServicer):
    def __init__(self, broker: "FakeBroker") -> None:
        self.broker = broker

    async def Attach(self, request_iterator: AsyncIterator[pb.PluginMessage], context: Any) -> Any:
        token = dict(context.invocation_metadata()).get(TOKEN_METADATA, "")
        admission = self.broker._admitted.get(token)
        if admission is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "stale or wrong spawn token")
            return
        sess = BrokerSession(context, keep_inbox=self.broker.keep_inbox)
        sess.token = token
        reader = asyncio.ensure_future(sess._reader())

        async def note_name() -> None:
            reg = await sess.registration(timeout=3600)
            admission.registered = reg.plugin.name

        namer = asyncio.ensure_future(note_name())
        self.broker.sessions.put_nowait(sess)
        try:
            while True:
                msg = await sess.outbox.get()
                if msg is None:
                    return
                await context.write(msg)
        finally:
            await asyncio.sleep(0)
            for task in (reader, namer):
                if not task.done():
                    task.cancel()


class _Service:
    """One host service: each rpc checks the token and the capability, records the
    call, then answers from an override or from `FakeBroker`'s handler."""

    def __init__(self, broker: "FakeBroker", service: str) -> None:
        self.broker = broker
        self.service = service
        for m in host_pb2.DESCRIPTOR.services_by_name[service].methods:
            setattr(self, m.name, self._method(m.name))

    def _method(self, method: str) -> Callable[[Any, Any], Any]:
        broker, service = self.broker, self.service

        async def call(request: Any, context: Any) -> Any:
            token = dict(context.invocation_metadata()).get(TOKEN_METADATA, "")
            admission = broker._admitted.get(token)
            broker.record(HostCall(service, method, admission.name() if admission else "", token, request))
            reply = broker.overrides.get((service, method))
            if reply is not None:
                if isinstance(reply, tuple):
                    await context.abort(reply[0], reply[1])
                return reply(request) if callable(reply) else reply
            if admission is None:
                await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                    "x-hearth-token does not match any running plugin")
                return None
            name = f"{service}.{method}"
            plugin = admission.name()
            cap = _NEEDS.get(name, _NEEDS.get(f"{service}.*"))
            if cap is not None and not admission.holds(cap):
                await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                    f"plugin {plugin}: {name} needs capability `{cap}`; add it to "
                                    "`capabilities` in its plugin.json")
            try:
                handler = getattr(broker, f"_{service}_{method}")
                return handler(plugin, admission, request)
            except StoreError as e:
                await context.abort(getattr(grpc.StatusCode, e.code), e.message)
            return None

        return call


def _value(method: str, text: str) -> Any:
    if not text.strip():
        raise StoreError("INVALID_ARGUMENT", f"{method}: value_json is empty; send JSON text "
                                             "(e.g. \"\\\"text\\\"\", 3, true, null)")
    try:
        return json_loads(text)
    except ValueError as e:
        raise StoreError("INVALID_ARGUMENT", f"{method}: value_json is not JSON: {e}") from None


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def def_from_wire(d: pb.ConfigDef) -> Dict[str, Any]:
    """A wire ConfigDef as the dict `SettingsStore` keeps (INVALID_ARGUMENT for a
    default_json that is not JSON)."""
    out: Dict[str, Any] = {"key": d.key, "type": d.type, "display_name": d.display_name}
    if d.default_json.strip():
        try:
            out["default"] = json_loads(d.default_json)
        except ValueError as e:
            raise StoreError("INVALID_ARGUMENT", f"Settings.RegisterDef: def `{d.key}`: default_json "
                                                 f"is not JSON: {e}") from None
    for k in ("description", "category"):
        if getattr(d, k):
            out[k] = getattr(d, k)
    if d.options:
        out["options"] = list(d.options)
    for k in ("min", "max", "step"):
        if d.HasField(k):
            out[k] = getattr(d, k)
    for k in ("required", "secret"):
        if getattr(d, k):
            out[k] = True
    return out


def def_to_wire(d: Dict[str, Any]) -> pb.ConfigDef:
    """The wire ConfigDef of a stored def dict."""
    w = pb.ConfigDef(key=d["key"], type=str(d.get("type") or ""), display_name=str(d.get("display_name") or ""),
                     description=str(d.get("description") or ""), category=str(d.get("category") or ""),
                     options=[str(o) for o in d.get("options") or []], required=bool(d.get("required")),
                     secret=bool(d.get("secret")),
                     default_json=json_text(d["default"]) if "default" in d else "")
    for k in ("min", "max", "step"):
        if d.get(k) is not None:
            setattr(w, k, float(d[k]))
    return w


class FakeBroker:
    """A fake broker serving `PluginHost` and the host services from `host`.

    `admit(token, plugin, capabilities)` lets a plugin in; `start()` binds a temporary
    Unix socket (or 127.0.0.1:0 with `tcp=True`) and `addr` is then its HEARTH_ADDR;
    each attached session arrives on `sessions` (`await next_session()`). Use it from
    one event loop. `stop()` closes the server and removes the socket.
    """

    def __init__(self, host: Optional[FakeHost] = None, *, tcp: bool = False,
                 keep_inbox: bool = True) -> None:
        self.host = host if host is not None else FakeHost()
        self.tcp = tcp
        self.keep_inbox = keep_inbox
        self.addr = ""
        self.server: Any = None
        self.sessions: asyncio.Queue[BrokerSession] = asyncio.Queue()
        #: Every host-service call, in order.
        self.host_calls: List[HostCall] = []
        #: (service, method) → a response message, a callable(request) → message, or a
        #: (grpc.StatusCode, details) pair to fail with; answered instead of `host`.
        self.overrides: Dict[Tuple[str, str], Any] = {}
        self._admitted: Dict[str, _Admission] = {}
        self._sockdir: Optional[str] = None

    def admit(self, token: str, plugin: Optional[str] = None,
              capabilities: Optional[Iterable[str]] = None) -> None:
        """Accept `token` as the plugin named `plugin` (None: the name its session
        registers) holding `capabilities` (None: every capability)."""
        self._admitted[token] = _Admission(plugin, capabilities)

    def override(self, service: str, method: str, reply: Any) -> None:
        """Answer `service`/`method` (e.g. "Settings", "Get") with `reply` (a response
        message, a callable(request) → message, or a (grpc.StatusCode, details) pair)
        instead of the fake host; None removes the override."""
        if reply is None:
            self.overrides.pop((service, method), None)
        else:
            self.overrides[(service, method)] = reply

    def record(self, call: HostCall) -> None:
        """Called for every host-service call (appends it to `host_calls`)."""
        self.host_calls.append(call)

    async def start(self) -> None:
        """Bind and start the server; `addr` is set."""
        self.server = grpc.aio.server(options=[("grpc.max_send_message_length", MAX_MESSAGE),
                                               ("grpc.max_receive_message_length", MAX_MESSAGE)])
        pb_grpc.add_PluginHostServicer_to_server(_PluginHost(self), self.server)
        for service in HOST_SERVICES:
            getattr(host_pb2_grpc, f"add_{service}Servicer_to_server")(_Service(self, service), self.server)
        if self.tcp:
            port = self.server.add_insecure_port("127.0.0.1:0")
            self.addr = f"http://127.0.0.1:{port}"
        else:
            # Unix socket paths are limited to ~107 bytes: a short directory of its own.
            self._sockdir = tempfile.mkdtemp(prefix="hearth-test-")
            sock = os.path.join(self._sockdir, "hearth.sock")
            self.server.add_insecure_port(f"unix://{sock}")
            self.addr = f"unix://{sock}"
        await self.server.start()

    async def stop(self, grace: Optional[float] = None) -> None:
        """Stop the server (open streams are cut) and remove the socket."""
        if self.server is not None:
            await self.server.stop(grace)
        if self._sockdir is not None:
            shutil.rmtree(self._sockdir, ignore_errors=True)

    async def next_session(self, timeout: float = 10.0) -> BrokerSession:
        """The next session to attach."""
        return await asyncio.wait_for(self.sessions.get(), timeout)

    # ------------------------------------------------------------------ Settings

    def _secrets_clear(self, plugin: str, admission: _Admission, scope: Optional[str]) -> bool:
        return scope == plugin or admission.holds("settings_secrets")

    def _check_secret_write(self, plugin: str, admission: _Admission, method: str,
                            scope: Optional[str], key: str) -> None:
        if self._secrets_clear(plugin, admission, scope) or not self.host.settings.is_secret(scope, key):
            return
        where = "core" if scope is None else f"plugin {scope}"
        raise StoreError("PERMISSION_DENIED", f"plugin {plugin}: {method}: `{key}` of {where} is secret; "
                                              "overwriting it needs capability `settings_secrets`; add it "
                                              "to `capabilities` in its plugin.json")

    @staticmethod
    def _other(method: str, plugin: str) -> str:
        if not plugin.strip():
            raise StoreError("INVALID_ARGUMENT", f"{method}: `plugin` is empty")
        return plugin

    def _Settings_Get(self, plugin: str, a: _Admission, r: Any) -> Any:
        return host_pb2.ValueResponse(value_json=json_text(self.host.settings.get(plugin, r.key)))

    def _Settings_Set(self, plugin: str, a: _Admission, r: Any) -> Any:
        self.host.settings.set(plugin, r.key, _value("Settings.Set", r.value_json))
        return host_pb2.Empty()

    def _Settings_List(self, plugin: str, a: _Admission, r: Any) -> Any:
        return host_pb2.KeysResponse(keys=self.host.settings.list(plugin, r.prefix))

    def _Settings_GetCore(self, plugin: str, a: _Admission, r: Any) -> Any:
        masked = not self._secrets_clear(plugin, a, None)
        return host_pb2.ValueResponse(value_json=json_text(self.host.settings.get(None, r.key, masked=masked)))

    def _Settings_SetCore(self, plugin: str, a: _Admission, r: Any) -> Any:
        value = _value("Settings.SetCore", r.value_json)
        self._check_secret_write(plugin, a, "Settings.SetCore", None, r.key)
        self.host.settings.set(None, r.key, value)
        return host_pb2.Empty()

    def _Settings_ListCore(self, plugin: str, a: _Admission, r: Any) -> Any:
        return host_pb2.KeysResponse(keys=self.host.settings.list(None, r.prefix))

    def _Settings_GetPlugin(self, plugin: str, a: _Admission, r: Any) -> Any:
        scope = self._other("Settings.GetPlugin", r.plugin)
        masked = not self._secrets_clear(plugin, a, scope)
        return host_pb2.ValueResponse(value_json=json_text(self.host.settings.get(scope, r.key, masked=masked)))

    def _Settings_SetPlugin(self, plugin: str, a: _Admission, r: Any) -> Any:
        scope = self._other("Settings.SetPlugin", r.plugin)
        value = _value("Settings.SetPlugin", r.value_json)
        self._check_secret_write(plugin, a, "Settings.SetPlugin", scope, r.key)
        self.host.settings.set(scope, r.key, value)
        return host_pb2.Empty()

    def _Settings_ListPlugin(self, plugin: str, a: _Admission, r: Any) -> Any:
        scope = self._other("Settings.ListPlugin", r.plugin)
        return host_pb2.KeysResponse(keys=self.host.settings.list(scope, r.prefix))

    def _Settings_RegisterDef(self, plugin: str, a: _Admission, r: Any) -> Any:
        self.host.settings.register_def(plugin, def_from_wire(r))
        return host_pb2.Empty()

    def _Settings_Defs(self, plugin: str, a: _Admission, r: Any) -> Any:
        return host_pb2.DefsResponse(defs=[def_to_wire(d) for d in self.host.settings.defs(plugin, r.prefix)])

    def _Settings_Dump(self, plugin: str, a: _Admission, r: Any) -> Any:
        return host_pb2.DumpResponse(dump_json=json_text(self.host.settings.dump()))

    def _Settings_Plugins(self, plugin: str, a: _Admission, r: Any) -> Any:
        return host_pb2.KeysResponse(keys=self.host.settings.plugins())

    # ------------------------------------------------------------------ memory services

    def _Memory_Recall(self, plugin: str, a: _Admission, r: Any) -> Any:
        entities, relations = self.host.memory.recall(list(r.keywords), r.depth)
        return host_pb2.RecallResponse(entities=[host_pb2.Entity(**e) for e in entities],
                                       relations=[host_pb2.Relation(**x) for x in relations])

    def _Memory_Commit(self, plugin: str, a: _Admission, r: Any) -> Any:
        triples = [{k: getattr(t, k) for k in ("subject", "relation", "object", "subject_type",
                                               "object_type", "session_id")} for t in r.triples]
        return host_pb2.CommitResponse(committed=self.host.memory.commit(triples))

    def _Memory_Introspect(self, plugin: str, a: _Admission, r: Any) -> Any:
        return host_pb2.IntrospectResponse(stats_json=_json(self.host.memory.introspect()))

    def _Memory_MergeEntities(self, plugin: str, a: _Admission, r: Any) -> Any:
        return host_pb2.CountResponse(count=self.host.memory.merge_entities(r.source, r.target))

    def _Memory_Purge(self, plugin: str, a: _Admission, r: Any) -> Any:
        return host_pb2.CountResponse(count=self.host.memory.purge(dict(r.criteria), r.mode))

    def _TextMemory_Append(self, plugin: str, a: _Admission, r: Any) -> Any:
        self.host.text_memory.append({"role": r.role, "content": r.content, "timestamp": r.timestamp,
                                      "channel": r.channel})
        return host_pb2.Empty()

    def _DocMemory_Query(self, plugin: str, a: _Admission, r: Any) -> Any:
        return host_pb2.DocsResponse(docs=[host_pb2.Doc(**d) for d in self.host.docs.query(r.text, r.top_k)])

    def _DocMemory_Insert(self, plugin: str, a: _Admission, r: Any) -> Any:
        self.host.docs.insert({"id": r.id, "title": r.title, "content": r.content})
        return host_pb2.Empty()

    def _DocMemory_Remove(self, plugin: str, a: _Admission, r: Any) -> Any:
        self.host.docs.remove(r.id)
        return host_pb2.Empty()

    def _DocMemory_Stats(self, plugin: str, a: _Admission, r: Any) -> Any:
        return host_pb2.StatsResponse(stats_json=_json(self.host.docs.stats()))

    def _Knowledge_Search(self, plugin: str, a: _Admission, r: Any) -> Any:
        return host_pb2.KnowledgeResponse(
            entries=[host_pb2.KnowledgeEntry(**e) for e in self.host.knowledge.search(r.query, r.top_k)])

    def _Knowledge_Add(self, plugin: str, a: _Admission, r: Any) -> Any:
        self.host.knowledge.add(r.name, r.content)
        return host_pb2.Empty()

    def _Knowledge_List(self, plugin: str, a: _Admission, r: Any) -> Any:
        return host_pb2.KeysResponse(keys=self.host.knowledge.list())

    def _Llm_ListSources(self, plugin: str, a: _Admission, r: Any) -> Any:
        return host_pb2.KeysResponse(keys=list(self.host.llm.sources))

    def _Llm_SetSource(self, plugin: str, a: _Admission, r: Any) -> Any:
        try:
            self.host.llm.set_current(r.name)
        except StoreError as e:
            raise StoreError(e.code, f"plugin {plugin}: set_source: {e.message}") from None
        return host_pb2.Empty()

    def _Llm_CurrentSource(self, plugin: str, a: _Admission, r: Any) -> Any:
        return host_pb2.SourceRequest(name=self.host.llm.current())

    # ------------------------------------------------------------------ Mcp

    def _Mcp_Request(self, plugin: str, a: _Admission, r: Any) -> Any:
        params = None
        if r.server not in self.host.mcp.servers():
            raise StoreError("NOT_FOUND", f"no MCP plugin named {r.server}")
        if r.params_json.strip():
            try:
                params = json_loads(r.params_json)
            except ValueError as e:
                raise StoreError("INVALID_ARGUMENT", f"params are not JSON: {e}") from None
        return host_pb2.McpResponse(result_json=_json(self.host.mcp.request(r.server, r.method, params)))

    # ------------------------------------------------------------------ Input

    def _inject(self, plugin: str, a: _Admission, r: Any, method: str, no_memory: bool,
                interrupt: bool) -> Any:
        name = f"Input.{method}"
        if not r.text.strip():
            raise StoreError("INVALID_ARGUMENT", f"plugin {plugin}: inject: text is empty")
        identity = f"plugin:{plugin}"

        def own(s: str) -> bool:
            return s in ("", plugin, identity)

        for field_name, value in (("source", r.source), ("user_id", r.user_id)):
            if not a.holds("input_as_user") and not own(value):
                raise StoreError("PERMISSION_DENIED",
                                 f"plugin {plugin}: {name}: `{field_name}` \"{value}\" is not this plugin "
                                 f"({identity}); injecting as another user or source needs capability "
                                 f"`input_as_user`; add it to `capabilities` in its plugin.json, or leave "
                                 f"`{field_name}` empty")
        source = identity if own(r.source) else r.source
        user_id = source if not r.user_id else (identity if own(r.user_id) else r.user_id)
        if not 0 <= r.priority <= 4:
            raise StoreError("INVALID_ARGUMENT", f"priority {r.priority} is not a level: 1 background, "
                                                 "2 message, 3 interactive, 4 critical")
        priority = 4 if interrupt else (r.priority or 1)
        self.host.injected.append(Injected(plugin, method, source, r.channel or plugin, r.text, user_id,
                                           r.group_id, priority, no_memory, interrupt))
        return host_pb2.Empty()

    def _Input_InjectText(self, plugin: str, a: _Admission, r: Any) -> Any:
        return self._inject(plugin, a, r, "InjectText", False, False)

    def _Input_InjectTextNoMemory(self, plugin: str, a: _Admission, r: Any) -> Any:
        return self._inject(plugin, a, r, "InjectTextNoMemory", True, False)

    def _Input_InjectInterruptText(self, plugin: str, a: _Admission, r: Any) -> Any:
        return self._inject(plugin, a, r, "InjectInterruptText", False, True)

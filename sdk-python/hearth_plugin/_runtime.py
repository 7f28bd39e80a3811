"""The plugin session: start the plugin, dial the broker, Hello + Register, serve calls.

`start()` runs the plugin's `start(sdk)` (host calls already work there: the
connection exists) and adds what it registered. `Session` is one Attach stream: one
reader loop (`Session._read_loop`) receives every HostMessage and answers Ping at
once; each InvokeTool / HandleEvent / RunStage runs as its own asyncio task; every
outgoing message goes through one queue feeding the request iterator, so writes never
interleave. Plain `def` handlers run in the session's thread pool and never delay pongs.
`serve()` (`await hearth_plugin.serve(plugin)`) puts these together on the caller's
event loop; `hearth_plugin._main` runs it on a loop of its own for `run()` and
`python -m hearth_plugin run`.

Exit codes: 0 after Shutdown or when the broker ends the stream; 1 when the stream
fails (broker unreachable, UNAUTHENTICATED, ...); 2 when the plugin cannot be loaded or
started (raised as PluginLoadError / ConfigError by `serve()`); 3 when the broker
rejects the registration.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import contextvars
import functools
import inspect
import itertools
import json
import os
import sys
import traceback
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Iterator, Optional, Set, Tuple

import grpc
import grpc.aio

from . import __version__
from ._channel import MAX_MESSAGE, channel_target
from ._env import ConfigError, read_env
from ._host import Connection
from ._loader import LoadedPlugin, load, resolve
from ._plugin import Target
from ._result import Outcome, from_exception, from_linkzone, from_value, to_json
from ._stages import STAGES, StageContext, StageHookEntry, from_wire, to_wire
from ._types import (ArgumentError, CallContext, PluginLoadError, Sender, ToolEntry, current_call,
                     current_trace, is_async_callable)
from .v1 import plugin_pb2 as pb
from .v1 import plugin_pb2_grpc as pb_grpc

__all__ = ["EXIT_LOAD_ERROR", "EXIT_OK", "EXIT_REJECTED", "EXIT_STREAM_ERROR", "MAX_MESSAGE",
           "PROTOCOL_VERSION", "SDK_NAME", "Pools", "Session", "call_handler", "channel_target",
           "log", "register_message", "result_message", "serve", "serve_loaded", "start"]

PROTOCOL_VERSION = "1.0.0"
SDK_NAME = "hearth-plugin-python"
FEATURES = ("cancel", "progress", "trace", "batch")
_MIB = 1024 * 1024
# Bytes a ToolResult message adds around its strings: field tags, length varints, call_id,
# the PluginMessage wrapper (generous).
_RESULT_OVERHEAD = 64
# A PluginBatch holds at most this many messages and bytes (the broker's HostBatch
# limits); a larger message goes alone.
_BATCH_MSGS = 64
_BATCH_BYTES = 256 * 1024

EXIT_OK = 0
EXIT_STREAM_ERROR = 1
EXIT_LOAD_ERROR = 2
EXIT_REJECTED = 3

_TRIGGER_NAMES = {"command": 0, "keyword": 1, "regex": 2, "segment": 3, "event": 4}


def log(msg: str) -> None:
    """One line to stderr (the broker keeps it as the plugin's log)."""
    try:
        sys.stderr.write(f"hearth: {msg}\n")
        sys.stderr.flush()
    except Exception:
        pass


class Pools:
    """The threads plain handlers run in: `handlers` (HEARTH_PY_THREADS, default 64) for
    tools, hooks and events, and one thread of its own for start()/stop() so busy
    handler threads cannot delay them."""

    def __init__(self, workers: Optional[int] = None) -> None:
        if workers is None:
            workers = int(os.environ.get("HEARTH_PY_THREADS", "64"))
        self.handlers = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="hearth-handler")
        self.lifecycle = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hearth-lifecycle")

    def shutdown(self) -> None:
        """Stops taking work; threads still blocked in handlers are left to finish."""
        self.handlers.shutdown(wait=False, cancel_futures=True)
        self.lifecycle.shutdown(wait=False, cancel_futures=True)


async def call_handler(fn: Callable[..., Any], *args: Any,
                       executor: Optional[concurrent.futures.Executor] = None, **kwargs: Any) -> Any:
    """Run `fn`: awaited when async, else in `executor` (the loop's default when None),
    context variables kept; an awaitable a plain function returns is awaited too."""
    if is_async_callable(fn):
        return await fn(*args, **kwargs)
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()
    result = await loop.run_in_executor(executor, functools.partial(ctx.run, fn, *args, **kwargs))
    if inspect.isawaitable(result):
        result = await result
    return result


# OpenTelemetry, imported on the first traced call (importing it costs ~20 ms, a fifth of
# a plugin's start-up, and most sessions are never traced): None = not tried yet, False
# = not installed, else (the opentelemetry.context module, a W3C propagator, opentelemetry.trace).
_otel: Any = None


def _load_otel() -> Any:
    global _otel
    if _otel is None:
        try:
            from opentelemetry import context as otel_context
            from opentelemetry import trace as otel_trace
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
            _otel = (otel_context, TraceContextTextMapPropagator(), otel_trace)
        except Exception:  # ImportError, or a broken install: tracing is optional
            _otel = False
    return _otel


_NO_SCOPE = contextlib.nullcontext()


@contextlib.contextmanager
def trace_scope(traceparent: str, tracestate: str) -> Iterator[None]:
    """Run the block as part of the broker's trace: `current_trace_context()` returns
    the pair, and when `opentelemetry-api` is installed the extracted context is the
    current OpenTelemetry context (spans started in the block, or in a plain handler's
    thread — `call_handler` copies context variables — are children of the broker's
    span). The W3C propagator is used directly, so OTEL_PROPAGATORS cannot turn it off.
    A malformed `traceparent` gives no OpenTelemetry context; never an error."""
    if not traceparent:
        yield
        return
    var_token = current_trace.set((traceparent, tracestate))
    otel_token = None
    otel = _load_otel()
    if otel:
        otel_context, propagator, otel_trace = otel
        try:
            carrier = {"traceparent": traceparent}
            if tracestate:
                carrier["tracestate"] = tracestate
            ctx = propagator.extract(carrier)
            if otel_trace.get_current_span(ctx).get_span_context().is_valid:
                otel_token = otel_context.attach(ctx)
        except Exception:
            otel_token = None
    try:
        yield
    finally:
        if otel_token is not None:
            otel[0].detach(otel_token)
        current_trace.reset(var_token)


def _opt_float(v: Any, field: str) -> float:
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{field} must be a number, got {v!r}")
    return float(v)


def ai_tool_message(ai: Dict[str, Any], where: str) -> pb.AiTool:
    """LinkZone `ai.tool` dict → AiTool (parameters keep default/enum as JSON text)."""
    try:
        msg = pb.AiTool(
            usage=str(ai.get("usage") or ""),
            when_to_use=str(ai.get("when_to_use") or ""),
            continue_conversation=bool(ai.get("continue", False)),
            max_calls=int(ai.get("max_calls") or 0),
            confirm=bool(ai.get("confirm", False)),
            cooldown_s=_opt_float(ai.get("cooldown"), "cooldown"),
            timeout_s=_opt_float(ai.get("timeout"), "timeout"),
        )
        if ai.get("chainable") is not None:
            msg.chainable = bool(ai["chainable"])
        params = ai.get("parameters") or []
        if not isinstance(params, list):
            raise ValueError("parameters must be a list")
        for i, p in enumerate(params):
            if not isinstance(p, dict) or not p.get("name"):
                raise ValueError(f"parameters[{i}] must be a dict with a name")
            param = msg.parameters.add(
                name=str(p["name"]), type=str(p.get("type") or "string"),
                description=str(p.get("description") or ""), required=bool(p.get("required", False)),
            )
            if "default" in p and p["default"] is not None:
                param.default_json = to_json(p["default"])
            if p.get("enum") is not None:
                if not isinstance(p["enum"], (list, tuple)):
                    raise ValueError(f"parameter {p['name']}: enum must be a list")
                param.enum_json = to_json(list(p["enum"]))
            if p.get("example") is not None:
                ex = p["example"]
                param.example = ex if isinstance(ex, str) else to_json(ex)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{where}: metadata.ai.tool: {e}") from None
    return msg


def tool_spec(entry: ToolEntry, where: str) -> pb.ToolSpec:
    """ToolEntry → ToolSpec: `ai_tool` for LinkZone tools (no parameters_json), else a schema."""
    spec = pb.ToolSpec(name=entry.name, serial=entry.serial)
    if entry.ai_tool is not None:
        spec.ai_tool.CopyFrom(ai_tool_message(entry.ai_tool, f"{where}: tool {entry.name}"))
    else:
        spec.description = entry.description
        spec.parameters_json = to_json(entry.parameters or {"type": "object", "properties": {}})
    return spec


def register_message(a: LoadedPlugin) -> pb.Register:
    """The Register message of an assembled plugin."""
    where = f"plugin {a.info['name']}"
    reg = pb.Register(plugin=pb.PluginInfo(**a.info))
    for entry in a.tools.values():
        reg.tools.append(tool_spec(entry, where))
    if a.inject is not None:
        args = a.inject.get("args") or {}
        if not isinstance(args, dict):
            raise ValueError(f"{where}: metadata.ai.inject.args must be a dict")
        reg.inject.CopyFrom(pb.InjectSpec(usage=str(a.inject.get("usage") or ""),
                                          format=str(a.inject.get("format") or ""),
                                          args={str(k): str(v) for k, v in args.items()}))
    for i, t in enumerate(a.triggers):
        if not isinstance(t, dict):
            raise ValueError(f"{where}: metadata.triggers[{i}] must be a dict")
        ttype = t.get("type", 0)
        if isinstance(ttype, str):
            if ttype.lower() not in _TRIGGER_NAMES:
                raise ValueError(f"{where}: metadata.triggers[{i}].type {ttype!r} is not one of "
                                 f"{sorted(_TRIGGER_NAMES)}")
            ttype = _TRIGGER_NAMES[ttype.lower()]
        if not isinstance(ttype, int) or not 0 <= ttype <= 4:
            raise ValueError(f"{where}: metadata.triggers[{i}].type must be 0..4, got {ttype!r}")
        reg.triggers.add(type=ttype, pattern=str(t.get("pattern") or ""))
    for hook in a.sdk._stages:
        reg.stages.add(stage=STAGES.index(hook.stage.value) + 1, own_tools_only=hook.own_tools_only,
                       hook_id=hook.hook_id, no_context_msgs=hook.no_context_msgs)
    return reg


def _utf8_len(text: str) -> int:
    """Bytes of `text` as UTF-8 (no copy for ASCII text)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def result_message(call_id: int, tool: str, outcome: Outcome) -> pb.PluginMessage:
    """The ToolResult message of an outcome, or an error result when it cannot be sent.

    A result over MAX_MESSAGE would fail the whole stream (grpc refuses to send it), and
    text that is not valid UTF-8 (lone surrogates) cannot be encoded: both become error
    results naming the tool, so the plugin keeps serving.
    """
    content, data_json, error = outcome.content, outcome.data_json, outcome.error
    # Cheap bound first: a str of n code points is at most 4n bytes of UTF-8.
    if (len(content) + len(data_json) + len(error)) * 4 + _RESULT_OVERHEAD > MAX_MESSAGE:
        size = _utf8_len(content) + _utf8_len(data_json) + _utf8_len(error)
        if size + _RESULT_OVERHEAD > MAX_MESSAGE:
            err = (f"tool {tool}: result is {size} bytes, over the {MAX_MESSAGE // _MIB} MiB "
                   "message limit")
            log(f"call {call_id}: {err}; sent an error result instead")
            return pb.PluginMessage(tool_result=pb.ToolResult(call_id=call_id, success=False, error=err))
    try:
        return pb.PluginMessage(tool_result=pb.ToolResult(
            call_id=call_id, success=outcome.success, content=content, data_json=data_json,
            error=error))
    except (ValueError, TypeError) as e:  # UnicodeEncodeError: lone surrogates
        err = f"tool {tool}: result cannot be sent: {type(e).__name__}: {e}"
        log(f"call {call_id}: {err}")
        return pb.PluginMessage(tool_result=pb.ToolResult(call_id=call_id, success=False, error=err))


def _sender(msg: pb.Sender, call: Any, **extra: Any) -> Sender:
    """The Sender of a call message (InvokeTool / HandleEvent), with its trace context."""
    return Sender(user_id=msg.user_id, group_id=msg.group_id, channel=msg.channel,
                  session_id=msg.session_id, traceparent=call.traceparent,
                  tracestate=call.tracestate, **extra)


class _Outbox:
    """The messages waiting for the request iterator, in order (loop thread only):
    `put` never blocks; `wait` returns once at least one is there (the consumer pops)."""

    __slots__ = ("items", "waiter", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.items: collections.deque[Optional[pb.PluginMessage]] = collections.deque()
        self.waiter: Optional[asyncio.Future[None]] = None
        self.loop = loop

    def put(self, msg: Optional[pb.PluginMessage]) -> None:
        self.items.append(msg)
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> None:
        while not self.items:
            self.waiter = self.loop.create_future()
            await self.waiter


class Session:
    """One Attach stream: handshake, then the read loop and the per-call tasks."""

    def __init__(self, loaded: LoadedPlugin, conn: Connection, pools: Pools) -> None:
        self.a = loaded
        self.conn = conn
        self.pools = pools
        self.name = loaded.name
        self.loop = asyncio.get_running_loop()
        self.out = _Outbox(self.loop)
        # Both sides agreed on "batch" (Registered.features): several ready messages
        # may go in one PluginBatch.
        self.batching = False
        self.tasks: Dict[Tuple[str, int], asyncio.Task[None]] = {}
        self.cancelled: Set[int] = set()
        self.closing = False
        self._req_ids = itertools.count(1)  # next() is atomic: handler threads register too
        self._registered = False
        self._hooks: Optional[Dict[str, Tuple[StageHookEntry, bool]]] = None  # hook id → (entry, is async)

    # ---------------------------------------------------------------- writing

    def send(self, msg: pb.PluginMessage) -> None:
        """Queue one message (loop thread only)."""
        self.out.put(msg)

    def send_threadsafe(self, msg: pb.PluginMessage) -> None:
        """Queue one message from another thread."""
        self.loop.call_soon_threadsafe(self.out.put, msg)

    def send_any(self, msg: pb.PluginMessage) -> None:
        """Queue one message from the loop thread or any other (handler threads)."""
        try:
            same = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            same = False
        (self.send if same else self.send_threadsafe)(msg)

    async def _requests(self) -> AsyncIterator[pb.PluginMessage]:
        """The messages to the broker, in order; with batching agreed, the ones queued
        together go in one PluginBatch (at most _BATCH_MSGS / _BATCH_BYTES; a larger
        message alone). grpc.aio writes one message at a time, so what handlers finish
        while a write is under way goes out together in the next."""
        items = self.out.items
        while True:
            if not items:
                await self.out.wait()
            msg = items.popleft()
            if msg is None:
                return
            if not items or not self.batching:
                yield msg
                continue
            size = msg.ByteSize()
            if size > _BATCH_BYTES:
                yield msg
                continue
            batch = [msg]
            while items and len(batch) < _BATCH_MSGS:
                nxt = items[0]
                if nxt is None:
                    break
                size += nxt.ByteSize()
                if size > _BATCH_BYTES:
                    break
                batch.append(nxt)
                items.popleft()
            if len(batch) == 1:
                yield msg
            else:
                yield pb.PluginMessage(batch=pb.PluginBatch(msgs=batch))

    async def _requests_marking_hello(self, hello_sent: asyncio.Event) -> AsyncIterator[pb.PluginMessage]:
        """`_requests`, setting `hello_sent` once grpc has written the first message (Hello).

        grpc.aio pulls the next request only after the previous write completed.
        """
        await self.out.wait()
        first = self.out.items.popleft()
        if first is None:
            return
        yield first
        hello_sent.set()
        async for msg in self._requests():
            yield msg

    # ---------------------------------------------------------------- calls

    def _send_progress(self, call_id: int, message: str, fraction: float, done: float,
                       total: float) -> None:
        self.send_any(pb.PluginMessage(progress=pb.Progress(
            call_id=call_id, message=message, fraction=fraction, progress=done, total=total)))

    async def _run_tool(self, inv: pb.InvokeTool) -> None:
        key = ("tool", inv.call_id)
        entry = self.a.tools.get(inv.tool)
        outcome: Optional[Outcome]
        try:
            if entry is None:
                outcome = Outcome(False, "", "", f"plugin {self.name}: unknown tool {inv.tool}")
            else:
                try:
                    args = json.loads(inv.args_json) if inv.args_json else {}
                except ValueError as e:
                    raise ValueError(f"args_json is not JSON: {e}") from None
                if not isinstance(args, dict):
                    raise TypeError(f"arguments must be a JSON object, got {type(args).__name__}")
                sender = _sender(inv.sender, inv)
                current_call.set(CallContext(inv.call_id, inv.tool, self._send_progress,
                                             inv.traceparent, inv.tracestate))
                kind = entry.kind
                kwargs: Dict[str, Any] = {}
                if kind == "kwargs":
                    pos: Tuple[Any, ...] = ()
                    kwargs = entry.bind(args) if entry.bind is not None else dict(args)
                    if entry.sender_param:
                        kwargs[entry.sender_param] = sender
                else:
                    pos = (sender, args) if kind == "linkzone" else (args,)
                with trace_scope(inv.traceparent, inv.tracestate) if inv.traceparent else _NO_SCOPE:
                    if entry.is_async:
                        value = await entry.func(*pos, **kwargs)
                    else:
                        value = await call_handler(functools.partial(entry.func, *pos, **kwargs),
                                                   executor=self.pools.handlers)
                outcome = from_linkzone(value) if kind == "linkzone" else from_value(value)
        except asyncio.CancelledError:
            self.tasks.pop(key, None)
            return  # cancelled by the broker (or shutdown): nothing is sent
        except ArgumentError as e:  # the handler did not run: no traceback to show
            outcome = Outcome(False, "", "", f"tool {inv.tool}: {e}")
        except Exception as e:
            log(f"plugin {self.name}: tool {inv.tool}: call {inv.call_id} failed:\n"
                + "".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip())
            outcome = from_exception(e)
        self.tasks.pop(key, None)
        if inv.call_id in self.cancelled:
            self.cancelled.discard(inv.call_id)
            return
        self.send(result_message(inv.call_id, inv.tool, outcome))

    async def _run_event(self, ev: pb.HandleEvent) -> None:
        key = ("event", ev.call_id)
        error = ""

        def reply(text: str) -> None:
            self.send_any(pb.PluginMessage(reply=pb.Reply(call_id=ev.call_id, text=text)))

        try:
            if not self.a.has_event_handler:
                raise NotImplementedError(f"plugin {self.name} has no handle_event")
            sender = _sender(ev.sender, ev, message=ev.message, params=list(ev.params), reply=reply)
            with trace_scope(ev.traceparent, ev.tracestate):
                await call_handler(self.a.plugin.handle_event, sender, executor=self.pools.handlers)
        except asyncio.CancelledError:
            self.tasks.pop(key, None)
            return
        except Exception as e:
            log(f"plugin {self.name}: handle_event: call {ev.call_id} failed:\n"
                + "".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip())
            error = from_exception(e).error
        self.tasks.pop(key, None)
        if ev.call_id in self.cancelled:
            self.cancelled.discard(ev.call_id)
            return
        self.send(pb.PluginMessage(event_done=pb.EventDone(call_id=ev.call_id, error=error)))

    async def _run_stage(self, rs: pb.RunStage) -> None:
        key = ("stage", rs.call_id)
        if self._hooks is None:
            # Hooks are fixed once start() returned: index them (and their kind) once.
            self._hooks = {h.hook_id: (h, is_async_callable(h.handler)) for h in self.a.sdk._stages}
        hook, is_async = self._hooks.get(rs.hook_id, (None, False))
        context: Optional[pb.StageContext] = rs.context
        error = ""
        try:
            if hook is None:
                raise LookupError(f"plugin {self.name} has no stage hook {rs.hook_id!r}")
            ctx = from_wire(rs.context)
            ctx.traceparent, ctx.tracestate = rs.traceparent, rs.tracestate
            with trace_scope(rs.traceparent, rs.tracestate):
                ret = (await hook.handler(ctx) if is_async
                       else await call_handler(hook.handler, ctx, executor=self.pools.handlers))
            context = to_wire(ret if isinstance(ret, StageContext) else ctx)
        except asyncio.CancelledError:
            self.tasks.pop(key, None)
            return
        except Exception as e:
            if hook is None:
                error = str(e)
            else:
                log(f"plugin {self.name}: stage hook {rs.hook_id}: call {rs.call_id} failed:\n"
                    + "".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip())
                error = f"stage hook {rs.hook_id}: {from_exception(e).error}"
        self.tasks.pop(key, None)
        if rs.call_id in self.cancelled:
            self.cancelled.discard(rs.call_id)
            return
        self.send(self._stage_result(rs, context, error))

    def _stage_result(self, rs: pb.RunStage, context: Optional[pb.StageContext],
                      error: str) -> pb.PluginMessage:
        """The StageResult, or an error result when it is over the limit or cannot be encoded."""
        try:
            msg = pb.PluginMessage(stage_result=pb.StageResult(call_id=rs.call_id, context=context,
                                                               error=error))
            size = msg.ByteSize()
            if size + _RESULT_OVERHEAD <= MAX_MESSAGE:
                return msg
            err = (f"stage hook {rs.hook_id}: result is {size} bytes, over the "
                   f"{MAX_MESSAGE // _MIB} MiB message limit")
        except (ValueError, TypeError) as e:  # lone surrogates, out-of-range ints
            err = f"stage hook {rs.hook_id}: result cannot be sent: {type(e).__name__}: {e}"
        log(f"plugin {self.name}: call {rs.call_id}: {err}")
        return pb.PluginMessage(stage_result=pb.StageResult(call_id=rs.call_id, error=err))

    def _cancel(self, call_id: int) -> None:
        hit = False
        for kind in ("tool", "event", "stage"):
            task = self.tasks.pop((kind, call_id), None)
            if task is not None:
                hit = True
                task.cancel()
        if hit:
            self.cancelled.add(call_id)

    # ---------------------------------------------------------------- live registration

    def _live_register(self, entry: ToolEntry) -> None:
        spec = tool_spec(entry, f"plugin {self.name}")
        self.a.tools[entry.name] = entry
        self.send_any(pb.PluginMessage(
            register_tool=pb.RegisterTool(request_id=f"py-{next(self._req_ids)}", tool=spec)))

    def _live_unregister(self, name: str) -> None:
        self.a.tools.pop(name, None)
        self.send_any(pb.PluginMessage(
            unregister_tool=pb.UnregisterTool(request_id=f"py-{next(self._req_ids)}", name=name)))

    # ---------------------------------------------------------------- lifecycle

    async def _stop_plugin(self, budget: float) -> None:
        try:
            await asyncio.wait_for(call_handler(self.a.plugin.stop, executor=self.pools.lifecycle),
                                   timeout=max(budget, 0.01))
        except asyncio.TimeoutError:
            log(f"plugin {self.name}: stop() did not finish within {budget:.2f}s")
        except Exception as e:
            log(f"plugin {self.name}: stop() failed: {type(e).__name__}: {e}")

    def _cancel_all(self) -> None:
        for task in list(self.tasks.values()):
            task.cancel()
        self.tasks.clear()

    async def run(self) -> int:
        """Attach, register and serve until Shutdown or the end of the stream; returns the
        exit code. ValueError (naming the field) when the registration cannot be encoded."""
        register = register_message(self.a)  # ValueError here names the field
        size = register.ByteSize()
        if size > MAX_MESSAGE - _RESULT_OVERHEAD:
            raise ValueError(f"the registration is {size} bytes, over the {MAX_MESSAGE // _MIB} MiB "
                             "message limit")
        # Test hooks (Plugin.hearth_protocol_version / hearth_after_hello), None normally.
        version = getattr(self.a.plugin, "hearth_protocol_version", None) or PROTOCOL_VERSION
        after_hello = getattr(self.a.plugin, "hearth_after_hello", None)
        # One channel for the session and the host services (sdk.settings(), inject_text…);
        # a host call made in start() may have opened it already.
        channel = self.conn.ensure_channel()
        try:
            stub = pb_grpc.PluginHostStub(channel)
            metadata = self.conn.metadata()
            self.send(pb.PluginMessage(hello=pb.Hello(
                protocol_version=version, sdk=SDK_NAME, sdk_version=__version__,
                features=list(FEATURES), pid=os.getpid())))
            if after_hello is None:
                self.send(pb.PluginMessage(register=register))
                call = stub.Attach(self._requests(), metadata=metadata)
            else:
                hello_sent = asyncio.Event()
                call = stub.Attach(self._requests_marking_hello(hello_sent), metadata=metadata)
                code = await self._after_hello(after_hello, hello_sent)
                if code is not None:
                    return code
                self.send(pb.PluginMessage(register=register))
            return await self._read_loop(call)
        finally:
            self._cancel_all()
            self.out.put(None)

    async def _after_hello(self, hook: Callable[[], Any], hello_sent: asyncio.Event) -> Optional[int]:
        """Run the `hearth_after_hello` test hook once Hello is written; an int it returns
        ends the session with that exit code before Register is sent."""
        try:
            await asyncio.wait_for(hello_sent.wait(), 10.0)
        except asyncio.TimeoutError:
            log(f"plugin {self.name}: Hello not written within 10s; running hearth_after_hello anyway")
        code = await call_handler(hook, executor=self.pools.lifecycle)
        if code is None:
            return None
        if isinstance(code, bool) or not isinstance(code, int):
            raise ValueError(f"hearth_after_hello returned {code!r}; expected None or an exit code")
        log(f"plugin {self.name}: hearth_after_hello ended the session before Register "
            f"(exit code {code})")
        return code

    async def _read_loop(self, call: Any) -> int:
        while True:
            try:
                msg = await call.read()
            except grpc.aio.AioRpcError as e:
                if self.closing:
                    return EXIT_OK
                log(f"plugin {self.name}: session with the broker failed: "
                    f"{e.code().name}: {e.details()}")
                await self._stop_plugin(2.0)
                return EXIT_STREAM_ERROR
            if msg is grpc.aio.EOF:
                if not self._registered:
                    log(f"plugin {self.name}: the broker closed the session before registering it")
                    return EXIT_STREAM_ERROR
                log(f"plugin {self.name}: the broker closed the session; exiting")
                await self._stop_plugin(2.0)
                return EXIT_OK
            kind = msg.WhichOneof("msg")
            if kind == "batch":
                for inner in msg.batch.msgs:
                    code = self._dispatch(inner, inner.WhichOneof("msg"))
                    if code is not None:
                        return await code
            else:
                code = self._dispatch(msg, kind)
                if code is not None:
                    return await code

    def _dispatch(self, msg: pb.HostMessage, kind: Optional[str]) -> Optional[Awaitable[int]]:
        """Handles one broker message; an awaitable giving the exit code when it ends the
        session (Rejected, Shutdown), else None."""
        if kind == "invoke_tool":
            inv = msg.invoke_tool
            self.tasks[("tool", inv.call_id)] = self.loop.create_task(self._run_tool(inv))
        elif kind == "ping":
            self.send(pb.PluginMessage(pong=pb.Pong(nonce=msg.ping.nonce)))
        elif kind == "cancel":
            self._cancel(msg.cancel.call_id)
        elif kind == "run_stage":
            rs = msg.run_stage
            self.tasks[("stage", rs.call_id)] = self.loop.create_task(self._run_stage(rs))
        elif kind == "handle_event":
            ev = msg.handle_event
            self.tasks[("event", ev.call_id)] = self.loop.create_task(self._run_event(ev))
        elif kind == "registered":
            self._registered = True
            reg = msg.registered
            for item in reg.rejected:
                log(f"plugin {self.name}: broker rejected {item.kind} {item.name}: {item.reason}")
            self.batching = "batch" in reg.features
            self.a.sdk._live_register = self._live_register
            self.a.sdk._live_unregister = self._live_unregister
        elif kind == "rejected":
            r = msg.rejected
            log(f"plugin {self.name}: registration rejected: {r.reason}")
            for item in r.items:
                log(f"plugin {self.name}:   {item.kind} {item.name}: {item.reason}")
            self.closing = True
            return self._exit_after_stop(2.0, EXIT_REJECTED)
        elif kind == "shutdown":
            sd = msg.shutdown
            grace = sd.grace_ms / 1000.0 if sd.grace_ms else 5.0
            log(f"plugin {self.name}: shutdown requested"
                + (f" ({sd.reason})" if sd.reason else ""))
            self.closing = True
            return self._exit_after_stop(grace * 0.7, EXIT_OK)
        elif kind == "tool_registration":
            tr = msg.tool_registration
            if not tr.ok:
                log(f"plugin {self.name}: tool {tr.name}: registration refused: {tr.error}")
        elif kind == "batch":
            log(f"plugin {self.name}: ignoring a batch nested in a batch")
        else:
            log(f"plugin {self.name}: ignoring unknown message {kind!r}")
        return None

    async def _exit_after_stop(self, budget: float, code: int) -> int:
        await self._stop_plugin(budget)
        return code


async def start(loaded: LoadedPlugin, conn: Optional[Connection], pools: Pools) -> None:
    """Run the plugin's `start(sdk)` with `conn` for host calls and add what it
    registered to `loaded`. PluginLoadError when start() raises or the plugin registers
    nothing at all."""
    sdk = loaded.sdk
    sdk._conn = conn
    try:
        await call_handler(loaded.plugin.start, sdk, executor=pools.lifecycle)
    except Exception as e:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        raise PluginLoadError(f"{loaded.where()}: start() failed: {type(e).__name__}: {e}\n{tb}") from e
    with sdk._lock:
        sdk._started = True
        sdk_tools = list(sdk._tools.values())
    for entry in sdk_tools:
        loaded.add_tool(entry)
    loaded.started = True
    if (not loaded.tools and loaded.inject is None and not loaded.triggers
            and not loaded.has_event_handler and not sdk._stages):
        raise PluginLoadError(f"{loaded.where()}: registers nothing (no tools, no stage hooks, "
                              "no inject, no triggers)")


async def serve_loaded(loaded: LoadedPlugin, addr: str, token: str, *,
                       pools: Optional[Pools] = None) -> int:
    """Start `loaded` and serve it on the broker at `addr` with `token` until the session
    ends; returns the exit code (0, 1 or 3). PluginLoadError when start() fails;
    ValueError when the registration cannot be encoded."""
    own_pools = pools is None
    pools = pools or Pools()
    conn = Connection(loaded.name, asyncio.get_running_loop(), addr, token)
    try:
        await start(loaded, conn, pools)
        return await Session(loaded, conn, pools).run()
    finally:
        await conn.close()
        if own_pools:
            pools.shutdown()


async def serve(target: Target = None, *, addr: Optional[str] = None,
                token: Optional[str] = None) -> int:
    """Serve a plugin on the running event loop until the session ends.

    `target`: a `Plugin` instance or subclass, a path to a plugin file, a module, or
    None for the `__main__` module. `addr` / `token` default to HEARTH_ADDR and the
    spawn token (HEARTH_TOKEN_FD, else HEARTH_TOKEN). Returns the exit code: 0 after
    Shutdown or when the broker ends the stream, 1 when the stream fails, 3 when the
    broker rejects the registration. Raises PluginLoadError when the plugin cannot be
    loaded or its start() fails, ConfigError when the address or token is missing.
    Plain handlers run in a thread pool of the session's own (the loop's default
    executor is left alone); the process is not exited.
    """
    if addr is None or token is None:
        env_addr, env_token = read_env()
        addr = env_addr if addr is None else addr
        token = env_token if token is None else token
    plugin, module, path = resolve(target)
    loaded = load(plugin, module, path)
    try:
        return await serve_loaded(loaded, addr, token)
    except ValueError as e:
        raise PluginLoadError(f"plugin {loaded.name}: {e}") from None

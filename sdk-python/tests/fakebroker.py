"""A fake Hearth broker for the SDK tests: a real PluginHost gRPC server (grpc.aio) on a
temporary Unix socket that checks the spawn token, and helpers that spawn real plugin
processes with `python -m hearth_plugin run` and drive their sessions."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List, Optional

import grpc
import grpc.aio

from hearth_plugin.v1 import host_pb2, host_pb2_grpc
from hearth_plugin.v1 import plugin_pb2 as pb
from hearth_plugin.v1 import plugin_pb2_grpc as pb_grpc

SDK_DIR = Path(__file__).resolve().parents[1]
REPO = SDK_DIR.parent
EXAMPLES = REPO / "examples" / "plugins"
TEST_PLUGINS = REPO / "tests" / "plugins"
MAX = 64 * 1024 * 1024


class BrokerSession:
    """One Attach stream as the broker sees it."""

    def __init__(self, context) -> None:
        self.context = context
        self.outbox: asyncio.Queue = asyncio.Queue()
        self.inbox: asyncio.Queue = asyncio.Queue()  # everything but results and pongs
        self.received: List[pb.PluginMessage] = []
        self.results: Dict[int, asyncio.Future] = {}
        self.pongs: Dict[int, asyncio.Future] = {}
        self.ended = asyncio.Event()
        self.hello: Optional[pb.Hello] = None
        self.register: Optional[pb.Register] = None
        self._ids = itertools.count(1)

    async def _reader(self) -> None:
        try:
            while True:
                msg = await self.context.read()
                if msg is grpc.aio.EOF:
                    break
                self.received.append(msg)
                kind = msg.WhichOneof("msg")
                if kind == "tool_result":
                    fut = self.results.setdefault(msg.tool_result.call_id,
                                                  asyncio.get_running_loop().create_future())
                    if not fut.done():
                        fut.set_result(msg.tool_result)
                elif kind == "pong":
                    fut = self.pongs.get(msg.pong.nonce)
                    if fut is not None and not fut.done():
                        fut.set_result(time.monotonic())
                else:
                    self.inbox.put_nowait(msg)
        except Exception:
            pass
        finally:
            self.ended.set()

    async def next(self, kind: Optional[str] = None, timeout: float = 10.0) -> pb.PluginMessage:
        """Next non-result, non-pong message (optionally of `kind`)."""
        msg = await asyncio.wait_for(self.inbox.get(), timeout)
        if kind is not None:
            assert msg.WhichOneof("msg") == kind, f"expected {kind}, got {msg}"
        return msg

    async def handshake(self, accept: bool = True) -> None:
        """Read Hello and Register; answer Registered naming every tool when `accept`."""
        self.hello = (await self.next("hello")).hello
        self.register = (await self.next("register")).register
        if accept:
            self.send(pb.HostMessage(registered=pb.Registered(
                plugin=self.register.plugin.name, tools=[t.name for t in self.register.tools],
                protocol_version="1.0.0", features=["cancel", "progress"])))

    def send(self, msg: pb.HostMessage) -> None:
        self.outbox.put_nowait(msg)

    def close(self) -> None:
        """End the stream from the broker side (status OK)."""
        self.outbox.put_nowait(None)

    def invoke(self, tool: str, args: Any, *, sender: Optional[dict] = None,
               call_id: Optional[int] = None, raw_args: Optional[str] = None) -> int:
        """Send InvokeTool; returns its call_id."""
        cid = call_id if call_id is not None else next(self._ids)
        self.results.setdefault(cid, asyncio.get_running_loop().create_future())
        self.send(pb.HostMessage(invoke_tool=pb.InvokeTool(
            call_id=cid, tool=tool,
            args_json=raw_args if raw_args is not None else json.dumps(args),
            sender=pb.Sender(**(sender or {})), timeout_ms=10000)))
        return cid

    async def result(self, call_id: int, timeout: float = 10.0) -> pb.ToolResult:
        return await asyncio.wait_for(asyncio.shield(self.results[call_id]), timeout)

    async def call(self, tool: str, args: Any, timeout: float = 10.0, **kw) -> pb.ToolResult:
        return await self.result(self.invoke(tool, args, **kw), timeout)

    def handle_event(self, message: str, params: List[str], *, call_id: Optional[int] = None,
                     sender: Optional[dict] = None, trigger: Optional[tuple] = None) -> int:
        """Send HandleEvent (as the broker does when a trigger matched); returns its call_id."""
        cid = call_id if call_id is not None else next(self._ids)
        ttype, pattern = trigger or (0, message.split(" ", 1)[0])
        self.send(pb.HostMessage(handle_event=pb.HandleEvent(
            call_id=cid, message=message, params=params, sender=pb.Sender(**(sender or {})),
            trigger=pb.Trigger(type=ttype, pattern=pattern), timeout_ms=10000)))
        return cid

    async def events(self, call_ids: List[int], timeout: float = 10.0) -> Dict[int, tuple]:
        """Read until every call in `call_ids` sent EventDone: {call_id: ([reply texts in
        order], EventDone.error)}. Any other message fails the test."""
        got: Dict[int, list] = {cid: [] for cid in call_ids}
        done: Dict[int, tuple] = {}
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
                    **kw: Any) -> tuple:
        """One HandleEvent round trip: ([reply texts in order], EventDone.error)."""
        cid = self.handle_event(message, params, **kw)
        return (await self.events([cid], timeout))[cid]

    async def ping(self, nonce: int, timeout: float = 5.0) -> float:
        """Send Ping and return the seconds until its Pong."""
        fut = asyncio.get_running_loop().create_future()
        self.pongs[nonce] = fut
        t0 = time.monotonic()
        self.send(pb.HostMessage(ping=pb.Ping(nonce=nonce)))
        t1 = await asyncio.wait_for(fut, timeout)
        return t1 - t0


class _Servicer(pb_grpc.PluginHostServicer):
    def __init__(self, broker: "FakeBroker") -> None:
        self.broker = broker

    async def Attach(self, request_iterator, context):
        md = dict(context.invocation_metadata())
        if md.get("x-hearth-token") != self.broker.token:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "stale or wrong spawn token")
        sess = BrokerSession(context)
        reader = asyncio.ensure_future(sess._reader())
        self.broker.sessions.put_nowait(sess)
        try:
            while True:
                msg = await sess.outbox.get()
                if msg is None:
                    return
                await context.write(msg)
        finally:
            await asyncio.sleep(0)
            if not reader.done():
                reader.cancel()


class _Input(host_pb2_grpc.InputServicer):
    """The Input host service: records (method, token, InjectRequest) in `broker.injected`.
    The other host services are `_HostService` fakes (UNIMPLEMENTED unless a reply is set)."""

    def __init__(self, broker: "FakeBroker") -> None:
        self.broker = broker

    async def _record(self, method: str, request, context):
        token = dict(context.invocation_metadata()).get("x-hearth-token")
        self.broker.injected.put_nowait((method, token, request))
        return host_pb2.Empty()

    async def InjectText(self, request, context):
        return await self._record("InjectText", request, context)

    async def InjectTextNoMemory(self, request, context):
        return await self._record("InjectTextNoMemory", request, context)

    async def InjectInterruptText(self, request, context):
        return await self._record("InjectInterruptText", request, context)


class _HostService:
    """One host service (Settings, Memory, …) answering from `broker.host_replies`.

    Each call is recorded as (service, method, token, request) in `broker.host_calls`.
    The reply for (service, method) is a response message, a callable(request) → message,
    or a (grpc.StatusCode, details) pair to fail with; none configured = UNIMPLEMENTED,
    like a broker that does not serve the service.
    """

    def __init__(self, broker: "FakeBroker", service: str) -> None:
        self.broker = broker
        self.service = service
        for m in host_pb2.DESCRIPTOR.services_by_name[service].methods:
            setattr(self, m.name, self._method(m.name))

    def _method(self, method: str):
        async def call(request, context):
            token = dict(context.invocation_metadata()).get("x-hearth-token")
            self.broker.host_calls.append((self.service, method, token, request))
            reply = self.broker.host_replies.get((self.service, method))
            if reply is None:
                await context.abort(grpc.StatusCode.UNIMPLEMENTED, f"{self.service}/{method} not faked")
            if isinstance(reply, tuple):
                await context.abort(reply[0], reply[1])
            return reply(request) if callable(reply) else reply
        return call


#: Host services `_HostService` fakes (Input has its own recorder).
FAKED_HOST_SERVICES = ("Settings", "Memory", "TextMemory", "DocMemory", "Knowledge", "Llm")


class PluginProc:
    """A real plugin process started like the broker does.

    With `token_pipe` the token travels as the broker passes it: written into a pipe whose
    read end the plugin inherits, named by HEARTH_TOKEN_FD; HEARTH_TOKEN is then not set.
    `token_pipe_inode` is that pipe's inode (its /proc/<pid>/fd links read `pipe:[inode]`).
    """

    def __init__(self, entry: Path, broker: "FakeBroker", token: Optional[str],
                 env: Optional[dict], logdir: Path, name: str, argv: Optional[List[str]] = None,
                 token_pipe: bool = False) -> None:
        self.entry = entry
        token = broker.token if token is None else token
        e = dict(os.environ)
        e.pop("HEARTH_TOKEN_FD", None)
        e["PYTHONPATH"] = str(SDK_DIR) + os.pathsep + e.get("PYTHONPATH", "")
        e.update(HEARTH_ADDR=broker.addr, HEARTH_PLUGIN=name)
        pass_fds: tuple = ()
        self.token_pipe_inode: Optional[int] = None
        if token_pipe:
            e.pop("HEARTH_TOKEN", None)
            r, w = os.pipe()
            self.token_pipe_inode = os.fstat(r).st_ino
            os.write(w, token.encode() + b"\n")
            os.close(w)
            e["HEARTH_TOKEN_FD"] = str(r)
            pass_fds = (r,)
        else:
            e["HEARTH_TOKEN"] = token
        e.update(env or {})
        self.out_path = logdir / f"{name}.stdout"
        self.err_path = logdir / f"{name}.stderr"
        try:
            with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
                self.proc = subprocess.Popen(
                    argv or [sys.executable, "-m", "hearth_plugin", "run", str(entry)], cwd=str(entry.parent),
                    env=e, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
                    pass_fds=pass_fds)
        finally:
            for fd in pass_fds:
                os.close(fd)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def stdout(self) -> bytes:
        return self.out_path.read_bytes()

    async def wait(self, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"plugin {self.entry} still running after {timeout}s; "
                                     f"stderr:\n{self.stderr()}")
            await asyncio.sleep(0.02)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(5)


class FakeBroker:
    """The PluginHost server plus the plugin processes it spawned."""

    def __init__(self, workdir: Path, token: str = "tok-5f1c", tcp: bool = False) -> None:
        self.workdir = workdir
        self.tcp = tcp
        self.addr = ""
        # Unix socket paths are limited to ~107 bytes: keep it short, outside tmp_path.
        self.sockdir = tempfile.mkdtemp(prefix="hsdk-")
        self.sock = os.path.join(self.sockdir, "hearth.sock")
        self.token = token
        self.sessions: asyncio.Queue = asyncio.Queue()
        self.procs: List[PluginProc] = []
        self.server = None
        self.injected: asyncio.Queue = asyncio.Queue()  # (method, token, InjectRequest)
        # Fake host services (see _HostService): calls made, replies to give.
        self.host_calls: List[tuple] = []
        self.host_replies: Dict[tuple, Any] = {}

    async def start(self) -> None:
        self.server = grpc.aio.server(options=[("grpc.max_send_message_length", MAX),
                                               ("grpc.max_receive_message_length", MAX)])
        pb_grpc.add_PluginHostServicer_to_server(_Servicer(self), self.server)
        host_pb2_grpc.add_InputServicer_to_server(_Input(self), self.server)
        for service in FAKED_HOST_SERVICES:
            getattr(host_pb2_grpc, f"add_{service}Servicer_to_server")(_HostService(self, service), self.server)
        if self.tcp:
            port = self.server.add_insecure_port("127.0.0.1:0")
            self.addr = f"http://127.0.0.1:{port}"
        else:
            self.server.add_insecure_port(f"unix://{self.sock}")
            self.addr = f"unix://{self.sock}"
        await self.server.start()

    async def stop(self) -> None:
        for p in self.procs:
            p.kill()
        if self.server is not None:
            await self.server.stop(0)
        shutil.rmtree(self.sockdir, ignore_errors=True)

    def write_plugin(self, source: str, name: str = "testplugin", filename: str = "main.py") -> Path:
        d = self.workdir / name
        d.mkdir(parents=True, exist_ok=True)
        p = d / filename
        p.write_text(textwrap.dedent(source))
        return p

    def spawn(self, entry: Path, *, token: Optional[str] = None, env: Optional[dict] = None,
              name: Optional[str] = None, argv: Optional[List[str]] = None,
              token_pipe: bool = False) -> PluginProc:
        """Start `entry` as the broker does (`python -m hearth_plugin run ENTRY`, cwd = its dir), or
        `argv`; the token in HEARTH_TOKEN, or with `token_pipe` in an inherited pipe."""
        proc = PluginProc(entry, self, token, env, self.workdir, name or entry.parent.name, argv,
                          token_pipe)
        self.procs.append(proc)
        return proc

    async def session(self, proc: PluginProc, timeout: float = 15.0) -> BrokerSession:
        """The next session to attach; fails early with the plugin's stderr if it exits."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return await asyncio.wait_for(self.sessions.get(), 0.05)
            except asyncio.TimeoutError:
                pass
            if proc.proc.poll() is not None:
                raise AssertionError(f"plugin exited with {proc.proc.returncode} before attaching; "
                                     f"stderr:\n{proc.stderr()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"plugin did not attach within {timeout}s; stderr:\n{proc.stderr()}")

    async def start_plugin(self, source_or_path: Any, *, accept: bool = True, name: str = "testplugin",
                           env: Optional[dict] = None):
        """Spawn a plugin (source text or an existing entry path), handshake; (proc, session)."""
        entry = source_or_path if isinstance(source_or_path, Path) else self.write_plugin(source_or_path, name)
        proc = self.spawn(entry, env=env, name=name)
        sess = await self.session(proc)
        await sess.handshake(accept=accept)
        return proc, sess


def run(tmp_path: Path, body: Callable[[FakeBroker], Awaitable[None]], timeout: float = 25.0,
        tcp: bool = False) -> None:
    """Run `body(broker)` on a fresh event loop; always kills the processes and the server."""

    async def main() -> None:
        broker = FakeBroker(tmp_path, tcp=tcp)
        await broker.start()
        try:
            await asyncio.wait_for(body(broker), timeout)
        finally:
            await broker.stop()

    asyncio.run(main())

"""The SDK tests' broker: `hearth_plugin.testing.FakeBroker` (a real gRPC server on a
temporary Unix socket, serving PluginHost and the host services from an in-memory
`FakeHost`), plus helpers that spawn real plugin processes with
`python -m hearth_plugin run` and drive their sessions.

The tests' broker admits one token for every plugin it spawns, with every capability,
and keeps the injected inputs in a queue (`injected`: (method, token, request)) besides
`host_calls`. `host_replies[(service, method)] = reply` overrides a host method (a
message, a callable(request) → message, or a (grpc.StatusCode, details) pair)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, List, Optional

from hearth_plugin import testing
from hearth_plugin.testing import BrokerSession, HostCall

SDK_DIR = Path(__file__).resolve().parents[1]
REPO = SDK_DIR.parent
EXAMPLES = REPO / "examples" / "plugins"
TEST_PLUGINS = REPO / "tests" / "plugins"
MAX = 64 * 1024 * 1024

__all__ = ["BrokerSession", "EXAMPLES", "FakeBroker", "PluginProc", "REPO", "SDK_DIR", "TEST_PLUGINS", "run"]


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


class FakeBroker(testing.FakeBroker):
    """The fake broker plus the plugin processes it spawned."""

    def __init__(self, workdir: Path, token: str = "tok-5f1c", tcp: bool = False) -> None:
        super().__init__(tcp=tcp)
        self.workdir = workdir
        self.token = token
        self.procs: List[PluginProc] = []
        self.injected: asyncio.Queue = asyncio.Queue()  # (method, token, InjectRequest)
        self.host_replies = self.overrides

    @property
    def token(self) -> str:
        """The spawn token the plugins get (setting it admits the new one)."""
        return self._token

    @token.setter
    def token(self, value: str) -> None:
        self._token = value
        self.admit(value)

    def record(self, call: HostCall) -> None:
        super().record(call)
        if call.service == "Input":
            self.injected.put_nowait((call.method, call.token, call.request))

    async def stop(self, grace: Optional[float] = 0) -> None:
        for p in self.procs:
            p.kill()
        await super().stop(grace)

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

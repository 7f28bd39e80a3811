"""`await hearth_plugin.serve(plugin)` inside the application's own event loop, and a
plugin started by hand (`HEARTH_ADDR=… HEARTH_TOKEN=… python -m hearth_plugin run`)."""

import asyncio
import os
import subprocess
import sys

import pytest
from fakebroker import SDK_DIR, run

import hearth_plugin
from hearth_plugin import ConfigError, Plugin, PluginLoadError
from hearth_plugin.testing import FakeBroker
from hearth_plugin.v1 import plugin_pb2 as pb

EMBEDDED = '''
import asyncio

import hearth_plugin
from hearth_plugin import Plugin

plugin = Plugin("embedded")
TICKS = []


@plugin.tool
async def ticks() -> int:
    return len(TICKS)


@plugin.tool
def ping() -> str:
    return "pong"


async def app_work():
    while True:                      # the application's own work goes on beside the plugin
        TICKS.append(1)
        await asyncio.sleep(0.01)


async def main():
    work = asyncio.create_task(app_work())
    code = await hearth_plugin.serve(plugin)
    work.cancel()
    print("serve returned", code, flush=True)


asyncio.run(main())
print("after asyncio.run", flush=True)
'''


def test_serve_runs_in_the_applications_event_loop_and_returns(tmp_path):
    async def body(b):
        entry = b.write_plugin(EMBEDDED, name="embedded")
        proc = b.spawn(entry, argv=[sys.executable, str(entry)])
        s = await b.session(proc)
        await s.handshake()
        assert [t.name for t in s.register.tools] == ["ticks", "ping"]
        assert (await s.call("ping", {})).content == "pong"
        assert (await s.call("ticks", {})).success
        s.send(pb.HostMessage(shutdown=pb.Shutdown(grace_ms=1000)))
        assert await proc.wait(10) == 0
        out = proc.stdout().decode()
        assert "serve returned 0\n" in out and out.endswith("after asyncio.run\n")

    run(tmp_path, body)


def test_serve_in_process_with_explicit_address_and_token():
    class Echo(Plugin):
        def name(self):
            return "echo"

        def start(self, sdk):
            sdk.register_tool("echo", {"description": "echo"}, lambda args: args.get("text", ""))

    async def main():
        broker = FakeBroker()
        await broker.start()
        broker.admit("tok-in-process")
        loop = asyncio.get_running_loop()
        default = loop._default_executor
        served = asyncio.ensure_future(hearth_plugin.serve(Echo(), addr=broker.addr, token="tok-in-process"))
        try:
            s = await broker.next_session()
            await s.handshake()
            assert (await s.call("echo", {"text": "hi"})).content == "hi"
            s.send(pb.HostMessage(shutdown=pb.Shutdown(grace_ms=500)))
            assert await asyncio.wait_for(served, 10) == 0
            assert loop._default_executor is default          # the loop's executor is left alone
        finally:
            served.cancel()
            await broker.stop()

    asyncio.run(main())


def test_serve_errors_are_raised_not_exited(monkeypatch):
    monkeypatch.delenv("HEARTH_ADDR", raising=False)
    with pytest.raises(ConfigError, match="HEARTH_ADDR is not set"):
        asyncio.run(hearth_plugin.serve(Plugin("nothing")))

    async def no_plugin():
        return await hearth_plugin.serve(Plugin("nothing"), addr="unix:///nonexistent.sock", token="t")

    with pytest.raises(PluginLoadError, match="registers nothing"):
        asyncio.run(no_plugin())


def test_a_plugin_started_by_hand_uses_hearth_addr_and_hearth_token(tmp_path):
    async def body(b):
        entry = b.write_plugin("from hearth_plugin import tool\n@tool\ndef hi() -> str:\n    return 'hi'\n",
                               name="byhand")
        # As after `eval "$(hearth plugins attach-token byhand)"`: HEARTH_ADDR and
        # HEARTH_TOKEN in the environment, no token pipe, no HEARTH_PLUGIN.
        env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
        env.update(HEARTH_ADDR=b.addr, HEARTH_TOKEN=b.token, PYTHONPATH=str(SDK_DIR))
        proc = subprocess.Popen([sys.executable, "-m", "hearth_plugin", "run", str(entry)], env=env,
                                cwd=str(entry.parent), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            s = await asyncio.wait_for(b.sessions.get(), 15)
            await s.handshake()
            assert s.register.plugin.name == "byhand"
            assert (await s.call("hi", {})).content == "hi"
            s.send(pb.HostMessage(shutdown=pb.Shutdown(grace_ms=500)))
            assert await asyncio.get_running_loop().run_in_executor(None, proc.wait, 10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    run(tmp_path, body)


def test_usage_tells_how_to_attach_by_hand():
    out = subprocess.run([sys.executable, "-m", "hearth_plugin", "--help"], capture_output=True, text=True,
                         cwd=str(SDK_DIR), timeout=30)
    assert out.returncode == 0
    assert 'eval "$(hearth plugins attach-token NAME)"' in out.stdout and "HEARTH_TOKEN" in out.stdout

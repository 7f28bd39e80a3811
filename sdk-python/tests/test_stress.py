"""tests/plugins/stress.py against the fake broker, and the SDK's message-size limit."""

import asyncio
import json
import os
import time

import pytest
from fakebroker import REPO, run

from hearth_plugin._result import Outcome
from hearth_plugin._runtime import MAX_MESSAGE, result_message
from hearth_plugin.v1 import plugin_pb2 as pb

STRESS = REPO / "tests" / "plugins" / "stress.py"
MIB = 1024 * 1024


def spawn(b, faults, name="st", **env):
    return b.spawn(STRESS, name=name, env={"HEARTH_FAULT": faults, **env})


async def started(b, faults, name="st", **env):
    proc = spawn(b, faults, name, **env)
    s = await b.session(proc)
    await s.handshake()
    return proc, s


async def until(cond, what, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what} never happened"
        await asyncio.sleep(0.02)


def test_result_message_limits():
    ok = result_message(7, "t", Outcome(True, "é" * 10, '{"a": 1}', ""))
    assert ok.tool_result.content == "é" * 10 and ok.tool_result.success
    # 17M code points of 4-byte UTF-8: few characters, 68 MiB of bytes
    big = result_message(8, "t_big", Outcome(True, "😀" * (17 * MIB), "", ""))
    r = big.tool_result
    assert (r.call_id, r.success, r.content) == (8, False, "")
    assert r.error == f"tool t_big: result is {68 * MIB} bytes, over the 64 MiB message limit"
    # content + data_json together over the limit
    half = "x" * (MAX_MESSAGE // 2)
    assert not result_message(9, "t", Outcome(True, half, half, "")).tool_result.success
    bad = result_message(10, "t", Outcome(True, "\ud800", "", "")).tool_result
    assert not bad.success and bad.error.startswith("tool t: result cannot be sent: UnicodeEncodeError")


def test_stress_tools_with_many_tools_grandchild_junk_and_flood(tmp_path):
    async def body(b):
        proc, s = await started(b, "many_tools,grandchild,junk_stdout,flood,bogus")
        names = [t.name for t in s.register.tools]
        assert len(names) == 5 + 2000 and names[:5] == ["st_echo", "st_sleep", "st_fail", "st_big", "st_hang"]
        assert names[-1] == "st_t1999"
        assert s.hello.protocol_version == "1.0.0"
        assert (await s.call("st_t1999", {})).content == "st_t1999"

        r = await s.call("st_echo", {"a": [1, "é"]})
        assert r.success and json.loads(r.content) == json.loads(r.data_json) == {"a": [1, "é"]}
        r = await s.call("st_fail", {})
        assert not r.success and r.error == "RuntimeError: st_fail: failing on purpose"

        r = await s.call("st_big", {"bytes": 6 * MIB}, timeout=20)
        assert r.success and len(r.content) == 6 * MIB and r.content == "x" * len(r.content)
        r = await s.call("st_big", {"bytes": 64 * MIB + 1}, timeout=20)
        assert not r.success
        assert r.error == f"tool st_big: result is {64 * MIB + 1} bytes, over the 64 MiB message limit"
        assert (await s.call("st_echo", {"still": "serving"})).success

        cid = s.invoke("st_sleep", {"ms": 300, "progress_ms": 50})
        p = (await s.next("progress")).progress
        assert p.call_id == cid and p.message.startswith("slept ") and 0 < p.fraction < 1
        assert (await s.result(cid)).content == "slept 300 ms"
        cid = s.invoke("st_sleep", {"ms": 20000})
        await asyncio.sleep(0.1)
        s.send(pb.HostMessage(cancel=pb.Cancel(call_id=cid, reason="test")))
        await until(lambda: b"st_sleep: cancelled\n" in proc.stdout(), "cancel print")
        assert not s.results[cid].done()

        out = proc.stdout()
        pid = int(out.split(b"GRANDCHILD_PID=")[1].split(b"\n")[0])
        os.kill(pid, 0)  # alive, and in the plugin's process group
        assert os.getpgid(pid) == os.getpgid(proc.pid)
        assert b"*** stress plugin st banner: start ***\n\xff\xfe" in out
        assert b"banner: call ***" in out
        await until(lambda: b"x" * (10 * MIB) + b"\n" in proc.stdout(), "the 10 MiB flood line")
        await until(lambda: b"flood ....." in proc.stdout() and b"flood ....." in proc.err_path.read_bytes(),
                    "flood lines on both streams")
        assert "unknown fault 'bogus' ignored" in proc.stderr()

        await s.ping(1)
        s.invoke("st_hang", {})
        await asyncio.sleep(0.2)
        with pytest.raises(asyncio.TimeoutError):
            await s.ping(2, timeout=0.5)
        assert proc.proc.poll() is None
        b.procs[-1].kill()  # killpg: the grandchild goes too
        await until(lambda: not os.path.exists(f"/proc/{pid}") or _zombie(pid), "grandchild gone")

    run(tmp_path, body, timeout=40)


def _zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")
    except OSError:
        return True


def test_prefix_and_crash_mid_call(tmp_path):
    async def body(b):
        proc, s = await started(b, "crash_mid_call", HEARTH_TOOL_PREFIX="px")
        assert [t.name for t in s.register.tools][:2] == ["px_echo", "px_sleep"]
        s.invoke("px_sleep", {"ms": 400})
        assert await proc.wait(5) == 1
        assert "px_sleep: crashing mid-call" in proc.stderr()

    run(tmp_path, body)


def test_exit_before_hello(tmp_path):
    async def body(b):
        proc = spawn(b, "exit_before_hello")
        assert await proc.wait(10) == 1
        assert "stress: exit_before_hello" in proc.stderr()
        assert b.sessions.empty()

    run(tmp_path, body)


def test_wrong_version_exits_3_after_rejected(tmp_path):
    async def body(b):
        proc = spawn(b, "wrong_version")
        s = await b.session(proc)
        hello = (await s.next("hello")).hello
        assert hello.protocol_version == "99.0.0" and hello.sdk == "hearth-plugin-python"
        # the real broker answers Rejected right after Hello, without reading Register
        s.send(pb.HostMessage(rejected=pb.Rejected(reason="protocol version `99.0.0` is not supported")))
        s.close()
        assert await proc.wait(5) == 3
        assert "registration rejected: protocol version `99.0.0` is not supported" in proc.stderr()

    run(tmp_path, body)


def test_exit_after_hello(tmp_path):
    async def body(b):
        proc = spawn(b, "exit_after_hello")
        s = await b.session(proc)
        assert (await s.next("hello")).hello.pid == proc.pid
        assert await proc.wait(5) == 1
        await asyncio.wait_for(s.ended.wait(), 5)
        assert [m.WhichOneof("msg") for m in s.received] == ["hello"]
        assert "ended the session before Register (exit code 1)" in proc.stderr()

    run(tmp_path, body)


def test_never_register(tmp_path):
    async def body(b):
        proc = spawn(b, "never_register")
        s = await b.session(proc)
        await s.next("hello")
        with pytest.raises(asyncio.TimeoutError):
            await s.ping(1, timeout=0.7)
        assert [m.WhichOneof("msg") for m in s.received] == ["hello"]
        assert proc.proc.poll() is None

    run(tmp_path, body)

"""The spawn token reaches the plugin through an inherited pipe (HEARTH_TOKEN_FD), never
through its environment; a bad HEARTH_TOKEN_FD is a clear error at start."""

import asyncio
import json
import os

import pytest
from fakebroker import run

PROBE = '''
import os, subprocess, sys
from hearth_plugin import Plugin

class Probe(Plugin):
    def name(self):
        return "probe"

    def start(self, sdk):
        sdk.register_tool("probe", {"description": "what the plugin and its children see",
                                    "parameters": {"type": "object"}}, self.probe)
        sdk.inject_text_no_memory("", "boot", "started")   # host call from start()

    def probe(self, args):
        child = subprocess.run(
            [sys.executable, "-c", "import os; print(os.environ.get('HEARTH_TOKEN_FD'))"],
            capture_output=True, text=True, check=True).stdout.strip()
        return {"fd_env": os.environ.get("HEARTH_TOKEN_FD"),
                "token_env": os.environ.get("HEARTH_TOKEN"), "child_fd_env": child}

if __name__ == "__main__":
    import hearth_plugin
    hearth_plugin.run()
'''


@pytest.mark.parametrize("how", ["python -m hearth_plugin run", "hearth_plugin.run()"])
def test_token_from_an_inherited_pipe_only(tmp_path, how):
    async def body(b):
        import sys

        b.token = "pipe-only-token-7c0e9a41d2"
        entry = b.write_plugin(PROBE, name="probe")
        argv = [sys.executable, str(entry)] if how == "hearth_plugin.run()" else None
        proc = b.spawn(entry, token_pipe=True, argv=argv)
        s = await b.session(proc)   # the fake broker refuses a wrong token (UNAUTHENTICATED)
        await s.handshake()
        assert [t.name for t in s.register.tools] == ["probe"]
        # The host call made from start() (its own channel, before the session) carried it too.
        method, token, _ = await asyncio.wait_for(b.injected.get(), 10)
        assert (method, token) == ("InjectTextNoMemory", b.token)

        # /proc/<pid>/environ is the environment the process was started with: the token
        # was never in it (HEARTH_TOKEN_FD is, as the number only; removing a variable
        # changes the process's environ array, not this initial block).
        environ = open(f"/proc/{proc.pid}/environ", "rb").read().split(b"\0")
        assert not any(b.token.encode() in v for v in environ)
        assert not any(v.startswith(b"HEARTH_TOKEN=") for v in environ)
        # The pipe is closed: no fd of the plugin refers to it any more.
        links = [os.readlink(f"/proc/{proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{proc.pid}/fd")]
        assert f"pipe:[{proc.token_pipe_inode}]" not in links, links
        # Inside the plugin HEARTH_TOKEN_FD is gone, and its child processes never see it.
        r = await s.call("probe", {})
        assert r.success, r.error
        assert json.loads(r.content) == {"fd_env": None, "token_env": None, "child_fd_env": "None"}

    run(tmp_path, body)


@pytest.mark.parametrize("value, error", [
    ("3", "HEARTH_TOKEN_FD=3: cannot read the token: Bad file descriptor"),
    ("three", "HEARTH_TOKEN_FD=three: not a file descriptor number"),
    ("1", "HEARTH_TOKEN_FD=1: cannot read the token: fd 1 is stdin, stdout or stderr"),
])
def test_bad_token_fd_is_a_clear_error_at_start(tmp_path, value, error):
    async def body(b):
        entry = b.write_plugin(PROBE, name="probe")
        proc = b.spawn(entry, env={"HEARTH_TOKEN_FD": value})   # HEARTH_TOKEN set too: no fallback
        assert await proc.wait() == 2
        assert f"hearth: plugin probe: {error}\n" in proc.stderr(), proc.stderr()
        assert b.sessions.empty()

    run(tmp_path, body)


def test_empty_token_pipe_is_a_clear_error(tmp_path):
    async def body(b):
        entry = b.write_plugin(PROBE, name="probe")
        proc = b.spawn(entry, token="", token_pipe=True)
        assert await proc.wait() == 2
        assert "cannot read the token: the pipe held no token" in proc.stderr(), proc.stderr()

    run(tmp_path, body)

"""Stress / fault-injection plugin of the Python SDK (spec: tests/plugins/STRESS.md).

Served as the broker serves any Python plugin: `<python> -m hearth_plugin run tests/plugins/stress.py`.
Tool prefix P = $HEARTH_TOOL_PREFIX if set and non-empty, else $HEARTH_PLUGIN.

Tools: P_echo, P_sleep {"ms", "progress_ms"?}, P_fail, P_big {"bytes"}, P_hang; with
fault many_tools also P_t0 … P_t1999; with bad_schema also P_bad_schema.

HEARTH_FAULT (comma-separated): exit_before_hello, hang_before_hello, exit_after_hello,
never_register, wrong_version, crash_mid_call, flood, junk_stdout, grandchild,
many_tools, bad_schema. Unknown names are reported on stderr and ignored.

What each fault looks like from outside (Python specifics):
- exit_before_hello: `stress: exit_before_hello` on stderr, exit status 1, never dials.
- hang_before_hello: never dials; sleeps until killed.
- exit_after_hello: Hello is written, then the stream is closed without Register;
  stderr says `hearth_after_hello ended the session before Register (exit code 1)`; exit 1.
- never_register: Hello is written, then nothing (no Register, no Pong); sleeps until killed.
- wrong_version: Hello carries protocol_version "99.0.0"; after the broker's Rejected,
  stderr has `registration rejected: <reason>` and the exit status is 3.
- crash_mid_call: P_sleep exits the process with status 1 after ms/2
  (`P_sleep: crashing mid-call (crash_mid_call)` on stderr first).
- flood: a background thread writes one 10 MiB line of `x` to stdout, a line of invalid
  UTF-8, then ~1 MB/s of 1 KiB lines to stdout and to stderr each until killed.
- junk_stdout: a banner line and a line of invalid UTF-8 bytes on stdout at start and at
  the start of every call.
- grandchild: spawns `sleep 3600` (same process group, inherits stdout/stderr) and prints
  `GRANDCHILD_PID=<pid>` to stdout.

P_echo maps its arguments like any HomeAgent value: content = their JSON text, data_json =
the same JSON (so `{"isError": true, ...}` comes back as an error result). P_fail's error
is `RuntimeError: P_fail: failing on purpose`. P_big over the 64 MiB message limit gets the
SDK's error result `tool P_big: result is N bytes, over the 64 MiB message limit`.
"""

import asyncio
import os
import subprocess
import sys
import threading
import time

from hearth_plugin import Plugin, progress

NAME = os.environ.get("HEARTH_PLUGIN") or "stress"
P = os.environ.get("HEARTH_TOOL_PREFIX") or NAME
FAULTS = frozenset(f.strip() for f in os.environ.get("HEARTH_FAULT", "").split(",") if f.strip())
KNOWN = {"exit_before_hello", "hang_before_hello", "exit_after_hello", "never_register",
         "wrong_version", "crash_mid_call", "flood", "junk_stdout", "grandchild", "many_tools",
         "bad_schema"}
MANY_TOOLS = 2000


def err(msg):
    sys.stderr.write(f"stress: {msg}\n")
    sys.stderr.flush()


def out_bytes(data):
    """Raw bytes to stdout, after whatever text is pending (one locked buffer write)."""
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def sleep_forever():
    while True:
        time.sleep(3600)


def junk(what):
    out_bytes(f"*** stress plugin {NAME} banner: {what} ***\n".encode()
              + b"\xff\xfe\xc3\x28 invalid utf-8 \x80\x80\n")


def flood():
    """10 MiB line, an invalid UTF-8 line, then ~1 MB/s of lines to stdout and stderr."""
    out, errb = sys.stdout.buffer, sys.stderr.buffer
    out.write(b"x" * (10 * 1024 * 1024) + b"\n")
    out.write(b"\xff\xfe\xc3\x28\x80 flood: invalid utf-8 line \xed\xa0\x80\n")
    out.flush()
    line = b"flood " + b"." * 1017 + b"\n"  # 1 KiB
    block = line * 32  # 32 KiB every 32 ms on each stream
    period = 32 / 1024
    next_at = time.monotonic()
    while True:
        for stream in (out, errb):
            stream.write(block)
            stream.flush()
        next_at += period
        time.sleep(max(0.0, next_at - time.monotonic()))


for _f in sorted(FAULTS - KNOWN):
    err(f"unknown fault {_f!r} ignored")

# ---- before the SDK dials the broker (this file is imported before the session starts)

if "exit_before_hello" in FAULTS:
    err("exit_before_hello")
    os._exit(1)
if "hang_before_hello" in FAULTS:
    err("hang_before_hello: sleeping until killed")
    sleep_forever()
if "grandchild" in FAULTS:
    _grandchild = subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL)
    print(f"GRANDCHILD_PID={_grandchild.pid}", flush=True)
if "junk_stdout" in FAULTS:
    junk("start")
if "flood" in FAULTS:
    threading.Thread(target=flood, name="stress-flood", daemon=True).start()


def call_start():
    if "junk_stdout" in FAULTS:
        junk("call")


async def echo(args):
    call_start()
    return args


async def sleep(args):
    call_start()
    ms = int(args.get("ms", 0))
    progress_ms = args.get("progress_ms")
    step = progress_ms / 1000 if isinstance(progress_ms, (int, float)) and progress_ms > 0 else None
    start = time.monotonic()
    end = start + ms / 1000
    crash_at = start + ms / 2000 if "crash_mid_call" in FAULTS else None
    next_progress = start + step if step else None
    try:
        while True:
            now = time.monotonic()
            if crash_at is not None and now >= crash_at:
                err(f"{P}_sleep: crashing mid-call (crash_mid_call)")
                sys.stdout.flush()
                os._exit(1)
            if next_progress is not None and now >= next_progress:
                done = int((now - start) * 1000)
                progress(f"slept {done} of {ms} ms", min(done / ms, 1.0) if ms else 1.0)
                while next_progress <= now:
                    next_progress += step
            if now >= end:
                break
            wake = min(t for t in (end, crash_at, next_progress) if t is not None)
            await asyncio.sleep(max(0.0, wake - now))
    except asyncio.CancelledError:
        print(f"{P}_sleep: cancelled", flush=True)
        raise
    return f"slept {ms} ms"


async def fail(args):
    call_start()
    raise RuntimeError(f"{P}_fail: failing on purpose")


async def big(args):
    call_start()
    return "x" * int(args.get("bytes", 0))


async def hang(args):
    call_start()
    err(f"{P}_hang: freezing the event loop thread")
    sleep_forever()  # time.sleep on the loop thread: no pongs, no other calls, nothing


def answer_own_name(name):
    async def handler(args):
        return name
    return handler


ANY = {"type": "object"}
NO_ARGS = {"type": "object", "properties": {}}


class Stress(Plugin):
    def __init__(self):
        super().__init__(version="1.0.0", description="Stress / fault-injection plugin (STRESS.md)")
        if "wrong_version" in FAULTS:
            self.hearth_protocol_version = "99.0.0"
        if "exit_after_hello" in FAULTS:
            self.hearth_after_hello = self.exit_after_hello
        elif "never_register" in FAULTS:
            self.hearth_after_hello = self.never_register

    def name(self):
        return NAME

    def start(self, sdk):
        def reg(tool, description, parameters, handler):
            sdk.register_tool(f"{P}_{tool}", {"description": description, "parameters": parameters},
                              handler)

        reg("echo", "Returns its arguments (content = their JSON, data = the same).", ANY, echo)
        reg("sleep", "Sleeps `ms` milliseconds, sending Progress every `progress_ms`.",
            {"type": "object",
             "properties": {"ms": {"type": "integer", "minimum": 0},
                            "progress_ms": {"type": "integer", "minimum": 1}},
             "required": ["ms"]}, sleep)
        reg("fail", "Fails on purpose.", NO_ARGS, fail)
        reg("big", "Returns `bytes` bytes of x.",
            {"type": "object", "properties": {"bytes": {"type": "integer", "minimum": 0}},
             "required": ["bytes"]}, big)
        reg("hang", "Freezes the whole plugin process.", NO_ARGS, hang)
        if "many_tools" in FAULTS:
            for i in range(MANY_TOOLS):
                reg(f"t{i}", "Answers its own name.", NO_ARGS, answer_own_name(f"{P}_t{i}"))
        if "bad_schema" in FAULTS:
            reg("bad_schema", "Registered with an invalid schema.", {"type": 12}, echo)

    async def exit_after_hello(self):
        err("exit_after_hello: Hello sent; exiting with status 1 without Register")
        return 1

    async def never_register(self):
        err("never_register: Hello sent; never registering, sleeping until killed")
        while True:
            await asyncio.sleep(3600)

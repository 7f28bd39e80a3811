"""Baseline for bench/mcp.rs: the official Python MCP client (`mcp` 2.3,
`mcp.ClientSession` over `mcp.client.stdio.stdio_client`) calling one tool of a stdio MCP
server, sequentially and with K calls in flight on the one session (anyio task group).

    mcp_baseline.py [--tool echo] [--args JSON] [--calls N] [--warmup W] [--secs S]
                    [--inflight K] [--commands] -- COMMAND [ARGS...]

COMMAND is the server, e.g. `.venv/bin/python tests/plugins/mcp/py_server.py`,
`node tests/plugins/mcp/ts_server.mjs` or `hearth mcp serve --data-dir D`.
`ClientSession.initialize()` negotiates the newest revision with an `initialize`
handshake (2025-11-25 with the servers above).

Without --commands: W warm-up calls, N sequential calls, then S seconds with K in flight;
prints one JSON object (latencies in µs, nearest-rank percentiles):

    {"client": "mcp.ClientSession (mcp 2.3.0)", "protocol": "2025-11-25", "server": ...,
     "tool": ..., "sequential": {"calls", "errors", "mean_us", "p50_us", "p99_us", "max_us",
     "calls_per_s", "client_cpu_us_per_call"},
     "inflight": {"inflight", "secs", "calls", "errors", "calls_per_s", "p50_us", "p99_us",
     "client_cpu_us_per_call"}}
"calls" counts the calls that succeeded; "errors" the failed ones (an MCP error or a
result with is_error), which are not in the latencies.

With --commands (how bench/mcp.rs drives it, so its rounds interleave with the other
clients'): prints {"ready": true, "protocol": ..., "server": ..., "pid": ...} once
connected, then answers one JSON line per command line read from stdin:

    {"op": "seq", "calls": N, "warmup": W}   -> {"op": "seq", "samples_us": [...], "elapsed_s": ...}
    {"op": "tput", "secs": S, "inflight": K} -> {"op": "tput", "calls": ..., "elapsed_s": ...,
                                                 "samples_us": [...]}
Both also carry "client_cpu_us" (this process, time.process_time), "errors" (calls that
failed: an MCP error or a result with is_error; not in the samples) and "first_error".
EOF or {"op": "quit"} ends it.
"""
import argparse
import importlib.metadata
import json
import math
import os
import sys
import time

import anyio
from mcp import ClientSession, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client


def percentile(sorted_us, p):
    """Nearest rank, as bench/common.rs `summarize`."""
    n = len(sorted_us)
    return sorted_us[min(max(math.ceil(p * n), 1), n) - 1]


def summary(samples_us):
    s = sorted(samples_us)
    if not s:
        return {"mean_us": None, "p50_us": None, "p99_us": None, "max_us": None}
    return {
        "mean_us": round(sum(s) / len(s), 1),
        "p50_us": round(percentile(s, 0.50), 1),
        "p99_us": round(percentile(s, 0.99), 1),
        "max_us": round(s[-1], 1),
    }


class Bench:
    def __init__(self, session, tool, args):
        self.session = session
        self.tool = tool
        self.args = args
        self.samples = []
        self.errors = 0
        self.first_error = None

    async def call(self):
        """One call: its wall time in µs goes to samples, or it counts as an error."""
        started = time.perf_counter_ns()
        try:
            r = await self.session.call_tool(self.tool, self.args)
            failed = None
            if getattr(r, "is_error", False) or not hasattr(r, "content"):
                failed = " ".join(getattr(c, "text", "") for c in getattr(r, "content", [])) or repr(r)
        except MCPError as e:
            failed = f"MCP error {e.code}: {e}"
        took = (time.perf_counter_ns() - started) / 1000
        if failed is None:
            self.samples.append(took)
        else:
            self.errors += 1
            self.first_error = self.first_error or failed

    def take(self):
        """The samples and errors since the last take."""
        out = (self.samples, self.errors, self.first_error)
        self.samples, self.errors, self.first_error = [], 0, None
        return out

    async def seq(self, calls, warmup):
        for _ in range(warmup):
            await self.call()
        self.take()
        cpu = time.process_time()
        started = time.perf_counter()
        for _ in range(calls):
            await self.call()
        elapsed = time.perf_counter() - started
        return (*self.take(), elapsed, (time.process_time() - cpu) * 1e6)

    async def tput(self, secs, inflight):
        deadline = time.perf_counter() + secs

        async def worker():
            while time.perf_counter() < deadline:
                await self.call()

        self.take()
        cpu = time.process_time()
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(inflight):
                tg.start_soon(worker)
        elapsed = time.perf_counter() - started
        return (*self.take(), elapsed, (time.process_time() - cpu) * 1e6)


def out(obj):
    print(json.dumps(obj), flush=True)


async def main(opts):
    params = StdioServerParameters(command=opts.command[0], args=opts.command[1:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            b = Bench(session, opts.tool, json.loads(opts.args))
            head = {
                "client": f"mcp.ClientSession (mcp {importlib.metadata.version('mcp')})",
                "protocol": init.protocol_version,
                "server": f"{init.server_info.name} {init.server_info.version}",
            }
            if opts.commands:
                out({"ready": True, "pid": os.getpid(), **head})
                while True:
                    line = await anyio.to_thread.run_sync(sys.stdin.readline)
                    if not line:
                        return
                    cmd = json.loads(line)
                    if cmd["op"] == "seq":
                        samples, errors, first, elapsed, cpu = await b.seq(cmd["calls"], cmd.get("warmup", 0))
                        out({"op": "seq", "samples_us": samples, "elapsed_s": elapsed, "client_cpu_us": cpu,
                             "errors": errors, "first_error": first})
                    elif cmd["op"] == "tput":
                        samples, errors, first, elapsed, cpu = await b.tput(cmd["secs"], cmd["inflight"])
                        out({"op": "tput", "calls": len(samples), "elapsed_s": elapsed,
                             "samples_us": samples, "client_cpu_us": cpu, "errors": errors, "first_error": first})
                    elif cmd["op"] == "quit":
                        return
                    else:
                        sys.exit(f"mcp_baseline: unknown command {line.strip()}")
            samples, errors, first, elapsed, cpu = await b.seq(opts.calls, opts.warmup)
            seq = {"calls": len(samples), "errors": errors, **summary(samples),
                   "calls_per_s": round(len(samples) / elapsed),
                   "client_cpu_us_per_call": round(cpu / opts.calls, 1)}
            samples, errors2, first2, elapsed, cpu = await b.tput(opts.secs, opts.inflight)
            tput = {"inflight": opts.inflight, "secs": opts.secs, "calls": len(samples), "errors": errors2,
                    "calls_per_s": round(len(samples) / elapsed),
                    "p50_us": summary(samples)["p50_us"], "p99_us": summary(samples)["p99_us"],
                    "client_cpu_us_per_call": round(cpu / max(len(samples) + errors2, 1), 1)}
            if first or first2:
                print(f"mcp_baseline: first failed call: {first or first2}", file=sys.stderr)
            out({**head, "tool": opts.tool, "sequential": seq, "inflight": tput})


def parse(argv):
    if "--" not in argv:
        sys.exit(__doc__.split("\n\n")[1])
    split = argv.index("--")
    p = argparse.ArgumentParser(prog="mcp_baseline.py")
    p.add_argument("--tool", default="echo")
    p.add_argument("--args", default='{"text": "hello"}', help="the tool's arguments (JSON object)")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--secs", type=float, default=3)
    p.add_argument("--inflight", type=int, default=16)
    p.add_argument("--commands", action="store_true", help="take commands on stdin (bench/mcp.rs)")
    opts = p.parse_args(argv[:split])
    opts.command = argv[split + 1:]
    if not opts.command:
        p.error("no server command after --")
    return opts


if __name__ == "__main__":
    anyio.run(main, parse(sys.argv[1:]))

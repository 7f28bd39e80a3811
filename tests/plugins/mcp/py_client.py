"""Generic MCP client for Hearth's MCP tests, written with the official Python SDK (`mcp`
2.3.0, `mcp.Client`). It runs a list of steps on one connection and prints one JSON object
per line to stdout; Rust integration tests drive it against Hearth's MCP server.

    py_client.py (--stdio CMD ARGS... | --url URL [--token TOK]) [--mode legacy|auto] STEPS_JSON

STEPS_JSON is a JSON array (or @FILE holding one). `--mode` (default auto) may come first
or right before STEPS_JSON. Steps:
    {"op":"info"}                                protocol, server, capabilities
    {"op":"list"}                                tools
    {"op":"call","name":N,"args":{},"timeout_ms":T,"progress":true}
    {"op":"cancel","name":N,"args":{},"after_ms":T}
    {"op":"wait_list_changed","timeout_ms":T}    takes every tools/list_changed seen so far,
                                                 or waits for the next one
    {"op":"sleep","ms":T}
    {"op":"resources"}  {"op":"read","uri":U}  {"op":"prompts"}  {"op":"prompt","name":N,"args":{}}
Output, one line per step: {"op": OP, ...data} or {"op": OP, "error": TEXT, "code": MCP code
if any}. call/cancel lines also carry "name" and "ms" (wall time). call: content,
structuredContent, isError, progress [{progress, total, message}] in arrival order. cancel:
cancelled true (+ result fields when the call finished first). wait_list_changed:
notification, count, or error "timeout". An error never stops the run; when the SDK tears
the whole connection down, that step and the rest report its error. Exit 0 when all steps
ran; 1 when the connection failed ({"op":"connect","error":..., "http_status": 401 ...});
2 on bad usage.
Env MCP_TEST_ELICIT: accept | accept:<JSON content> | decline | cancel - declares the
elicitation capability and answers every elicitation so (each printed as
{"op":"elicitation",...}); unset: no elicitation capability.
"""
import builtins
import json
import os
import sys
import time

import anyio
import mcp.types as types
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

USAGE = "usage: py_client.py (--stdio CMD ARGS... | --url URL [--token TOK]) [--mode legacy|auto] STEPS_JSON"
CONNECT_TIMEOUT = 30
CLOSE_TIMEOUT = 8
GUARD = 1  # seconds past a call's timeout_ms before we stop waiting for the SDK
GROUP = getattr(builtins, "BaseExceptionGroup", ())  # Python >= 3.11


def out(obj):
    print(json.dumps(obj), flush=True)


def dump(model):
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def error_of(exc):
    """The innermost real error of an exception (group) as output fields."""
    while isinstance(exc, GROUP) and exc.exceptions:
        exc = exc.exceptions[0]
    fields = {"error": str(exc) or type(exc).__name__}
    if isinstance(exc, MCPError):
        fields["code"] = exc.code
    return fields


def usage():
    print(USAGE, file=sys.stderr)
    sys.exit(2)


def parse_args(argv):
    if len(argv) < 2:
        usage()
    raw, rest = argv[-1], argv[:-1]
    opts = {"mode": "auto", "token": None, "url": None, "stdio": None}
    if len(rest) >= 2 and rest[-2] == "--mode":
        opts["mode"], rest = rest[-1], rest[:-2]
    while rest:
        flag = rest.pop(0)
        if flag == "--stdio" and rest:
            opts["stdio"], rest = rest, []
        elif flag in ("--url", "--token", "--mode") and rest:
            opts[flag[2:]] = rest.pop(0)
        else:
            usage()
    if bool(opts["stdio"]) == bool(opts["url"]) or opts["mode"] not in ("legacy", "auto"):
        usage()
    if raw.startswith("@"):
        with open(raw[1:]) as f:
            raw = f.read()
    opts["steps"] = json.loads(raw)
    return opts


def elicitation_callback():
    answer = os.environ.get("MCP_TEST_ELICIT")
    if not answer:
        return None
    action, _, content = answer.partition(":")

    def default(prop):
        # Accept with a value for every field of the requested form: the first choice, or
        # true / 1 / "yes" by type.
        if prop.get("enum"):
            return prop["enum"][0]
        if prop.get("oneOf"):
            return prop["oneOf"][0].get("const")
        return {"boolean": True, "integer": 1, "number": 1}.get(prop.get("type"), "yes")

    def fill(schema):
        return {name: default(prop) for name, prop in (schema or {}).get("properties", {}).items()}

    async def callback(context, params):
        p = dump(params)
        result = {"action": action}
        if action == "accept":
            result["content"] = json.loads(content) if content else fill(p.get("requestedSchema"))
        out({"op": "elicitation", "request": p, "answer": result})
        return types.ElicitResult(**result)

    return callback


class Runner:
    def __init__(self):
        self.c = None  # the Client
        self.done = 0  # steps reported
        self.started = 0.0  # when the current step started
        self.changed = []  # tools/list_changed notifications not yet taken by wait_list_changed
        self.arrived = anyio.Event()

    async def on_message(self, message):
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self.changed.append(dump(message))
            self.arrived.set()

    async def listen(self, *, task_status=anyio.TASK_STATUS_IGNORED):
        # 2026-07-28 servers send list_changed only on a subscriptions/listen stream; its events
        # reach on_message too (the SDK tees them), so this only keeps the stream open.
        started = False
        try:
            async with self.c.listen(tools_list_changed=True) as sub:
                task_status.started()
                started = True
                async for _ in sub:
                    pass
        except Exception as e:  # noqa: BLE001
            print(f"py_client: subscriptions/listen ended: {e!r}", file=sys.stderr, flush=True)
            if not started:
                task_status.started()

    def report(self, s, result):
        op = s.get("op")
        if op in ("call", "cancel"):
            ms = round((time.monotonic() - self.started) * 1000)
            result = {"name": s.get("name"), **result, "ms": ms}
        out({"op": op, **result})
        self.done += 1

    async def run(self, steps):
        self.done = 0
        for s in steps:
            self.started = time.monotonic()
            handler = getattr(self, "op_" + str(s.get("op")), None)
            try:
                result = await handler(s) if handler else {"error": f"unknown op {s.get('op')!r}"}
            except Exception as e:  # noqa: BLE001 - report and go on
                result = error_of(e)
            self.report(s, result)

    def abandon(self, steps, error):
        """The SDK tore the connection down under a step: that step and the rest get the error."""
        for s in steps[self.done:]:
            self.report(s, {**error, **({"progress": []} if s.get("op") == "call" else {})})
            self.started = time.monotonic()

    async def op_info(self, s):
        server = self.c.server_info
        return {
            "protocol": self.c.protocol_version,
            "server": dump(server) if server else None,
            "capabilities": dump(self.c.server_capabilities),
        }

    async def op_list(self, s):
        keys = ("name", "title", "description", "inputSchema", "outputSchema", "annotations")
        tools = (await self.c.list_tools()).tools
        return {"tools": [{k: v for k, v in dump(t).items() if k in keys} for t in tools]}

    async def op_call(self, s):
        progress = []

        async def on_progress(value, total, message):
            progress.append({"progress": value, "total": total, "message": message})

        timeout = s["timeout_ms"] / 1000 if s.get("timeout_ms") else None
        try:
            # The guard: over HTTP, mcp 2.3 starts the read timeout only once the request is
            # written, and a hung server can block the writer (a pending courtesy cancel).
            with anyio.fail_after(timeout + GUARD if timeout else None):
                r = await self.c.call_tool(s["name"], s.get("args") or {}, read_timeout_seconds=timeout,
                                           progress_callback=on_progress if s.get("progress") else None)
        except TimeoutError:
            return {"error": "timed out (the SDK's own timeout did not fire)", "progress": progress}
        except Exception as e:  # noqa: BLE001
            return {**error_of(e), "progress": progress}
        return {"content": [dump(b) for b in r.content], "structuredContent": r.structured_content,
                "isError": bool(r.is_error), "progress": progress}

    async def op_cancel(self, s):
        with anyio.move_on_after(s.get("after_ms", 100) / 1000) as scope:
            r = await self.c.call_tool(s["name"], s.get("args") or {})
        if scope.cancelled_caught:
            return {"cancelled": True}
        return {"cancelled": False, "content": [dump(b) for b in r.content], "isError": bool(r.is_error)}

    async def op_wait_list_changed(self, s):
        if not self.changed:
            self.arrived = anyio.Event()
            with anyio.move_on_after(s.get("timeout_ms", 5000) / 1000):
                await self.arrived.wait()
        if not self.changed:
            return {"error": "timeout"}
        taken, self.changed = self.changed, []
        return {"notification": taken[0], "count": len(taken)}

    async def op_sleep(self, s):
        await anyio.sleep(s.get("ms", 0) / 1000)
        return {}

    async def op_resources(self, s):
        return {"resources": [dump(r) for r in (await self.c.list_resources()).resources]}

    async def op_read(self, s):
        return {"contents": [dump(c) for c in (await self.c.read_resource(s["uri"])).contents]}

    async def op_prompts(self, s):
        return {"prompts": [dump(p) for p in (await self.c.list_prompts()).prompts]}

    async def op_prompt(self, s):
        r = await self.c.get_prompt(s["name"], s.get("args") or {})
        return {"messages": [dump(m) for m in r.messages]}


async def main(opts):
    http_status = {}  # the last HTTP error status: mcp 2.3 reports a 401 as "Server returned an error response"
    if opts["url"]:
        headers = {"Authorization": f"Bearer {opts['token']}"} if opts["token"] else None
        http = create_mcp_http_client(headers=headers)

        async def on_response(response):
            if response.status_code >= 400:
                http_status["http_status"] = response.status_code

        http.event_hooks["response"].append(on_response)
        server = streamable_http_client(opts["url"], http_client=http)
    else:
        cmd = opts["stdio"]
        server = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    runner = Runner()
    # cache=None: every list/read reaches the server (the tests look for changes).
    client = Client(server, mode=opts["mode"], message_handler=runner.on_message,
                    elicitation_callback=elicitation_callback(), cache=None)
    runner.c = client
    connected, done = anyio.Event(), anyio.Event()

    async def watchdog():
        # Bounds the connect and the close (a hung server must not keep us); the steps
        # carry their own timeouts. Cancel scopes cannot wrap Client.__aenter__, hence this.
        with anyio.move_on_after(CONNECT_TIMEOUT):
            await connected.wait()
        if not connected.is_set():
            out({"op": "connect", "error": f"no connection after {CONNECT_TIMEOUT} s"})
            os._exit(1)
        await done.wait()
        await anyio.sleep(CLOSE_TIMEOUT)
        print(f"py_client: close took more than {CLOSE_TIMEOUT} s; leaving", file=sys.stderr, flush=True)
        os._exit(0)

    rc = 0
    async with anyio.create_task_group() as outer:
        outer.start_soon(watchdog)
        try:
            async with client:
                connected.set()
                async with anyio.create_task_group() as tg:
                    if client.protocol_version == "2026-07-28":
                        await tg.start(runner.listen)
                    await runner.run(opts["steps"])
                    tg.cancel_scope.cancel()
                done.set()
        except Exception as e:  # noqa: BLE001
            if not connected.is_set():
                out({"op": "connect", **error_of(e), **http_status})
                rc = 1
            # e.g. httpx2 "Server disconnected without sending a response." when the server died:
            # mcp 2.3 lets that escape the transport and end the whole Client, not just the call.
            else:
                runner.abandon(opts["steps"], error_of(e))
                print(f"py_client: connection ended: {error_of(e)['error']}", file=sys.stderr, flush=True)
        outer.cancel_scope.cancel()
    return rc


if __name__ == "__main__":
    sys.exit(anyio.run(main, parse_args(sys.argv[1:])))

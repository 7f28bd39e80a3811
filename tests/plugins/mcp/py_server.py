"""Third-party MCP server for Hearth's MCP tests, written with the official Python SDK
(`mcp` 2.3.0, `MCPServer`). It speaks every protocol version the SDK knows (2024-11-05 …
2026-07-28). ts_server.mjs serves the same tools from the TypeScript SDK.

    py_server.py              stdio
    py_server.py http PORT    Streamable HTTP on 127.0.0.1:PORT/mcp (0 = any free port);
                              prints `listening http://127.0.0.1:<port>/mcp` to stdout

Env: MCP_TEST_TOKEN (HTTP: 401 without `Authorization: Bearer <token>`),
MCP_TEST_REQUIRE_HEADER (`Name: value`, HTTP: 401 without it), MCP_TEST_EVENTS (a file
that gets one line per event the tests look for: `cancelled wait`).
Tools: add echo slow wait grow shrink fail crash hang image link remove_everything
(+ late_tool after grow). Resource test://doc/1, prompt greet.
"""
import os
import socket
import sys
import time

import anyio
from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ImageContent, ResourceLink, TextContent, ToolAnnotations

# A 1x1 red PNG.
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"

mcp = MCPServer("py-test-server", version="1.0.0", log_level="WARNING")
# Only add has an output schema (as in ts_server.mjs): structured_output=False stops the SDK
# from wrapping other return values as {"result": ...} with a generated schema.


def event(line: str) -> None:
    """Tell the test something happened: a stderr line, and a line in $MCP_TEST_EVENTS."""
    print(line, file=sys.stderr, flush=True)
    path = os.environ.get("MCP_TEST_EVENTS")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


class Sum(BaseModel):
    total: int


@mcp.tool(title="Add", annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True))
def add(a: int, b: int) -> Sum:
    """Add two integers."""
    return Sum(total=a + b)


@mcp.tool(structured_output=False)
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@mcp.tool(structured_output=False)
async def slow(steps: int, ctx: Context, delay_ms: int = 50) -> str:
    """Report progress once per step (every delay_ms), then return "done"."""
    for i in range(steps):
        await anyio.sleep(delay_ms / 1000)
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")  # no-op without a progress token
    return "done"


@mcp.tool(structured_output=False)
async def wait(ms: int) -> str:
    """Sleep ms milliseconds; a cancellation is logged as `cancelled wait`."""
    try:
        await anyio.sleep(ms / 1000)
    except anyio.get_cancelled_exc_class():
        event("cancelled wait")
        raise
    return "waited"


def late_tool() -> str:
    """Added at run time by grow."""
    return "late"


async def tools_changed(ctx: Context) -> None:
    try:
        await ctx.session.send_tool_list_changed()  # clients on the initialize handshake
    except Exception as e:  # noqa: BLE001 - a 2026 connection may refuse it; listen covers that
        print(f"send_tool_list_changed failed: {e!r}", file=sys.stderr, flush=True)
    await ctx.notify_tools_changed()  # 2026-07-28 subscriptions/listen clients


@mcp.tool(structured_output=False)
async def grow(ctx: Context) -> str:
    """Add the tool late_tool and announce the change."""
    mcp.add_tool(late_tool, name="late_tool", structured_output=False)
    await tools_changed(ctx)
    return "grown"


@mcp.tool(structured_output=False)
async def shrink(ctx: Context) -> str:
    """Remove the tool late_tool and announce the change."""
    try:
        mcp.remove_tool("late_tool")
    except Exception:  # noqa: BLE001 - not there: nothing to remove, still announce
        pass
    await tools_changed(ctx)
    return "shrunk"


@mcp.tool(structured_output=False)
def fail() -> CallToolResult:
    """Return a tool error."""
    return CallToolResult(content=[TextContent(type="text", text="it failed on purpose")], is_error=True)


@mcp.tool(structured_output=False)
def crash() -> str:
    """Exit the process with status 3 in the middle of the call."""
    print("crashing on purpose", file=sys.stderr, flush=True)
    os._exit(3)


@mcp.tool(structured_output=False)
async def hang() -> str:
    """Freeze the whole process: a blocking sleep on the event loop, so nothing answers."""
    time.sleep(3600)
    return "unreachable"


@mcp.tool(structured_output=False)
def image() -> CallToolResult:
    """Return a tiny PNG and a caption."""
    return CallToolResult(content=[
        ImageContent(type="image", data=PNG, mime_type="image/png"),
        TextContent(type="text", text="a 1x1 red PNG"),
    ])


@mcp.tool(structured_output=False)
def link() -> CallToolResult:
    """Return a link to the resource test://doc/1."""
    return CallToolResult(content=[
        ResourceLink(type="resource_link", uri="test://doc/1", name="doc1", mime_type="text/plain"),
    ])


@mcp.tool(annotations=ToolAnnotations(destructiveHint=True), structured_output=False)
def remove_everything(confirm: bool) -> str:
    """Pretend to remove everything."""
    return "removed"


@mcp.resource("test://doc/1", name="doc1", mime_type="text/plain")
def doc1() -> str:
    """A test document."""
    return "hello resource"


@mcp.prompt()
def greet(name: str) -> str:
    """Greet someone."""
    return f"Hello, {name}!"


class Auth:
    """ASGI middleware: 401 unless the bearer token / required header (from the env) match."""

    def __init__(self, app):
        self.app = app
        self.need = []
        if os.environ.get("MCP_TEST_TOKEN"):
            self.need.append(("authorization", "Bearer " + os.environ["MCP_TEST_TOKEN"]))
        if os.environ.get("MCP_TEST_REQUIRE_HEADER"):
            name, _, value = os.environ["MCP_TEST_REQUIRE_HEADER"].partition(":")
            self.need.append((name.strip().lower(), value.strip()))

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            if any(headers.get(k) != v for k, v in self.need):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": b"unauthorized"})
                return
        await self.app(scope, receive, send)


async def serve_http(port: int) -> None:
    import uvicorn

    sock = socket.create_server(("127.0.0.1", port))
    server = uvicorn.Server(uvicorn.Config(Auth(mcp.streamable_http_app()), log_level="warning"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve, [sock])
        while not server.started:
            await anyio.sleep(0.01)
        print(f"listening http://127.0.0.1:{sock.getsockname()[1]}/mcp", flush=True)


if __name__ == "__main__":
    print("py_server ready", file=sys.stderr, flush=True)
    if sys.argv[1:2] == ["http"]:
        anyio.run(serve_http, int(sys.argv[2]))
    else:
        mcp.run()

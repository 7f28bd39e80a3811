"""Hearth Python plugin (typed `@tool` functions) for the MCP serve tests
(tests/integration/mcp_serve.rs): tools whose results are not JSON objects, which an
MCP server must not send as `structuredContent` (the spec wants an object there).

Tools: plain_list -> ["a", "b"], plain_number -> 42, plain_map -> {"k": 1}.
"""
from hearth_plugin import tool


@tool
def plain_list() -> list[str]:
    """Two letters."""
    return ["a", "b"]


@tool
def plain_number() -> int:
    """The answer."""
    return 42


@tool
def plain_map() -> dict[str, int]:
    """A JSON object."""
    return {"k": 1}

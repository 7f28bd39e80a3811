"""Hearth plugin SDK for Python: serve tools to the Hearth broker over gRPC.

Three plugin styles share one runtime (see README.md):

- HomeAgent: ``class P(Plugin)`` with ``name()``, ``start(self, sdk)`` calling
  ``sdk.register_tool(name, tool_def, handler)`` / ``sdk.register_stage(stage, handler)``,
  and ``stop()``; ``sdk.inject_text(...)`` and ``sdk.settings()`` … reach the host services;
- LinkZone: a ``metadata`` dict and ``execute_tool(self, sender, args)``;
- decorators: ``@tool`` functions, or ``plugin = Plugin("name")`` with ``@plugin.tool``.

``python -m hearth_plugin run path/to/plugin.py`` serves a plugin file; ``run()`` serves
one from code and exits; ``await serve(plugin)`` serves one inside your own event loop.
``hearth_plugin.testing`` runs a plugin in process against a fake broker, for tests.

This package imports no gRPC and no asyncio until a plugin is served (they are most of
a plugin's start-up time), so ``import hearth_plugin`` stays cheap.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import Optional

from ._apis import (LLMAPI, MCP_METHODS, ConfigDef, Doc, DocMemoryAPI, Entity, KnowledgeAPI,
                    KnowledgeEntry, McpAPI, MemoryAPI, Relation, SettingsAPI, TextEvent,
                    TextMemoryAPI, Triple)
from ._env import ConfigError
from ._plugin import Plugin, PluginSDK, StageHandler, Target, ToolHandler, tool
from ._stages import MemItem, Stage, StageContext, ToolCall, ToolResult
from ._types import (JSON, ArgumentError, HostError, JSONObject, PluginLoadError, Sender,
                     StatusCode, current_trace_context, progress)

__all__ = ["ArgumentError", "ConfigDef", "ConfigError", "Doc", "DocMemoryAPI", "Entity", "HostError",
           "JSON", "JSONObject", "KnowledgeAPI", "KnowledgeEntry", "LLMAPI", "MCP_METHODS", "McpAPI",
           "MemItem", "MemoryAPI",
           "Plugin", "PluginLoadError", "PluginSDK", "Relation", "Sender", "SettingsAPI", "Stage",
           "StageContext", "StageHandler", "StatusCode", "Target", "TextEvent", "TextMemoryAPI",
           "ToolCall", "ToolHandler", "ToolResult", "Triple", "current_trace_context", "progress", "run",
           "serve", "tool", "__version__"]


def run(target: Target = None) -> None:
    """Serve a plugin and exit the process with the session's exit code.

    `target` is a Plugin instance, a Plugin subclass, a path to a plugin file, a module,
    or None for the ``__main__`` module (``if __name__ == "__main__": hearth_plugin.run()``).
    Exit codes as for ``python -m hearth_plugin run``. Never returns.
    """
    from ._main import run_target  # the runtime (grpc, asyncio) loads only to serve
    run_target(target)


async def serve(target: Target = None, *, addr: Optional[str] = None,
                token: Optional[str] = None) -> int:
    """Serve a plugin on the running event loop (``await hearth_plugin.serve(plugin)``)
    until the broker ends the session; the process is not exited.

    `target` as for `run()`. `addr` and `token` default to ``HEARTH_ADDR`` and the spawn
    token (``HEARTH_TOKEN_FD``, else ``HEARTH_TOKEN``). Returns the exit code `run()` would
    exit with: 0 after Shutdown or when the broker ends the stream, 1 when the stream
    fails (broker gone, wrong token), 3 when the broker rejects the registration.
    Raises `PluginLoadError` when the plugin cannot be loaded or its ``start()`` fails,
    `ConfigError` when the address or the token is missing. Plain ``def`` handlers run in
    a thread pool of the session's own.
    """
    from ._runtime import serve as serve_on_loop  # grpc + asyncio: loaded only to serve
    return await serve_on_loop(target, addr=addr, token=token)

"""Hearth plugin SDK for Python: serve tools to the Hearth broker over gRPC.

Three plugin styles share one runtime (see README.md):

- HomeAgent: ``class P(Plugin)`` with ``name()``, ``start(self, sdk)`` calling
  ``sdk.register_tool(name, tool_def, handler)`` / ``sdk.register_stage(stage, handler)``,
  and ``stop()``; ``sdk.inject_text(...)`` and ``sdk.settings()`` … reach the host services;
- LinkZone: a ``metadata`` dict and ``execute_tool(self, sender, args)``;
- decorators: ``@tool`` functions, or ``plugin = Plugin("name")`` with ``@plugin.tool``.

``python -m hearth_plugin run path/to/plugin.py`` serves a plugin file. This package imports
no gRPC code until a plugin is served, so ``import hearth_plugin`` stays cheap.
"""

__version__ = "0.1.0"

from ._plugin import HostError, Plugin, PluginSDK, Sender, StatusCode, progress, tool

__all__ = ["ConfigDef", "Doc", "DocMemoryAPI", "Entity", "HostError", "KnowledgeAPI",
           "KnowledgeEntry", "LLMAPI", "MemItem", "MemoryAPI", "Plugin", "PluginSDK", "Relation",
           "Sender", "SettingsAPI", "Stage", "StageContext", "StatusCode", "TextEvent",
           "TextMemoryAPI", "ToolCall", "ToolResult", "Triple", "progress", "run", "tool",
           "__version__"]


def run(target=None) -> None:
    """Serve a plugin and exit the process with the session's exit code.

    `target` is a Plugin instance, a Plugin subclass, a path to a plugin file, or None
    for the ``__main__`` module (``if __name__ == "__main__": hearth.run()``).
    """
    from ._main import run_target
    run_target(target)


_LAZY = {"MemItem", "Stage", "StageContext", "ToolCall", "ToolResult"}
_LAZY_APIS = {"ConfigDef", "Doc", "DocMemoryAPI", "Entity", "KnowledgeAPI", "KnowledgeEntry",
              "LLMAPI", "MemoryAPI", "Relation", "SettingsAPI", "TextEvent", "TextMemoryAPI",
              "Triple"}


def __getattr__(name):
    # The stage types and host-service records load on first use: `enum` or `typing`
    # alone would double `import hearth_plugin`.
    if name in _LAZY:
        from . import _stages
        return getattr(_stages, name)
    if name in _LAZY_APIS:
        from . import _apis
        return getattr(_apis, name)
    raise AttributeError(f"module 'hearth' has no attribute {name!r}")

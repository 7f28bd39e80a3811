"""Loading a plugin file and assembling what it offers into one registration.

`load_file` imports the file as a module (its directory first on sys.path); `discover`
finds the plugin in it; `assemble` (async: `start()` may be a coroutine) collects the
tools of every style, and the inject spec of metadata or of the file's `@ai-trigger-*`
header comments (`_header`), into an `Assembled` the runtime turns into a `Register`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from types import ModuleType
from typing import Any, Dict, List, Optional

from ._plugin import Plugin, PluginSDK, ToolEntry, ToolInfo


class PluginLoadError(Exception):
    """The plugin file could not be loaded or does not define a plugin; names the file."""


class Assembled:
    """Everything a loaded plugin registers, plus its lifecycle hooks."""

    def __init__(self, plugin: Plugin, sdk: PluginSDK, info: Dict[str, str],
                 tools: Dict[str, ToolEntry], inject: Optional[dict], triggers: List[Any],
                 has_event_handler: bool) -> None:
        self.plugin = plugin
        self.sdk = sdk
        self.info = info
        self.tools = tools
        self.inject = inject
        self.triggers = triggers
        self.has_event_handler = has_event_handler


def load_file(path: str) -> ModuleType:
    """Import the plugin file at `path` as module `__hearth_plugin__`."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise PluginLoadError(f"plugin file {path}: no such file")
    directory = os.path.dirname(path)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location("__hearth_plugin__", path)
    if spec is None or spec.loader is None:
        raise PluginLoadError(f"plugin file {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except SystemExit:
        raise
    except BaseException as e:
        import traceback
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        raise PluginLoadError(f"plugin file {path}: import failed: {type(e).__name__}: {e}\n{tb}") from e
    return module


def _overrides(obj: Plugin, method: str) -> bool:
    return getattr(type(obj), method, None) is not getattr(Plugin, method)


def _module_tools(module: ModuleType) -> List[ToolInfo]:
    out = []
    for value in list(vars(module).values()):
        info = getattr(value, "__hearth_tool__", None)
        if isinstance(info, ToolInfo) and info.func is value and not isinstance(value, type):
            out.append(info)
    return out


def discover(module: ModuleType, path: str) -> Plugin:
    """The plugin a module defines: a Plugin instance, else a Plugin subclass (instantiated),
    else an implicit Plugin for module-level `@tool` functions / LinkZone `metadata`."""
    path = os.path.abspath(path)
    name = module.__name__
    instances = [v for v in vars(module).values() if isinstance(v, Plugin)]
    uniq = []
    for v in instances:
        if not any(v is u for u in uniq):
            uniq.append(v)
    if len(uniq) > 1:
        raise PluginLoadError(f"plugin file {path}: {len(uniq)} Plugin instances at module level; "
                              "keep exactly one")
    if uniq:
        return uniq[0]
    classes = [v for v in vars(module).values()
               if isinstance(v, type) and issubclass(v, Plugin) and v is not Plugin
               and v.__module__ == name]
    if len(classes) > 1:
        names = ", ".join(sorted(c.__name__ for c in classes))
        raise PluginLoadError(f"plugin file {path}: several Plugin subclasses ({names}); "
                              "keep exactly one, or create the instance to serve at module level")
    if classes:
        cls = classes[0]
        try:
            return cls()
        except Exception as e:
            raise PluginLoadError(f"plugin file {path}: {cls.__name__}() failed: "
                                  f"{type(e).__name__}: {e}") from e
    if _module_tools(module) or isinstance(getattr(module, "metadata", None), dict):
        return Plugin()
    raise PluginLoadError(
        f"plugin file {path}: no plugin found: define a Plugin subclass (HomeAgent or LinkZone "
        "style), a Plugin instance, or @tool functions (from hearth_plugin import Plugin, tool)")


def _manifest(directory: str) -> Dict[str, Any]:
    try:
        with open(os.path.join(directory, "plugin.json"), encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _plugin_name(plugin: Plugin, metadata: Optional[dict], manifest: Dict[str, Any], path: str) -> str:
    name_attr = getattr(plugin, "name", None)
    name = name_attr() if callable(name_attr) else name_attr
    if isinstance(name, str) and name:
        return name
    if metadata and isinstance(metadata.get("name"), str) and metadata["name"]:
        return metadata["name"]
    if isinstance(manifest.get("name"), str) and manifest["name"]:
        return manifest["name"]
    env = os.environ.get("HEARTH_PLUGIN")
    if env:
        return env
    base = os.path.splitext(os.path.basename(path))[0]
    if base in ("main", "__init__", "plugin"):
        return os.path.basename(os.path.dirname(os.path.abspath(path)))
    return base


def _entry_from_info(info: ToolInfo, func: Any, where: str) -> ToolEntry:
    from ._schema import SchemaError, function_schema
    try:
        description, schema, sender_param = function_schema(func)
    except SchemaError as e:
        raise PluginLoadError(f"{where}: tool {info.name}: {e}") from None
    return ToolEntry(info.name, description=info.description or description,
                     parameters=info.parameters or schema, serial=info.serial, kind="kwargs",
                     func=func, sender_param=sender_param)


async def assemble(plugin: Plugin, module: Optional[ModuleType], path: str) -> Assembled:
    """Collect the plugin's tools of every style; calls `plugin.start(sdk)`."""
    from ._runtime import call_handler

    path = os.path.abspath(path)
    where = f"plugin file {path}"
    metadata = getattr(plugin, "metadata", None)
    if metadata is None and module is not None:
        metadata = getattr(module, "metadata", None)
    if metadata is not None and not isinstance(metadata, dict):
        raise PluginLoadError(f"{where}: metadata must be a dict, got {type(metadata).__name__}")
    manifest = _manifest(os.path.dirname(path))
    name = _plugin_name(plugin, metadata, manifest, path)
    where = f"plugin {name} ({path})"
    own = getattr(plugin, "_hearth_info", {}) or {}
    info = {
        "name": name,
        "version": str(own.get("version") or (metadata or {}).get("version") or manifest.get("version") or ""),
        "author": str(own.get("author") or (metadata or {}).get("author") or manifest.get("author") or ""),
        "description": str(own.get("description") or (metadata or {}).get("description")
                           or manifest.get("description") or ""),
    }
    tools: Dict[str, ToolEntry] = {}

    def add(entry: ToolEntry) -> None:
        if entry.name in tools:
            raise PluginLoadError(f"{where}: tool {entry.name} defined twice")
        tools[entry.name] = entry

    inject = None
    triggers: List[Any] = []
    if metadata:
        ai = metadata.get("ai") or {}
        if not isinstance(ai, dict):
            raise PluginLoadError(f"{where}: metadata.ai must be a dict")
        ai_tool = ai.get("tool")
        if ai_tool is not None:
            if not isinstance(ai_tool, dict):
                raise PluginLoadError(f"{where}: metadata.ai.tool must be a dict")
            tool_name = metadata.get("name")
            if not isinstance(tool_name, str) or not tool_name:
                raise PluginLoadError(f"{where}: metadata.name is required for ai.tool "
                                      "(the tool is named after it)")
            if not _overrides(plugin, "execute_tool"):
                raise PluginLoadError(f"{where}: metadata.ai.tool is set but "
                                      f"{type(plugin).__name__} has no execute_tool(self, sender, args)")
            add(ToolEntry(tool_name, ai_tool=ai_tool, kind="linkzone", func=plugin.execute_tool))
        inject = ai.get("inject")
        if inject is not None and not isinstance(inject, dict):
            raise PluginLoadError(f"{where}: metadata.ai.inject must be a dict")
        triggers = list(metadata.get("triggers") or [])
    # LinkZone header comments (@ai-triggerable …) of the plugin file: an inject spec
    # when metadata has no explicit ai.inject (metadata wins). Parsed even then, so a
    # malformed header is always an error naming its line.
    from ._header import HeaderError, read_header
    try:
        header_inject = read_header(path)
    except HeaderError as e:
        raise PluginLoadError(str(e)) from None
    if inject is None:
        inject = header_inject

    seen = set()
    for attr in dir(type(plugin)):
        raw = getattr(type(plugin), attr, None)
        tinfo = getattr(raw, "__hearth_tool__", None)
        if isinstance(tinfo, ToolInfo):
            seen.add(id(tinfo))
            add(_entry_from_info(tinfo, getattr(plugin, attr), where))
    for tinfo in list(getattr(plugin, "_hearth_tools", None) or []):
        seen.add(id(tinfo))
        add(_entry_from_info(tinfo, tinfo.func, where))
    if module is not None:
        for tinfo in _module_tools(module):
            if id(tinfo) not in seen:
                add(_entry_from_info(tinfo, tinfo.func, where))

    import asyncio
    sdk = PluginSDK(name)
    sdk._loop = asyncio.get_running_loop()  # host-service calls run on it
    try:
        await call_handler(plugin.start, sdk, _lifecycle=True)
    except Exception as e:
        import traceback
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        raise PluginLoadError(f"{where}: start() failed: {type(e).__name__}: {e}\n{tb}") from e
    with sdk._lock:
        sdk._started = True
    for entry in list(sdk._tools.values()):
        add(entry)
    has_event = _overrides(plugin, "handle_event")
    if not tools and inject is None and not triggers and not has_event and not sdk._stages:
        raise PluginLoadError(f"{where}: registers nothing (no tools, no stage hooks, no inject, "
                              "no triggers)")
    return Assembled(plugin, sdk, info, tools, inject, triggers, has_event)

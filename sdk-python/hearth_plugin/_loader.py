"""Loading a plugin: its file, the plugin object in it, and what it declares.

`load_file` imports a plugin file as a module (its directory first on sys.path);
`discover` finds the plugin in a module; `resolve` turns whatever `run()`, `serve()` or
the test harness was given into (plugin, module, path); `load` collects what the plugin
declares without running any of its code beyond the import: the tools of every style
(decorators, LinkZone `metadata`), the inject spec of metadata or of the file's
`@ai-trigger-*` header comments (`_header`), and the triggers. The result is a
`LoadedPlugin`; the runtime then calls `start(sdk)` (`hearth_plugin._runtime.start`),
which adds the HomeAgent-style registrations.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import traceback
from types import ModuleType
from typing import Any, Dict, List, Optional, Tuple

from ._header import HeaderError, read_header
from ._plugin import Plugin, PluginSDK, Target
from ._schema import SchemaError, function_schema
from ._types import JSONObject, PluginLoadError, ToolEntry, ToolInfo

__all__ = ["LoadedPlugin", "PluginLoadError", "Target", "discover", "load", "load_file", "resolve"]

class LoadedPlugin:
    """A plugin and everything it registers.

    `load()` fills in what the plugin declares (`info`, decorator and LinkZone `tools`,
    `inject`, `triggers`); `hearth_plugin._runtime.start()` then runs `plugin.start(sdk)`,
    adding `sdk`'s tools to `tools` (its stage hooks stay in `sdk`), and sets `started`.
    """

    def __init__(self, plugin: Plugin, module: Optional[ModuleType], path: str, info: Dict[str, str],
                 tools: Dict[str, ToolEntry], inject: Optional[JSONObject], triggers: List[Any],
                 has_event_handler: bool) -> None:
        self.plugin = plugin
        self.module = module
        self.path = path
        self.info = info
        self.sdk = PluginSDK(info["name"])
        self.tools = tools
        self.inject = inject
        self.triggers = triggers
        self.has_event_handler = has_event_handler
        #: The plugin.json next to the plugin file ({} when there is none).
        self.manifest: Dict[str, Any] = {}
        self.started = False

    @property
    def name(self) -> str:
        """The plugin's name."""
        return self.info["name"]

    def where(self) -> str:
        """"plugin NAME (PATH)", for errors."""
        return f"plugin {self.name} ({self.path})"

    def add_tool(self, entry: ToolEntry) -> None:
        """Adds a tool; PluginLoadError when the name is taken."""
        if entry.name in self.tools:
            raise PluginLoadError(f"{self.where()}: tool {entry.name} defined twice")
        self.tools[entry.name] = entry


def load_file(path: str, module_name: str = "__hearth_plugin__") -> ModuleType:
    """Import the plugin file at `path` as module `module_name` (its directory first on
    sys.path); PluginLoadError names the file and the exception, with its traceback."""
    path = os.path.abspath(path)
    if not os.path.isfile(path):
        raise PluginLoadError(f"plugin file {path}: no such file")
    directory = os.path.dirname(path)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise PluginLoadError(f"plugin file {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except SystemExit:
        raise
    except BaseException as e:
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        raise PluginLoadError(f"plugin file {path}: import failed: {type(e).__name__}: {e}\n{tb}") from e
    return module


def _overrides(obj: Plugin, method: str) -> bool:
    return getattr(type(obj), method, None) is not getattr(Plugin, method)


def _module_tools(module: ModuleType) -> List[ToolInfo]:
    out = []
    for value in list(vars(module).values()):
        info = getattr(value, "__hearth_tool__", None)
        # `@plugin.tool` functions belong to their plugin object, not to the module.
        if (isinstance(info, ToolInfo) and info.func is value and info.owner is None
                and not isinstance(value, type)):
            out.append(info)
    return out


def discover(module: ModuleType, path: str) -> Plugin:
    """The plugin a module defines: a Plugin instance, else a Plugin subclass (instantiated),
    else an implicit Plugin for module-level `@tool` functions / LinkZone `metadata`."""
    path = os.path.abspath(path)
    name = module.__name__
    instances = [v for v in vars(module).values() if isinstance(v, Plugin)]
    uniq: List[Plugin] = []
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


def _plugin_name(plugin: Plugin, metadata: Optional[JSONObject], manifest: Dict[str, Any], path: str,
                 fallback: Optional[str]) -> str:
    name_attr = getattr(plugin, "name", None)
    name = name_attr() if callable(name_attr) else name_attr
    if isinstance(name, str) and name:
        return name
    if metadata and isinstance(metadata.get("name"), str) and metadata["name"]:
        return str(metadata["name"])
    if isinstance(manifest.get("name"), str) and manifest["name"]:
        return str(manifest["name"])
    env = fallback if fallback is not None else os.environ.get("HEARTH_PLUGIN")
    if env:
        return env
    base = os.path.splitext(os.path.basename(path))[0]
    if base in ("main", "__init__", "plugin"):
        return os.path.basename(os.path.dirname(os.path.abspath(path)))
    return base


def _entry_from_info(info: ToolInfo, func: Any, where: str) -> ToolEntry:
    try:
        fs = function_schema(func)
    except SchemaError as e:
        raise PluginLoadError(f"{where}: tool {info.name}: {e}") from None
    return ToolEntry(info.name, description=info.description or fs.description,
                     parameters=info.parameters or fs.parameters, serial=info.serial, kind="kwargs",
                     func=func, sender_param=fs.sender_param, bind=fs.bind)


def _file_of(module: Optional[ModuleType]) -> str:
    return os.path.abspath(getattr(module, "__file__", None) or sys.argv[0] or "plugin.py")


def resolve(target: Target = None, *,
            module_name: str = "__hearth_plugin__") -> Tuple[Plugin, Optional[ModuleType], str]:
    """(plugin, module, path) of what `run()` / `serve()` / the test harness was given:
    a `Plugin` instance or subclass (its module and file), a path to a plugin file
    (imported as `module_name`), a module (searched with `discover`), or None (the
    `__main__` module).
    PluginLoadError when it defines no plugin; TypeError for anything else."""
    if isinstance(target, (str, os.PathLike)):
        path = os.path.abspath(os.fspath(target))
        module = load_file(path, module_name)
        return discover(module, path), module, path
    if isinstance(target, ModuleType) or target is None:
        main = target if target is not None else sys.modules.get("__main__")
        if main is None:
            raise PluginLoadError("no __main__ module to find a plugin in")
        path = _file_of(main)
        return discover(main, path), main, path
    if isinstance(target, type) and issubclass(target, Plugin):
        owner = sys.modules.get(target.__module__)
        path = _file_of(owner)
        try:
            return target(), owner, path
        except Exception as e:
            raise PluginLoadError(f"plugin file {path}: {target.__name__}() failed: "
                                  f"{type(e).__name__}: {e}") from e
    if isinstance(target, Plugin):
        owner = sys.modules.get(type(target).__module__)
        return target, owner, _file_of(owner)
    raise TypeError(f"expected a Plugin, a Plugin subclass, a path or a module, got {target!r}")


def load(plugin: Plugin, module: Optional[ModuleType], path: str, *,
         fallback_name: Optional[str] = None) -> LoadedPlugin:
    """What `plugin` (defined in `module`, file `path`) declares, before `start()` runs:
    its name and info, the tools of its decorators and LinkZone metadata, its inject
    spec and triggers. PluginLoadError names the file and the problem.

    The name is the plugin's `name()`, else metadata's `name`, else plugin.json's, else
    `fallback_name` (default: HEARTH_PLUGIN), else the file's (or its directory's, for
    main.py) name."""
    path = os.path.abspath(path)
    where = f"plugin file {path}"
    metadata = getattr(plugin, "metadata", None)
    if metadata is None and module is not None:
        metadata = getattr(module, "metadata", None)
    if metadata is not None and not isinstance(metadata, dict):
        raise PluginLoadError(f"{where}: metadata must be a dict, got {type(metadata).__name__}")
    manifest = _manifest(os.path.dirname(path))
    name = _plugin_name(plugin, metadata, manifest, path, fallback_name)
    own = getattr(plugin, "_hearth_info", {}) or {}
    meta = metadata or {}
    info = {
        "name": name,
        "version": str(own.get("version") or meta.get("version") or manifest.get("version") or ""),
        "author": str(own.get("author") or meta.get("author") or manifest.get("author") or ""),
        "description": str(own.get("description") or meta.get("description")
                           or manifest.get("description") or ""),
    }
    loaded = LoadedPlugin(plugin, module, path, info, {}, None, [], _overrides(plugin, "handle_event"))
    loaded.manifest = manifest
    where = loaded.where()

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
            loaded.add_tool(ToolEntry(tool_name, ai_tool=ai_tool, kind="linkzone", func=plugin.execute_tool))
        inject = ai.get("inject")
        if inject is not None and not isinstance(inject, dict):
            raise PluginLoadError(f"{where}: metadata.ai.inject must be a dict")
        loaded.inject = inject
        loaded.triggers = list(metadata.get("triggers") or [])
    # LinkZone header comments (@ai-triggerable …) of the plugin file: an inject spec
    # when metadata has no explicit ai.inject (metadata wins). Parsed even then, so a
    # malformed header is always an error naming its line.
    try:
        header_inject = read_header(path)
    except HeaderError as e:
        raise PluginLoadError(str(e)) from None
    if loaded.inject is None:
        loaded.inject = header_inject

    seen = set()
    for attr in dir(type(plugin)):
        raw = getattr(type(plugin), attr, None)
        tinfo = getattr(raw, "__hearth_tool__", None)
        if isinstance(tinfo, ToolInfo):
            seen.add(id(tinfo))
            loaded.add_tool(_entry_from_info(tinfo, getattr(plugin, attr), where))
    for tinfo in list(getattr(plugin, "_hearth_tools", None) or []):
        seen.add(id(tinfo))
        loaded.add_tool(_entry_from_info(tinfo, tinfo.func, where))
    if module is not None:
        for tinfo in _module_tools(module):
            if id(tinfo) not in seen:
                loaded.add_tool(_entry_from_info(tinfo, tinfo.func, where))
    return loaded

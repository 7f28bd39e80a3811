"""Command line and process lifecycle of a served plugin (exit codes in `hearth_plugin._runtime`)."""

from __future__ import annotations

import os
import sys
from types import ModuleType
from typing import Any, List, Optional

USAGE = """usage: python -m hearth_plugin run PLUGIN_FILE [ARGS...]

Serve the plugin defined in PLUGIN_FILE to the Hearth broker given by HEARTH_ADDR and
HEARTH_PLUGIN, with the spawn token read from the pipe fd HEARTH_TOKEN_FD (the broker
sets them when it starts the plugin). For a manual run set HEARTH_TOKEN instead.
"""


def _exit(code: int) -> None:
    """Flush stdio and leave at once: handler threads still blocked must not delay exit."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def _read_token_first() -> None:
    """Read the spawn token before the plugin's code runs (`hearth_plugin._env`: the fd number in
    HEARTH_TOKEN_FD must still be the broker's pipe); exit 2 when it cannot be read."""
    from ._env import ConfigError, token

    try:
        token()
    except ConfigError as e:
        from ._runtime import EXIT_LOAD_ERROR, log

        name = os.environ.get("HEARTH_PLUGIN", "")
        log(f"plugin {name}: {e}" if name else str(e))
        _exit(EXIT_LOAD_ERROR)


def _line_buffer_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True, errors="backslashreplace")  # type: ignore[attr-defined]
        except Exception:
            pass


def serve(plugin: Any, module: Optional[ModuleType], path: str) -> int:
    """Assemble `plugin` and serve it; returns the exit code (never raises for plugin errors)."""
    import asyncio

    from ._loader import PluginLoadError, assemble
    from ._runtime import EXIT_LOAD_ERROR, ConfigError, log, serve_assembled

    async def amain() -> int:
        try:
            assembled = await assemble(plugin, module, path)
        except PluginLoadError as e:
            log(str(e))
            return EXIT_LOAD_ERROR
        try:
            return await serve_assembled(assembled)
        except (ConfigError, ValueError) as e:
            log(f"plugin {assembled.info['name']}: {e}")
            return EXIT_LOAD_ERROR

    # Not asyncio.run(): its cleanup joins the handler thread pool, and a plain handler
    # still blocked in a thread would hold the exit hostage. The caller os._exit()s.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(amain())
    except KeyboardInterrupt:
        return 130


def run_file(path: str, args: List[str]) -> int:
    """Load the plugin file at `path` (with `args` as its sys.argv[1:]) and serve it."""
    from ._loader import PluginLoadError, discover, load_file
    from ._runtime import EXIT_LOAD_ERROR, log

    path = os.path.abspath(path)
    sys.argv = [path, *args]
    try:
        module = load_file(path)
        plugin = discover(module, path)
    except PluginLoadError as e:
        log(str(e))
        return EXIT_LOAD_ERROR
    return serve(plugin, module, path)


def run_target(target: Any = None) -> None:
    """`hearth.run(...)`: serve a Plugin instance/subclass, a file path, or `__main__`."""
    _read_token_first()
    from ._loader import discover
    from ._plugin import Plugin

    _line_buffer_stdio()
    if isinstance(target, (str, os.PathLike)):
        _exit(run_file(os.fspath(target), sys.argv[1:]))
    main_mod = sys.modules.get("__main__")
    path = os.path.abspath(getattr(main_mod, "__file__", None) or sys.argv[0] or "plugin.py")
    if target is None:
        plugin = discover(main_mod, path) if main_mod is not None else None
    elif isinstance(target, type) and issubclass(target, Plugin):
        plugin = target()
    elif isinstance(target, Plugin):
        plugin = target
    else:
        raise TypeError(f"hearth.run: expected a Plugin, a Plugin subclass or a path, got {target!r}")
    _exit(serve(plugin, main_mod, path))


def main(argv: Optional[List[str]] = None) -> None:
    """Entry point of `python -m hearth_plugin`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        sys.exit(0 if argv else 2)
    if argv[0] == "--version":
        from . import __version__
        print(f"hearth-plugin {__version__}")
        sys.exit(0)
    if argv[0] != "run" or len(argv) < 2:
        sys.stderr.write(USAGE)
        sys.exit(2)
    _read_token_first()
    _line_buffer_stdio()
    _exit(run_file(argv[1], argv[2:]))

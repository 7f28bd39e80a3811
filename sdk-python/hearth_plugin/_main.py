"""Command line and process lifecycle of a served plugin (exit codes in `hearth_plugin._runtime`)."""

from __future__ import annotations

import os
import sys
from typing import List, Optional

from . import __version__
from ._env import ConfigError, token
from ._plugin import Target
from ._types import PluginLoadError

USAGE = """usage: python -m hearth_plugin run PLUGIN_FILE [ARGS...]

Serve the plugin defined in PLUGIN_FILE to the Hearth broker given by HEARTH_ADDR and
HEARTH_PLUGIN, with the spawn token read from the pipe fd HEARTH_TOKEN_FD (the broker
sets them when it starts the plugin). For a manual run (a debugger, a REPL) set
HEARTH_ADDR and HEARTH_TOKEN instead:

    eval "$(hearth plugins attach-token NAME)"
    python -m hearth_plugin run main.py
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
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(line_buffering=True, errors="backslashreplace")
        except Exception:
            pass


def _serve_blocking(target: Target) -> int:
    """Serve `target` on an event loop of its own; the exit code (load and start
    failures are logged and give 2)."""
    import asyncio
    import concurrent.futures

    from ._runtime import EXIT_LOAD_ERROR, log, serve

    async def amain() -> int:
        # Handlers that use the loop's default executor get the session's thread count.
        workers = int(os.environ.get("HEARTH_PY_THREADS", "64"))
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="hearth-default"))
        try:
            return await serve(target)
        except (PluginLoadError, ConfigError) as e:
            name = os.environ.get("HEARTH_PLUGIN", "")
            text = str(e)
            log(f"plugin {name}: {text}" if name and isinstance(e, ConfigError) else text)
            return EXIT_LOAD_ERROR

    # Not asyncio.run(): its cleanup joins the handler thread pool, and a plain handler
    # still blocked in a thread would hold the exit hostage. The caller os._exit()s.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(amain())
    except KeyboardInterrupt:
        return 130


def run_target(target: Target = None) -> None:
    """`hearth_plugin.run(...)`: serve a Plugin instance/subclass, a file path, a module
    or `__main__`, then exit the process with the session's exit code."""
    _read_token_first()
    _line_buffer_stdio()
    if isinstance(target, (str, os.PathLike)):
        path = os.path.abspath(os.fspath(target))
        sys.argv = [path, *sys.argv[1:]]
    _exit(_serve_blocking(target))


def main(argv: Optional[List[str]] = None) -> None:
    """Entry point of `python -m hearth_plugin`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        sys.exit(0 if argv else 2)
    if argv[0] == "--version":
        print(f"hearth-plugin {__version__}")
        sys.exit(0)
    if argv[0] != "run" or len(argv) < 2:
        sys.stderr.write(USAGE)
        sys.exit(2)
    _read_token_first()
    _line_buffer_stdio()
    path = os.path.abspath(argv[1])
    sys.argv = [path, *argv[2:]]
    _exit(_serve_blocking(path))

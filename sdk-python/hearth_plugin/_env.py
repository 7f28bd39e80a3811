"""The plugin's spawn token, read once per process; and `ConfigError` for a bad HEARTH_* environment.

The broker keeps the token out of the plugin's environment (`/proc/<pid>/environ` is
readable by every process of the user): it writes the token into a pipe and passes the
read end as an inherited file descriptor named by `HEARTH_TOKEN_FD`. `token()` reads that
fd to EOF, closes it and drops `HEARTH_TOKEN_FD` from `os.environ`, so the plugin's own
child processes do not read a closed or reused fd number. The entry points
(`python -m hearth_plugin run`, `hearth_plugin.run()`) call it before loading the plugin's code, so
nothing else can have opened a file under that number yet. Without `HEARTH_TOKEN_FD`
the token is `HEARTH_TOKEN` (manual runs, tests with a fake broker).

This module imports nothing of ours, so every other module can use it.
"""

from __future__ import annotations

import os
import stat
import threading
from typing import Optional, Tuple

ENV_TOKEN = "HEARTH_TOKEN"
ENV_TOKEN_FD = "HEARTH_TOKEN_FD"
#: More than any token: a pipe that keeps giving is not a token pipe.
_MAX_TOKEN_BYTES = 64 * 1024


class ConfigError(Exception):
    """Missing or malformed HEARTH_* environment."""


_lock = threading.Lock()
_token: Optional[str] = None
_error: Optional[ConfigError] = None


def token() -> str:
    """The spawn token: read from `HEARTH_TOKEN_FD` on the first call, else `HEARTH_TOKEN`
    (empty when neither is set); the same value (or the same ConfigError) every call."""
    global _token, _error
    with _lock:
        if _token is None and _error is None:
            fd_text = os.environ.pop(ENV_TOKEN_FD, None)
            try:
                _token = (os.environ.get(ENV_TOKEN, "") if fd_text is None
                          else _read_token_fd(fd_text))
            except ConfigError as e:
                _error = e
        if _error is not None:
            raise _error
        assert _token is not None
        return _token


def _read_token_fd(fd_text: str) -> str:
    """Read the token pipe `fd_text` to EOF and close it; ConfigError says what went wrong."""
    where = f"{ENV_TOKEN_FD}={fd_text}"
    if not (fd_text.isascii() and fd_text.isdigit() and len(fd_text) <= 9):
        raise ConfigError(f"{where}: not a file descriptor number")
    fd = int(fd_text)
    if fd <= 2:
        raise ConfigError(f"{where}: cannot read the token: fd {fd} is stdin, stdout or stderr")
    try:
        mode = os.fstat(fd).st_mode
    except OSError as e:
        raise ConfigError(f"{where}: cannot read the token: {e.strerror}") from None
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        # Not ours to close: some other file took the number.
        raise ConfigError(f"{where}: cannot read the token: fd {fd} is not a pipe")
    data = b""
    try:
        os.set_blocking(fd, True)
        while len(data) <= _MAX_TOKEN_BYTES:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    except OSError as e:
        raise ConfigError(f"{where}: cannot read the token: {e.strerror}") from None
    finally:
        try:
            os.close(fd)
        except OSError:
            pass
    if len(data) > _MAX_TOKEN_BYTES:
        raise ConfigError(f"{where}: cannot read the token: more than {_MAX_TOKEN_BYTES} bytes")
    try:
        text = data.decode("ascii").rstrip()
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: cannot read the token: it is not ASCII text") from None
    if not text:
        raise ConfigError(f"{where}: cannot read the token: the pipe held no token")
    return text


def read_env() -> Tuple[str, str]:
    """(HEARTH_ADDR, spawn token) from the environment (the token: `token()`);
    ConfigError names what is missing or wrong."""
    addr = os.environ.get("HEARTH_ADDR", "").strip()
    if not addr:
        raise ConfigError("HEARTH_ADDR is not set: plugins are started by the Hearth broker "
                          "(hearth run), which sets HEARTH_ADDR, HEARTH_PLUGIN and passes the "
                          "token in HEARTH_TOKEN_FD (for a manual run set HEARTH_ADDR and "
                          "HEARTH_TOKEN, e.g. eval \"$(hearth plugins attach-token NAME)\")")
    return addr, token()

"""What a plugin can reach (tests/integration/security.rs): each tool tries one thing
and reports "ok: …" or "denied: <error>" instead of failing, so one call shows one fact.
Tool names carry the plugin's name (`<name>_read`, …) so several probes can run at once."""

import os
import socket

from hearth_plugin import Plugin

NAME = os.environ.get("HEARTH_PLUGIN", "probe")


def attempt(fn):
    try:
        return "ok: " + str(fn())
    except Exception as e:  # the point is to report any refusal
        return f"denied: {type(e).__name__}: {e}"


def read(path):
    with open(path, "rb") as f:
        return f.read(200).decode("utf-8", "replace")


def write(path):
    with open(path, "w") as f:
        f.write("probe")
    return path


def connect(port):
    with socket.create_connection(("127.0.0.1", int(port)), timeout=3):
        return f"connected to {port}"


def kill(pid):
    os.kill(int(pid), 0)
    return f"signalled {pid}"


def env(_args):
    mask = os.umask(0)
    os.umask(mask)
    return {"keys": sorted(os.environ), "tmp": os.environ.get("TMPDIR", ""),
            "data": os.environ.get("HEARTH_PLUGIN_DATA", ""), "pid": os.getpid(), "umask": mask}


ACTIONS = {"read": read, "write": write, "connect": connect, "kill": kill}


class Probe(Plugin):
    def name(self):
        return NAME

    def start(self, sdk):
        for action, fn in ACTIONS.items():
            sdk.register_tool(f"{NAME}_{action}", {
                "description": f"probe: {action}",
                "parameters": {"type": "object", "properties": {"arg": {"type": "string"}},
                               "required": ["arg"]},
            }, lambda args, fn=fn: attempt(lambda: fn(args["arg"])))
        sdk.register_tool(f"{NAME}_env", {"description": "probe: the environment",
                                          "parameters": {"type": "object"}}, env)

"""Python test plugin for the broker's integration tests and benchmarks.

Tools are prefixed with HEARTH_TOOL_PREFIX, else the plugin name (HEARTH_PLUGIN):
`<name>_echo` returns its arguments, `<name>_sleep` sleeps `ms` milliseconds.
HEARTH_FAULT=junk_stdout prints banners and invalid UTF-8 to stdout.
"""
import asyncio
import os
import sys

from hearth_plugin import Plugin

NAME = os.environ.get("HEARTH_PLUGIN", "py")
PREFIX = os.environ.get("HEARTH_TOOL_PREFIX") or NAME
FAULTS = set(filter(None, os.environ.get("HEARTH_FAULT", "").split(",")))


def junk():
    sys.stdout.write("*** banner: python test plugin ***\n")
    sys.stdout.flush()
    sys.stdout.buffer.write(b"\xff\xfe\xc3\x28 binary junk \x80\n")
    sys.stdout.buffer.flush()


if "junk_stdout" in FAULTS:
    junk()


class EchoPlugin(Plugin):
    def name(self):
        return NAME

    def start(self, sdk):
        sdk.register_tool(
            f"{PREFIX}_echo",
            {"description": "Returns its arguments.", "parameters": {"type": "object"}},
            self.echo,
        )
        sdk.register_tool(
            f"{PREFIX}_sleep",
            {
                "description": "Sleeps `ms` milliseconds.",
                "parameters": {
                    "type": "object",
                    "properties": {"ms": {"type": "integer", "minimum": 0}},
                    "required": ["ms"],
                },
            },
            self.sleep,
        )

    async def echo(self, args):
        if "junk_stdout" in FAULTS:
            junk()
        return args

    async def sleep(self, args):
        try:
            await asyncio.sleep(args["ms"] / 1000)
        except asyncio.CancelledError:
            print(f"{PREFIX}_sleep: cancelled after Cancel from the broker", flush=True)
            raise
        return f"slept {args['ms']} ms"

    def stop(self):
        pass

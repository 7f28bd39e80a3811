"""Concurrency probe for the broker's tests (tests/integration/concurrency.rs).

P = $HEARTH_PLUGIN. Every call the plugin gets — tool `P_work`, and with
CONC_HOOK=<ms> a post_action stage hook — counts as one call in flight while it runs.

- `P_work {"ms": int}` sleeps `ms` (asyncio, so calls can overlap), then answers
  `P worked <ms> ms`.
- `P_peak {}` answers `{"peak": <most calls in flight at once>, "calls": <calls
  finished>}` (it is not counted itself).
- CONC_HOOK=<ms>: a post_action hook that sleeps `ms` and changes nothing.
"""
import asyncio
import os

from hearth_plugin import Plugin

P = os.environ.get("HEARTH_PLUGIN", "conc")
HOOK_MS = os.environ.get("CONC_HOOK", "")


class Probe(Plugin):
    def __init__(self):
        super().__init__()
        self.now = 0
        self.peak = 0
        self.calls = 0

    def name(self):
        return P

    def start(self, sdk):
        sdk.register_tool(
            f"{P}_work",
            {"description": "Works for `ms` milliseconds.",
             "parameters": {"type": "object", "properties": {"ms": {"type": "integer", "minimum": 0}},
                            "required": ["ms"]}},
            self.work,
        )
        sdk.register_tool(
            f"{P}_peak",
            {"description": "Most calls in flight at once so far.", "parameters": {"type": "object"}},
            self.report,
        )
        if HOOK_MS:
            sdk.register_stage("post_action", self.hook)

    async def counted(self, ms):
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await asyncio.sleep(ms / 1000)
        finally:
            self.now -= 1
            self.calls += 1

    async def work(self, args):
        await self.counted(args["ms"])
        return f"{P} worked {args['ms']} ms"

    async def report(self, args):
        return {"peak": self.peak, "calls": self.calls}

    async def hook(self, ctx):
        await self.counted(int(HOOK_MS))

"""A LinkZone direct-mode tool whose name and `ai.tool` policy come from the
environment, for the broker's policy tests (tests/integration/inject.rs).

LZ_NAME     plugin and tool name (default `policy`)
LZ_POLICY   JSON merged into `ai.tool`, e.g. {"max_calls": 1} or {"chainable": false}
LZ_TRIGGERS JSON list of LinkZone triggers, e.g. [{"type": 1, "pattern": "weather"}]

`execute_tool` sleeps first when `what` is `sleep:<ms>`, then answers `<name> ran #<n> for <user>: <args as JSON>` (n counts this
process's calls). `handle_event` replies `<name> got <params as JSON> from <user>` and,
when the message contains "twice", a second reply `<name> again`.
"""
import json
import os
import time

from hearth_plugin import Plugin

NAME = os.environ.get("LZ_NAME", "policy")

metadata = {
    "name": NAME,
    "triggers": json.loads(os.environ.get("LZ_TRIGGERS", "[]")),
    "ai": {
        "tool": {
            "parameters": [
                {"name": "what", "type": "string", "description": "anything", "required": False},
            ],
            "usage": f"{NAME}: a test tool",
            "when_to_use": "in tests",
            **json.loads(os.environ.get("LZ_POLICY", "{}")),
        }
    },
}


class PolicyPlugin(Plugin):
    calls = 0

    def execute_tool(self, sender, args):
        what = str(args.get("what", ""))
        if what.startswith("sleep:"):
            time.sleep(int(what[len("sleep:"):]) / 1000)
        PolicyPlugin.calls += 1
        return {
            "success": True,
            "content": f"{NAME} ran #{PolicyPlugin.calls} for {sender.user_id}: {json.dumps(args, sort_keys=True)}",
        }

    def handle_event(self, sender):
        params = []
        while sender.param(len(params)) is not None:
            params.append(sender.param(len(params)))
        sender.reply(f"{NAME} got {json.dumps(params, ensure_ascii=False)} from {sender.user_id}")
        if "twice" in sender.message:
            sender.reply(f"{NAME} again")

"""A HomeAgent-style plugin that makes host calls in start() (as the Python README's
setting definitions example does): registers a def, reads the setting, and serves a
tool answering with what start() read. Tests: a process attached by hand
(`hearth plugins attach-token`) makes these calls before its session opens."""

from hearth_plugin import Plugin


class StartHost(Plugin):
    def name(self):
        return "sh"

    def start(self, sdk):
        settings = sdk.settings()
        settings.register_def({"key": "greeting", "type": "string", "default": "hello"})
        greeting = settings.get("greeting")
        sdk.register_tool(
            "sh_greeting",
            {"description": "What start() read", "parameters": {"type": "object", "properties": {}}},
            lambda args: f"start() read {greeting!r}",
        )

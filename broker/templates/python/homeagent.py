"""__NAME__: a Hearth plugin in Python (HomeAgent style: `start(sdk)` + `register_tool`).

Serve it with the broker (`hearth dev .`) or by hand: `python -m hearth_plugin run main.py`.
"""

from hearth_plugin import Plugin


class GreeterPlugin(Plugin):
    def name(self):
        return "__NAME__"

    def start(self, sdk):
        sdk.register_tool("__TOOL__", {
            "description": "Greet someone by name",
            "parameters": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "Who to greet"},
                    "excited": {"type": "boolean", "description": "End with an exclamation mark"},
                },
                "required": ["name"],
            },
        }, self.greet)

    def greet(self, args):
        mark = "!" if args.get("excited") else "."
        return f"Hello, {args['name']}{mark}"

    def stop(self):
        pass

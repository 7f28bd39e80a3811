"""__NAME__: a Hearth plugin in Python (LinkZone style: `metadata` + `execute_tool`).

Serve it with the broker (`hearth dev .`) or by hand: `python -m hearth_plugin run main.py`.
"""

from hearth_plugin import Plugin

metadata = {
    "name": "__NAME__",
    "version": "0.1.0",
    "description": "__NAME__: says hello",
    "ai": {
        "tool": {
            "parameters": [
                {"name": "name", "type": "string", "description": "Who to greet", "required": True},
                {"name": "excited", "type": "boolean", "description": "End with an exclamation mark"},
            ],
            "usage": "Greet someone by name",
            "when_to_use": "When the user asks to greet someone",
        }
    },
}


class GreeterPlugin(Plugin):
    def execute_tool(self, sender, args):
        name = args["name"]
        mark = "!" if args.get("excited") else "."
        return {"success": True, "content": f"Hello, {name}{mark}"}

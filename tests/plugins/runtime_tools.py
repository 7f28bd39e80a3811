"""Test plugin that registers and unregisters tools while it runs.

`rt_add {"name": N}` registers tool N (answering "N called with …");
`rt_remove {"name": N}` unregisters it.
"""
from hearth_plugin import Plugin


class RuntimeTools(Plugin):
    def name(self):
        return "rt"

    def start(self, sdk):
        self.sdk = sdk
        name_schema = {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        }
        sdk.register_tool("rt_add", {"description": "Register a tool now.", "parameters": name_schema}, self.add)
        sdk.register_tool("rt_remove", {"description": "Unregister a tool.", "parameters": name_schema}, self.remove)

    def add(self, args):
        name = args["name"]
        self.sdk.register_tool(
            name,
            {"description": f"Added at run time: {name}", "parameters": {"type": "object"}},
            lambda a: f"{name} called with {a}",
        )
        return f"registered {name}"

    def remove(self, args):
        self.sdk.unregister_tool(args["name"])
        return f"unregistered {args['name']}"

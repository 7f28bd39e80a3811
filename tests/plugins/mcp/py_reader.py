"""Hearth Python plugin for tests/integration/mcp_host_service.rs: reads the resources and
prompts of an MCP server that runs as a Hearth plugin, through the Mcp host service
(`sdk.mcp()`, capability `mcp` in its plugin.json). node_reader.js is the Node twin.

Tools, prefixed with the plugin's name (HEARTH_PLUGIN):
- `<name>_read {server, uri}` -> the text of the resource's first contents item (a plain
  `def`: the blocking call path);
- `<name>_greet {server, name}` -> the text of prompt `greet` filled with `name` (async);
- `<name>_listing {server}` -> {"resources": [uri…], "templates": n, "prompts": [name…]}.
A failed host call fails the tool with the HostError's text.
"""
import os

from hearth_plugin import Plugin

NAME = os.environ.get("HEARTH_PLUGIN", "pyreader")
OBJ = {"type": "object"}


class Reader(Plugin):
    def name(self):
        return NAME

    def start(self, sdk):
        self.sdk = sdk
        sdk.register_tool(f"{NAME}_read", {"description": "Reads an MCP resource.", "parameters": OBJ}, self.read)
        sdk.register_tool(f"{NAME}_greet", {"description": "Fills the MCP prompt greet.", "parameters": OBJ},
                          self.greet)
        sdk.register_tool(f"{NAME}_listing", {"description": "Lists an MCP server's resources and prompts.",
                                              "parameters": OBJ}, self.listing)

    def read(self, args):
        contents = self.sdk.mcp().read_resource(args["server"], args["uri"])
        return contents[0]["text"]

    async def greet(self, args):
        prompt = await self.sdk.mcp().get_prompt(args["server"], "greet", {"name": args["name"]})
        return prompt["messages"][0]["content"]["text"]

    async def listing(self, args):
        mcp = self.sdk.mcp()
        server = args["server"]
        return {"resources": [r["uri"] for r in await mcp.resources(server)],
                "templates": len(await mcp.resource_templates(server)),
                "prompts": [p["name"] for p in await mcp.prompts(server)]}

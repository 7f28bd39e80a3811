// Hearth Node plugin for tests/integration/mcp_host_service.rs: reads the resources and
// prompts of an MCP server that runs as a Hearth plugin, through the Mcp host service
// (`sdk.mcp()`, capability `mcp` in its plugin.json). The same tools as py_reader.py,
// prefixed with the plugin's name (HEARTH_PLUGIN): `<name>_read {server, uri}`,
// `<name>_greet {server, name}`, `<name>_listing {server}`. A failed host call fails the
// tool with the HostError's text.
const { Plugin } = require('hearth-plugin');

const NAME = process.env.HEARTH_PLUGIN || 'ndreader';
const OBJ = { type: 'object' };

class Reader extends Plugin {
  name() {
    return NAME;
  }

  start(sdk) {
    sdk.registerTool(`${NAME}_read`, { description: 'Reads an MCP resource.', parameters: OBJ },
      async ({ server, uri }) => (await sdk.mcp().readResource(server, uri))[0].text);
    sdk.registerTool(`${NAME}_greet`, { description: 'Fills the MCP prompt greet.', parameters: OBJ },
      async ({ server, name }) => (await sdk.mcp().getPrompt(server, 'greet', { name })).messages[0].content.text);
    sdk.registerTool(`${NAME}_listing`, { description: "Lists an MCP server's resources and prompts.", parameters: OBJ },
      async ({ server }) => {
        const mcp = sdk.mcp();
        return {
          resources: (await mcp.resources(server)).map((r) => r.uri),
          templates: (await mcp.resourceTemplates(server)).length,
          prompts: (await mcp.prompts(server)).map((p) => p.name),
        };
      });
  }
}

module.exports = Reader;

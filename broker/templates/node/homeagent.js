// __NAME__: a Hearth plugin in Node (HomeAgent style: `start(sdk)` + `registerTool`).
// Serve it with the broker (`hearth dev .`); `npm test` runs its tests without a broker.
const { Plugin } = require('hearth-plugin');

class GreeterPlugin extends Plugin {
    name() {
        return '__NAME__';
    }

    start(sdk) {
        sdk.registerTool('__TOOL__', {
            description: 'Greet someone by name',
            parameters: {
                type: 'object',
                properties: {
                    name: { type: 'string', description: 'Who to greet' },
                    excited: { type: 'boolean', description: 'End with an exclamation mark' },
                },
                required: ['name'],
            },
        }, async (args) => `Hello, ${args.name}${args.excited ? '!' : '.'}`);
    }

    stop() {}
}

module.exports = GreeterPlugin;

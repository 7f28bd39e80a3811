// __NAME__: a Hearth plugin in Node (LinkZone style: `metadata` on the class + `executeTool`).
// Serve it with the broker (`hearth dev .`); `npm test` runs its tests without a broker.
const { Plugin } = require('hearth-plugin');

class GreeterPlugin extends Plugin {
    async executeTool(sender, args) {
        const mark = args.excited ? '!' : '.';
        return { success: true, content: `Hello, ${args.name}${mark}` };
    }
}

GreeterPlugin.metadata = {
    name: '__NAME__',
    version: '0.1.0',
    description: '__NAME__: says hello',
    ai: {
        tool: {
            parameters: [
                { name: 'name', type: 'string', description: 'Who to greet', required: true },
                { name: 'excited', type: 'boolean', description: 'End with an exclamation mark' },
            ],
            usage: 'Greet someone by name',
            when_to_use: 'When the user asks to greet someone',
        },
    },
};

module.exports = GreeterPlugin;

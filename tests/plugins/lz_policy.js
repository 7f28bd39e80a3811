// A LinkZone direct-mode tool whose name and `ai.tool` policy come from the
// environment — the Node twin of tests/plugins/lz_policy.py, for the broker's policy
// tests (tests/integration/inject.rs). Same env (LZ_NAME, LZ_POLICY, LZ_TRIGGERS), same
// answers: `<name> ran #<n> for <user>: <args as JSON>`, and for events
// `<name> got <params as JSON> from <user>` (plus `<name> again` when the message
// contains "twice").
const { Plugin } = require('hearth-plugin');

const NAME = process.env.LZ_NAME || 'policy';

/** JSON.stringify with sorted keys, like Python's json.dumps(sort_keys=True). */
function sorted(value) {
    if (Array.isArray(value)) return `[${value.map(sorted).join(', ')}]`;
    if (value && typeof value === 'object') {
        return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}: ${sorted(value[k])}`).join(', ')}}`;
    }
    return JSON.stringify(value);
}

class PolicyPlugin extends Plugin {
    async executeTool(sender, args) {
        PolicyPlugin.calls += 1;
        return { success: true, content: `${NAME} ran #${PolicyPlugin.calls} for ${sender.userId}: ${sorted(args)}` };
    }

    async handleEvent(sender) {
        const params = [];
        while ((await sender.param(params.length)) != null) params.push(await sender.param(params.length));
        await sender.reply(`${NAME} got ${JSON.stringify(params)} from ${sender.userId}`);
        if (sender.message.includes('twice')) await sender.reply(`${NAME} again`);
    }
}
PolicyPlugin.calls = 0;

PolicyPlugin.metadata = {
    name: NAME,
    triggers: JSON.parse(process.env.LZ_TRIGGERS || '[]'),
    ai: {
        tool: {
            parameters: [{ name: 'what', type: 'string', description: 'anything', required: false }],
            usage: `${NAME}: a test tool`,
            when_to_use: 'in tests',
            ...JSON.parse(process.env.LZ_POLICY || '{}'),
        },
    },
};

module.exports = PolicyPlugin;

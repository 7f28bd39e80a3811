// Tests of __NAME__, in process with hearth-plugin/testing: no broker needed.
const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const { load } = require('hearth-plugin/testing');

const MAIN = path.join(__dirname, '..', 'index.js');

test('greets by name', async (t) => {
    const plugin = await load(MAIN);
    t.after(() => plugin.close());
    const result = await plugin.call('__TOOL__', { name: 'Ann' });
    assert.ok(result.success, result.error);
    assert.strictEqual(result.content, 'Hello, Ann.');
    assert.strictEqual((await plugin.call('__TOOL__', { name: 'Ann', excited: true })).content, 'Hello, Ann!');
});

test('arguments are checked against the schema first', async (t) => {
    const plugin = await load(MAIN);
    t.after(() => plugin.close());
    await assert.rejects(plugin.call('__TOOL__', {}), { name: 'InvalidArgumentsError', message: /name/ });
});

// The ES module entry of hearth-plugin/testing has the same types.
import testing, { load, type ToolCallResult } from 'hearth-plugin/testing';

const t = await load('./index.js');
const r: ToolCallResult = await t.call('x');
const same: typeof load = testing.load;
void r; void same;
await t.close();

'use strict';

/**
 * hearth-plugin/testing: test a plugin without a broker.
 *
 *   const { load } = require('hearth-plugin/testing');
 *   const t = await load(require.resolve('./index.js'), { settings: { city: 'Paris' } });
 *   const r = await t.call('weather', { city: 'Paris' });   // {success, content, data, error, progress}
 *   await t.close();
 *
 * `load()` runs the plugin's real session against an in-process fake broker
 * (./harness.js): arguments are checked against each tool's JSON Schema like the broker
 * does, stage hooks go through the permission matrix, trigger events collect
 * `sender.reply` texts, and the host services (settings, memory, documents,
 * knowledge, LLM sources, input, MCP servers) are in-memory fakes with the broker's semantics
 * (./host). `FakeBroker` (./broker.js) is the wire-level layer underneath, for tests
 * that drive a plugin process message by message.
 */

const { load, PluginHarness, SettingsView } = require('./harness');
const { FakeBroker, BrokerSession, PluginProcess, NODE_BOOTSTRAP } = require('./broker');
const { FakeHost, McpStore, DEFAULT_CAPABILITIES, CAPABILITIES } = require('./host');
const { SECRET_MASK } = require('./host/settings');
const { HarnessError, InvalidArgumentsError } = require('./errors');
const schema = require('./schema');

/**
 * Checks arguments against a tool's JSON Schema as the broker does before a call:
 * null when they are valid, else `{argument, message}` with the broker's text
 * ("argument `city`: 12 is not of type \"string\"").
 * @param {object} toolSchema
 * @param {unknown} args
 * @returns {{argument: string, message: string} | null}
 */
function validateArguments(toolSchema, args) {
  if (!schema.isObject(args)) return { argument: '', message: `arguments must be a JSON object, got ${JSON.stringify(args)}` };
  const v = schema.firstViolation(toolSchema, args);
  return v ? { argument: v.path.join('.'), message: schema.violationText(v) } : null;
}

module.exports = {
  load,
  PluginHarness,
  SettingsView,
  FakeBroker,
  BrokerSession,
  PluginProcess,
  FakeHost,
  McpStore,
  HarnessError,
  InvalidArgumentsError,
  validateArguments,
  NODE_BOOTSTRAP,
  DEFAULT_CAPABILITIES,
  CAPABILITIES,
  SECRET_MASK,
};

'use strict';

/**
 * Clients of the broker's host services (Settings, Memory, TextMemory, DocMemory,
 * Knowledge, Llm, Input, Mcp): promise-returning methods named like the generated service
 * definitions (camelCase: `settings.get`, `settings.getCore`, `input.injectText`, …),
 * sharing the session's channel and carrying the plugin's `x-hearth-token`.
 * Requests and responses are the generated message shapes (`{key}` → `{valueJson}`).
 * Failures reject with a `HostError` (lib/hosterror.js). The typed, seed-named APIs
 * (`sdk.settings().get(key)` → value) are in lib/apis.js.
 */

const grpc = require('@grpc/grpc-js');
const services = require('../gen/services');
const { HostError } = require('./hosterror');

const HOST_SERVICES = {
  settings: 'SettingsService',
  memory: 'MemoryService',
  textMemory: 'TextMemoryService',
  docMemory: 'DocMemoryService',
  knowledge: 'KnowledgeService',
  llm: 'LlmService',
  input: 'InputService',
  mcp: 'McpService',
};

/**
 * @param {grpc.Client} base the session's client (its channel is shared)
 * @param {string} token
 * @param {string} plugin
 * @returns {any} `{plugin, settings, memory, textMemory, docMemory, knowledge, llm, input, mcp}`
 */
function createHost(base, token, plugin) {
  const channel = base.getChannel();
  /** @type {Record<string, any>} */
  const host = { plugin };
  for (const [prop, svcName] of Object.entries(HOST_SERVICES)) {
    let api;
    Object.defineProperty(host, prop, {
      enumerable: true,
      get() {
        if (api) return api;
        const def = /** @type {any} */ (services)[svcName];
        const Ctor = grpc.makeGenericClientConstructor(def, svcName);
        const client = new Ctor('unused', grpc.credentials.createInsecure(), { channelOverride: channel });
        api = {};
        for (const method of Object.keys(def)) {
          api[method] = (/** @type {any} */ req = {}, /** @type {{timeoutMs?: number}} */ opts = {}) => new Promise((resolve, reject) => {
            const md = new grpc.Metadata();
            md.set('x-hearth-token', token);
            const callOpts = opts.timeoutMs ? { deadline: Date.now() + opts.timeoutMs } : {};
            client[method](req, md, callOpts, (/** @type {any} */ err, /** @type {any} */ res) => {
              if (err) {
                const code = grpc.status[err.code] || String(err.code);
                const details = err.details || err.message;
                reject(new HostError(`plugin ${plugin}: ${prop}.${method}: ${code}: ${details}`, { code, grpcCode: err.code, details, method: `${prop}.${method}` }));
              } else resolve(res);
            });
          });
        }
        return api;
      },
    });
  }
  return host;
}

module.exports = { createHost, HOST_SERVICES, HostError };

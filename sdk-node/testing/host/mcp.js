'use strict';

/**
 * The Mcp host service's fake (broker/src/mcp/host.rs `request`): MCP servers (plugins
 * with `"runtime": "mcp"`) whose resources and prompts a plugin reads through
 * `sdk.mcp()`, with canned answers and the broker's errors.
 */

const { HarnessError } = require('../errors');

/** The methods the broker passes on to an MCP server (READ_METHODS). */
const MCP_METHODS = Object.freeze(['resources/list', 'resources/templates/list', 'resources/read', 'prompts/list', 'prompts/get']);

/** @param {unknown} v */
const clone = (v) => (v === undefined ? v : JSON.parse(JSON.stringify(v)));

/**
 * One fake MCP server.
 * @typedef {{connected: boolean, resources: any[], contents: Map<string, any[]>, prompts: any[], promptResults: Map<string, any>, results: Map<string, any>}} FakeMcpServer
 */

/**
 * MCP servers with canned answers. Seed one with `addResource` / `addPrompt` (what
 * `resources/list`, `resources/read`, `prompts/list` and `prompts/get` answer), or give
 * any method's result outright with `setResult` (it takes precedence). As the broker:
 * NOT_FOUND for a server never added, INVALID_ARGUMENT for another method or params
 * that are not an object, UNAVAILABLE after `setConnected(server, false)`,
 * FAILED_PRECONDITION (the server's error) for an unknown resource or prompt.
 * `requests` lists what plugins sent.
 */
class McpStore {
  constructor() {
    /** @type {Map<string, FakeMcpServer>} */
    this.servers = new Map();
    /** @type {Array<{server: string, method: string, params: Record<string, any>}>} requests plugins sent, in order */
    this.requests = [];
  }

  /**
   * Declares MCP plugin `server` (connected, nothing listed); the other seeding methods
   * declare it too.
   * @param {string} server
   * @returns {FakeMcpServer}
   */
  addServer(server) {
    let s = this.servers.get(server);
    if (!s) {
      s = { connected: true, resources: [], contents: new Map(), prompts: [], promptResults: new Map(), results: new Map() };
      this.servers.set(server, s);
    }
    return s;
  }

  /** A disconnected server answers UNAVAILABLE. @param {string} server @param {boolean} connected */
  setConnected(server, connected) {
    this.addServer(server).connected = connected;
  }

  /**
   * A text resource: listed by `resources/list`, `text` read by `resources/read`.
   * @param {string} server
   * @param {string} uri
   * @param {string} text
   * @param {{name?: string, mimeType?: string, description?: string}} [opts]
   */
  addResource(server, uri, text, opts = {}) {
    const s = this.addServer(server);
    const mimeType = opts.mimeType || 'text/plain';
    /** @type {Record<string, unknown>} */
    const entry = { uri, name: opts.name || uri, mimeType };
    if (opts.description) entry.description = opts.description;
    s.resources = s.resources.filter((r) => r.uri !== uri).concat([entry]);
    s.contents.set(uri, [{ uri, mimeType, text }]);
  }

  /**
   * A prompt: listed by `prompts/list`, answered by `prompts/get`. `result` is the text
   * of one user message, an array of MCP messages, a whole result object, or a function
   * of the arguments returning one of these.
   * @param {string} server
   * @param {string} name
   * @param {any} result
   * @param {{description?: string, arguments?: Array<string | Record<string, unknown>>}} [opts]
   */
  addPrompt(server, name, result, opts = {}) {
    const s = this.addServer(server);
    /** @type {Record<string, unknown>} */
    const entry = { name };
    if (opts.description) entry.description = opts.description;
    const args = (opts.arguments || []).map((a) => (typeof a === 'string' ? { name: a } : { ...a }));
    if (args.length) entry.arguments = args;
    s.prompts = s.prompts.filter((p) => p.name !== name).concat([entry]);
    s.promptResults.set(name, result);
  }

  /**
   * Answers `method` of `server` with `result` (an object, or a function of the params)
   * instead of the seeded resources and prompts; `undefined` removes it.
   * @param {string} server
   * @param {string} method
   * @param {any} result
   */
  setResult(server, method, result) {
    if (!MCP_METHODS.includes(method)) throw new TypeError(`McpStore.setResult: \`${method}\` is not one of ${MCP_METHODS.join(', ')}`);
    const s = this.addServer(server);
    if (result === undefined) s.results.delete(method);
    else s.results.set(method, result);
  }

  /**
   * Answers one `Mcp.Request` as the broker would; throws a HarnessError whose code is
   * the gRPC status name.
   * @param {string} server
   * @param {string} method
   * @param {string} paramsJson
   * @returns {any} the result object
   */
  request(server, method, paramsJson) {
    const s = this.servers.get(server);
    if (!s) throw new HarnessError('NOT_FOUND', `no MCP plugin named ${server}`);
    /** @type {any} */
    let params = {};
    if (paramsJson && paramsJson.trim()) {
      try {
        params = JSON.parse(paramsJson);
      } catch (e) {
        throw new HarnessError('INVALID_ARGUMENT', `params are not JSON: ${/** @type {Error} */ (e).message}`);
      }
    }
    if (!MCP_METHODS.includes(method)) throw new HarnessError('INVALID_ARGUMENT', `\`${method}\` is not one of ${MCP_METHODS.join(', ')}`);
    if (params === null || typeof params !== 'object' || Array.isArray(params)) {
      throw new HarnessError('INVALID_ARGUMENT', `params of ${method} must be a JSON object, got ${JSON.stringify(params)}`);
    }
    this.requests.push({ server, method, params: clone(params) });
    if (!s.connected) throw new HarnessError('UNAVAILABLE', `MCP server ${server} is not connected`);
    const canned = s.results.get(method);
    if (canned !== undefined) return clone(typeof canned === 'function' ? canned(clone(params)) : canned);
    const failed = (/** @type {string} */ why) => new HarnessError('FAILED_PRECONDITION', `MCP server ${server}: ${method}: ${why}`);
    switch (method) {
      case 'resources/list': return { resources: clone(s.resources) };
      case 'resources/templates/list': return { resourceTemplates: [] };
      case 'prompts/list': return { prompts: clone(s.prompts) };
      case 'resources/read': {
        const contents = s.contents.get(params.uri);
        if (!contents) throw failed(`Unknown resource: ${params.uri}`);
        return { contents: clone(contents) };
      }
      default: {
        if (!s.promptResults.has(params.name)) throw failed(`Unknown prompt: ${params.name}`);
        let result = s.promptResults.get(params.name);
        if (typeof result === 'function') result = result({ ...(params.arguments || {}) });
        if (typeof result === 'string') result = [{ role: 'user', content: { type: 'text', text: result } }];
        if (Array.isArray(result)) {
          const entry = s.prompts.find((p) => p.name === params.name);
          result = entry && entry.description ? { description: entry.description, messages: result } : { messages: result };
        }
        return clone(result);
      }
    }
  }
}

module.exports = { McpStore, MCP_METHODS };

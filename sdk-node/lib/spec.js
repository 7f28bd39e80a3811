'use strict';

/**
 * Conversion of plugin declarations (LinkZone `metadata`, HomeAgent `ToolDef`) into the
 * wire `Register` pieces. Field names are the generated classes' camelCase
 * (`parameters_json` → `parametersJson`).
 */

const TRIGGER_TYPES = { command: 0, keyword: 1, regex: 2, segment: 3, event: 4 };

/** Error in what a plugin declares; names the plugin and the offending item. */
class DeclarationError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'DeclarationError';
  }
}

/**
 * The LinkZone metadata of a plugin instance: `static metadata` on its class, or an
 * own `metadata` property. `undefined` when it has none.
 * @param {any} instance
 * @returns {import('../index').LinkZoneMetadata | undefined}
 */
function linkZoneMetadata(instance) {
  const md = (instance && instance.constructor && instance.constructor.metadata) || (instance && instance.metadata);
  return md && typeof md === 'object' ? md : undefined;
}

/**
 * @param {unknown} v
 * @param {string} what
 * @returns {string}
 */
function optString(v, what) {
  if (v == null) return '';
  if (typeof v !== 'string') throw new DeclarationError(`${what}: expected a string, got ${typeof v}`);
  return v;
}

/**
 * @param {unknown} v
 * @param {string} what
 * @returns {number}
 */
function optNumber(v, what) {
  if (v == null) return 0;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw new DeclarationError(`${what}: expected a non-negative number, got ${JSON.stringify(v)}`);
  return v;
}

/**
 * LinkZone `ai.tool` → wire `AiTool` (default/enum as JSON text, continue →
 * continueConversation, cooldown → cooldownS, timeout → timeoutS).
 * @param {any} tool the `ai.tool` object
 * @param {string} plugin plugin name, for errors
 * @returns {object}
 */
function aiTool(tool, plugin) {
  const where = `plugin ${plugin}: ai.tool`;
  if (!tool || typeof tool !== 'object') throw new DeclarationError(`${where}: expected an object`);
  const params = tool.parameters == null ? [] : tool.parameters;
  if (!Array.isArray(params)) throw new DeclarationError(`${where}.parameters: expected an array`);
  /** @type {any} */
  const out = {
    parameters: params.map((p, i) => {
      const at = `${where}.parameters[${i}]`;
      if (!p || typeof p !== 'object') throw new DeclarationError(`${at}: expected an object`);
      if (typeof p.name !== 'string' || !p.name) throw new DeclarationError(`${at}: missing name`);
      const pat = `${where} parameter \`${p.name}\``;
      if (p.enum != null && !Array.isArray(p.enum)) throw new DeclarationError(`${pat}: enum must be an array`);
      return {
        name: p.name,
        type: optString(p.type, `${pat}: type`) || 'string',
        description: optString(p.description, `${pat}: description`),
        required: p.required === true,
        defaultJson: p.default === undefined ? '' : JSON.stringify(p.default),
        enumJson: p.enum == null ? '' : JSON.stringify(p.enum),
        example: p.example == null ? '' : typeof p.example === 'string' ? p.example : JSON.stringify(p.example),
      };
    }),
    usage: optString(tool.usage, `${where}.usage`),
    whenToUse: optString(tool.when_to_use, `${where}.when_to_use`),
    continueConversation: tool.continue === true,
    maxCalls: Math.floor(optNumber(tool.max_calls, `${where}.max_calls`)),
    confirm: tool.confirm === true,
    cooldownS: optNumber(tool.cooldown, `${where}.cooldown`),
    timeoutS: optNumber(tool.timeout, `${where}.timeout`),
  };
  if (tool.chainable != null) out.chainable = tool.chainable !== false;
  return out;
}

/**
 * LinkZone `ai.inject` → wire `InjectSpec`.
 * @param {any} inject
 * @param {string} plugin
 * @returns {object}
 */
function injectSpec(inject, plugin) {
  const where = `plugin ${plugin}: ai.inject`;
  if (!inject || typeof inject !== 'object') throw new DeclarationError(`${where}: expected an object`);
  /** @type {Record<string, string>} */
  const args = {};
  if (inject.args != null) {
    if (typeof inject.args !== 'object') throw new DeclarationError(`${where}.args: expected an object of name → description`);
    for (const [k, v] of Object.entries(inject.args)) args[k] = typeof v === 'string' ? v : JSON.stringify(v);
  }
  return { usage: optString(inject.usage, `${where}.usage`), format: optString(inject.format, `${where}.format`), args };
}

/**
 * LinkZone `triggers` → wire `Trigger`s; `type` is 0..4 or its name ("command", …).
 * @param {any} triggers
 * @param {string} plugin
 * @returns {object[]}
 */
function triggerSpecs(triggers, plugin) {
  if (triggers == null) return [];
  if (!Array.isArray(triggers)) throw new DeclarationError(`plugin ${plugin}: triggers: expected an array`);
  return triggers.map((t, i) => {
    const at = `plugin ${plugin}: triggers[${i}]`;
    if (!t || typeof t !== 'object') throw new DeclarationError(`${at}: expected {type, pattern}`);
    const type = typeof t.type === 'string' ? TRIGGER_TYPES[/** @type {keyof TRIGGER_TYPES} */ (t.type.toLowerCase())] : t.type;
    if (!Number.isInteger(type) || type < 0 || type > 4) throw new DeclarationError(`${at}: type ${JSON.stringify(t.type)} is not 0..4 or command|keyword|regex|segment|event`);
    if (typeof t.pattern !== 'string') throw new DeclarationError(`${at}: pattern must be a string`);
    return { type, pattern: t.pattern };
  });
}

/**
 * HomeAgent `registerTool(name, def, handler)` → wire `ToolSpec` (JSON Schema as text).
 * @param {string} name
 * @param {any} def `{name?, description, parameters, serial?}`
 * @param {string} plugin
 * @returns {object}
 */
function homeAgentTool(name, def, plugin) {
  const where = `plugin ${plugin}: tool ${name}`;
  if (def != null && typeof def !== 'object') throw new DeclarationError(`${where}: def must be an object {description, parameters}`);
  const d = def || {};
  const schema = d.parameters == null ? { type: 'object', properties: {} } : d.parameters;
  if (typeof schema !== 'object' || Array.isArray(schema)) throw new DeclarationError(`${where}: parameters must be a JSON Schema object`);
  return {
    name,
    description: optString(d.description, `${where}: description`),
    parametersJson: JSON.stringify(schema),
    serial: d.serial === true,
  };
}

/**
 * HomeAgent `ConfigDef` → wire `ConfigDef`. Accepts the Go JSON names (`display_name`)
 * and camelCase (`displayName`); `default` travels as JSON text.
 * @param {any} def
 * @param {string} plugin
 * @returns {object}
 */
function configDef(def, plugin) {
  if (!def || typeof def !== 'object') throw new DeclarationError(`plugin ${plugin}: registerDef: expected a ConfigDef object`);
  if (typeof def.key !== 'string' || !def.key) throw new DeclarationError(`plugin ${plugin}: registerDef: missing key`);
  const where = `plugin ${plugin}: config ${def.key}`;
  const type = def.type == null ? 'string' : def.type;
  if (!['string', 'number', 'integer', 'boolean'].includes(type)) throw new DeclarationError(`${where}: type must be string, number, integer or boolean, got ${JSON.stringify(type)}`);
  if (def.options != null && !Array.isArray(def.options)) throw new DeclarationError(`${where}: options must be an array`);
  /** @type {any} */
  const w = {
    key: def.key,
    defaultJson: def.default === undefined ? '' : JSON.stringify(def.default),
    type,
    displayName: optString(def.displayName != null ? def.displayName : def.display_name, `${where}: display_name`),
    description: optString(def.description, `${where}: description`),
    category: optString(def.category, `${where}: category`),
    options: (def.options || []).map(String),
    required: def.required === true,
    secret: def.secret === true,
  };
  for (const k of ['min', 'max', 'step']) {
    if (def[k] != null) {
      if (typeof def[k] !== 'number') throw new DeclarationError(`${where}: ${k} must be a number`);
      w[k] = def[k];
    }
  }
  return w;
}

module.exports = { DeclarationError, configDef, linkZoneMetadata, aiTool, injectSpec, triggerSpecs, homeAgentTool, TRIGGER_TYPES };

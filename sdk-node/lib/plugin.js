'use strict';

/**
 * Base class of LinkZone-style plugins (and optionally HomeAgent-style ones).
 *
 * LinkZone style: subclass it, set `static metadata = {name, triggers, ai: {tool, inject}}`
 * (or `X.metadata = {...}`), implement `async executeTool(sender, args, ctx)` and/or
 * `async handleEvent(sender)`. HomeAgent style: implement `name()`, `start(sdk)` (calling
 * `sdk.registerTool(name, def, handler)`) and `stop()`; extending this class is optional.
 */
class Plugin {
  /**
   * LinkZone direct-call mode (`ai.tool`): runs one call of the tool named `metadata.name`.
   * @param {import('../index').Sender} _sender who the call is for
   * @param {Record<string, unknown>} _args arguments object (validated by the broker)
   * @param {import('../index').CallContext} _ctx `signal` (aborted on Cancel), `callId`, `tool`, `progress()`
   * @returns {Promise<import('../index').LinkZoneResult | unknown>}
   */
  async executeTool(_sender, _args, _ctx) {
    throw new Error(`plugin ${pluginLabel(this)} has ai.tool metadata but does not implement executeTool`);
  }

  /**
   * HomeAgent-style registration hook; the default does nothing. Called once, before
   * `Register` is sent, with the SDK object (`sdk.registerTool(name, def, handler)`).
   * @param {import('../index').HomeAgentSdk} _sdk
   * @returns {void | Promise<void>}
   */
  start(_sdk) {}

  /**
   * Called on `Shutdown` (and, best effort, when the broker goes away); may be async.
   * @returns {void | Promise<void>}
   */
  stop() {}
}

// Test hooks for fault injection (tests/plugins/stress.js; README "Test hooks"): real
// plugins leave them unset, and then the session is exactly the normal one. Either may
// be an instance property or a static property of the class (also without this base class).
//   hearthProtocolVersion: string sent as Hello.protocol_version instead of the SDK's.
//   hearthAfterHello: () => void | number | Promise<…>, run once Hello is written and
//     before Register: undefined → register; an integer → end the session with that exit
//     code without Register; never settling → never register.

/**
 * The name of a plugin instance: LinkZone `metadata.name`, HomeAgent `name()` (or a
 * `name` string), else `fallback`, else its class name.
 * @param {any} p
 * @param {string} [fallback]
 * @returns {string}
 */
function pluginLabel(p, fallback) {
  const md = p && (p.constructor && p.constructor.metadata || p.metadata);
  if (md && typeof md.name === 'string' && md.name) return md.name;
  try {
    if (p && typeof p.name === 'function') return String(p.name());
  } catch (_) { /* fall through */ }
  if (p && typeof p.name === 'string' && p.name) return p.name;
  if (fallback) return fallback;
  return (p && p.constructor && p.constructor.name) || 'plugin';
}

module.exports = { Plugin, pluginLabel };

'use strict';

/**
 * Errors of `hearth-plugin/testing`. One class, {@link HarnessError}, whose `code` says
 * what went wrong, and {@link InvalidArgumentsError} for arguments that fail a tool's
 * schema (the case tests assert most). The fake host stores throw `HarnessError`s
 * whose `code` is the gRPC status the broker would answer (`NOT_FOUND`,
 * `INVALID_ARGUMENT`, `PERMISSION_DENIED`); the plugin receives them as `HostError`s
 * with the same code and message.
 */

/** A harness or fake-store failure; `code` names the kind. */
class HarnessError extends Error {
  /**
   * @param {string} code e.g. 'UNKNOWN_TOOL', 'REJECTED', 'NOT_FOUND'
   * @param {string} message names the plugin and the item
   * @param {Record<string, unknown>} [details] extra fields set on the error
   */
  constructor(code, message, details = {}) {
    super(message);
    this.name = 'HarnessError';
    this.code = code;
    Object.assign(this, details);
  }
}

/**
 * Call arguments that violate the tool's JSON Schema (or are not an object); the tool
 * was not called. The message is the broker's: "plugin weather: tool weather: argument
 * `city`: 12 is not of type \"string\"".
 */
class InvalidArgumentsError extends HarnessError {
  /**
   * @param {string} plugin
   * @param {string} tool
   * @param {string} argument the offending argument's path (`city`, `stops.2.name`), '' for the whole object
   * @param {string} reason the broker's text, e.g. "argument `city`: 12 is not of type \"string\""
   */
  constructor(plugin, tool, argument, reason) {
    super('INVALID_ARGUMENTS', `plugin ${plugin}: tool ${tool}: ${reason}`, { plugin, tool, argument, reason });
    this.name = 'InvalidArgumentsError';
  }
}

module.exports = { HarnessError, InvalidArgumentsError };

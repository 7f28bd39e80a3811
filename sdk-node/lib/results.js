'use strict';

/**
 * Maps handler outcomes onto the one wire shape `ToolResult{success, content, data_json, error}`
 * (proto/README.md step 5).
 */

/**
 * Text of a thrown value: `"<Name>: <message>"` for errors, the value as text otherwise.
 * @param {unknown} err
 * @returns {string}
 */
function errorText(err) {
  if (err instanceof Error || (err && typeof err === 'object' && 'message' in err)) {
    const e = /** @type {Error} */ (err);
    return `${e.name || 'Error'}: ${e.message}`;
  }
  return `Error: ${String(err)}`;
}

/**
 * JSON text of a value; `undefined`, functions and symbols become "" (no data).
 * @param {unknown} v
 * @returns {string}
 */
function jsonText(v) {
  if (v === undefined || typeof v === 'function' || typeof v === 'symbol') return '';
  const s = JSON.stringify(v);
  return s === undefined ? '' : s;
}

/**
 * HomeAgent mapping: a string is the content as is; anything else is JSON in both
 * `content` and `data_json`; a map with `isError: true` fails with `error` = its content.
 * @param {unknown} value
 * @returns {{success: boolean, content: string, dataJson: string, error: string}}
 */
function fromValue(value) {
  if (typeof value === 'string') return { success: true, content: value, dataJson: '', error: '' };
  if (value === undefined) return { success: true, content: '', dataJson: '', error: '' };
  if (value && typeof value === 'object' && /** @type {any} */ (value).isError === true) {
    const c = /** @type {any} */ (value).content;
    return { success: false, content: '', dataJson: '', error: typeof c === 'string' ? c : jsonText(c) };
  }
  const json = jsonText(value);
  return { success: true, content: json, dataJson: json, error: '' };
}

/**
 * LinkZone mapping: `{success, content, data?, error?}` goes through as is (`data` as
 * JSON text); any other value falls back to the HomeAgent mapping.
 * @param {unknown} value
 * @returns {{success: boolean, content: string, dataJson: string, error: string}}
 */
function fromLinkZone(value) {
  if (value && typeof value === 'object' && typeof /** @type {any} */ (value).success === 'boolean') {
    const v = /** @type {any} */ (value);
    return {
      success: v.success,
      content: v.content == null ? '' : typeof v.content === 'string' ? v.content : jsonText(v.content),
      dataJson: v.data == null ? '' : jsonText(v.data),
      error: v.error == null ? '' : typeof v.error === 'string' ? v.error : jsonText(v.error),
    };
  }
  return fromValue(value);
}

module.exports = { errorText, jsonText, fromValue, fromLinkZone };

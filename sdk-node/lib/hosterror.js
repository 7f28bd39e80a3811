'use strict';

/**
 * What a failed host-service call rejects with. `code` is the gRPC status name
 * (`'NOT_FOUND'`, `'PERMISSION_DENIED'`, …), `grpcCode` its number, `details` the
 * broker's own message, `method` the call (`settings.getCore`). The message names the
 * plugin, the method, the status and the details.
 */
class HostError extends Error {
  /**
   * @param {string} message
   * @param {{code?: string, grpcCode?: number, details?: string, method?: string}} [info]
   */
  constructor(message, info = {}) {
    super(message);
    this.name = 'HostError';
    this.code = info.code || 'UNKNOWN';
    this.grpcCode = info.grpcCode == null ? -1 : info.grpcCode;
    this.details = info.details == null ? message : info.details;
    this.method = info.method || '';
  }
}

module.exports = { HostError };

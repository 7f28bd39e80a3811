// Types of the ES module entry of hearth-plugin/testing: the same API as the CommonJS entry.
import * as testing from './index.js';

export * from './index.js';
export default testing;

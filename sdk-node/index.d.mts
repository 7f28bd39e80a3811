// Types of the ES module entry of hearth-plugin: the same API as the CommonJS entry.
import * as sdk from './index.js';

export * from './index.js';
export default sdk;

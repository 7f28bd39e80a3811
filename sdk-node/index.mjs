// ES module entry of hearth-plugin: the same objects as the CommonJS entry.
import sdk from './index.js';

export const { Plugin, Stage, HostError, serve } = sdk;
export default sdk;

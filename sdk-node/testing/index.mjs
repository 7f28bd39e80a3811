// ES module entry of hearth-plugin/testing: the same objects as the CommonJS entry.
import testing from './index.js';

export const {
  load,
  PluginHarness,
  SettingsView,
  FakeBroker,
  BrokerSession,
  PluginProcess,
  FakeHost,
  McpStore,
  HarnessError,
  InvalidArgumentsError,
  validateArguments,
  NODE_BOOTSTRAP,
  DEFAULT_CAPABILITIES,
  CAPABILITIES,
  SECRET_MASK,
} = testing;
export default testing;

// Raw floor of a Node plugin for the benchmarks: the Attach stream with the generated
// stubs only (@grpc/grpc-js, no SDK). Answers RunStage with its context unchanged,
// InvokeTool with its arguments as content, Ping with Pong; exits on Shutdown or when
// the stream ends. Dials HEARTH_ADDR with HEARTH_TOKEN like a real plugin. Run with
// NODE_PATH naming the repo's node_modules.
'use strict';
const path = require('path');
const grpc = require('@grpc/grpc-js');
const { hearth } = require(path.join(__dirname, '../../sdk-node/gen/hearth'));

const v1 = hearth.v1;
const MAX = 64 << 20;
const client = new grpc.Client(process.env.HEARTH_ADDR, grpc.credentials.createInsecure(), {
  'grpc.max_send_message_length': MAX,
  'grpc.max_receive_message_length': MAX,
});
const md = new grpc.Metadata();
md.set('x-hearth-token', process.env.HEARTH_TOKEN || '');
const call = client.makeBidiStreamRequest(
  '/hearth.v1.PluginHost/Attach',
  (m) => Buffer.from(v1.PluginMessage.encode(m).finish()),
  (b) => v1.HostMessage.decode(b),
  md,
);
call.on('data', (m) => {
  if (m.runStage) {
    call.write({ stageResult: { callId: m.runStage.callId, context: m.runStage.context } });
  } else if (m.invokeTool) {
    call.write({ toolResult: { callId: m.invokeTool.callId, success: true, content: m.invokeTool.argsJson } });
  } else if (m.ping) {
    call.write({ pong: { nonce: m.ping.nonce } });
  } else if (m.shutdown) {
    call.end();
    process.exit(0);
  }
});
call.on('error', () => {});
call.on('status', () => process.exit(0));

// Generic MCP client for Hearth's MCP tests, written with the official TypeScript SDK v1
// (@modelcontextprotocol/sdk 1.32.2, Client; protocol up to 2025-11-25). It runs a list of
// steps on one connection and prints one JSON object per line to stdout; Rust integration
// tests drive it against Hearth's MCP server. Same steps and output as py_client.py.
//
//   node ts_client.mjs (--stdio CMD ARGS... | --url URL [--token TOK]) STEPS_JSON
//
// STEPS_JSON is a JSON array (or @FILE holding one). Steps:
//   {"op":"info"}                                protocol, server, capabilities
//   {"op":"list"}                                tools
//   {"op":"call","name":N,"args":{},"timeout_ms":T,"progress":true}
//   {"op":"cancel","name":N,"args":{},"after_ms":T}
//   {"op":"wait_list_changed","timeout_ms":T}    takes every tools/list_changed seen so far,
//                                                or waits for the next one
//   {"op":"sleep","ms":T}
//   {"op":"resources"}  {"op":"read","uri":U}  {"op":"prompts"}  {"op":"prompt","name":N,"args":{}}
// Output, one line per step: {"op": OP, ...data} or {"op": OP, "error": TEXT, "code": MCP code
// if any, "http_status": for HTTP errors}. call/cancel lines also carry "name" and "ms" (wall
// time). call: content, structuredContent, isError, progress [{progress, total, message}] in
// arrival order. cancel: cancelled true + reason (or false + the result when the call finished
// first). wait_list_changed: notification, count, or error "timeout". An error never stops the
// run. Exit 0 when all steps ran; 1 when the connection failed ({"op":"connect","error":...});
// 2 on bad usage. A call without timeout_ms gets the SDK's default timeout (60 s).
// Env MCP_TEST_ELICIT: accept | accept:<JSON content> | decline | cancel - declares the
// elicitation capability and answers every elicitation so (each printed as
// {"op":"elicitation",...}); unset: no elicitation capability.
import { readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, McpError, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const USAGE = 'usage: node ts_client.mjs (--stdio CMD ARGS... | --url URL [--token TOK]) STEPS_JSON';
const CONNECT_TIMEOUT_MS = 30_000;
const CLOSE_TIMEOUT_MS = 8_000;

const out = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);
function errorOf(e) {
  if (e instanceof McpError) return { error: e.message, code: e.code };
  if (e instanceof StreamableHTTPError) return { error: e.message, http_status: e.code };
  return { error: String(e?.message ?? e) };
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function parseArgs(argv) {
  const usage = () => { process.stderr.write(`${USAGE}\n`); process.exit(2); };
  if (argv.length < 2) usage();
  const rest = argv.slice(0, -1);
  let raw = argv[argv.length - 1];
  const opts = {};
  while (rest.length) {
    const flag = rest.shift();
    if (flag === '--stdio' && rest.length) opts.stdio = rest.splice(0);
    else if ((flag === '--url' || flag === '--token') && rest.length) opts[flag.slice(2)] = rest.shift();
    else usage();
  }
  if (!opts.stdio === !opts.url) usage();
  if (raw.startsWith('@')) raw = readFileSync(raw.slice(1), 'utf8');
  opts.steps = JSON.parse(raw);
  return opts;
}

// Accept with a value for every field of the requested form: the first choice, or true / 1 / "yes" by type.
function fill(schema) {
  const value = (p) => p.enum?.[0] ?? p.oneOf?.[0]?.const ?? ({ boolean: true, integer: 1, number: 1 }[p.type] ?? 'yes');
  return Object.fromEntries(Object.entries(schema?.properties ?? {}).map(([k, p]) => [k, value(p)]));
}

const opts = parseArgs(process.argv.slice(2));
const elicit = process.env.MCP_TEST_ELICIT;
const client = new Client({ name: 'hearth-ts-test-client', version: '1.0.0' },
  { capabilities: elicit ? { elicitation: {} } : {} });

if (elicit) {
  const i = elicit.indexOf(':');
  const [action, content] = i < 0 ? [elicit, ''] : [elicit.slice(0, i), elicit.slice(i + 1)];
  client.setRequestHandler(ElicitRequestSchema, async (request) => {
    const answer = { action };
    if (action === 'accept') answer.content = content ? JSON.parse(content) : fill(request.params.requestedSchema);
    out({ op: 'elicitation', request: request.params, answer });
    return answer;
  });
}

let changed = []; // tools/list_changed notifications not yet taken by wait_list_changed
let arrived = () => {};
let onProgress = () => {}; // the current call's progress recorder
client.setNotificationHandler(ToolListChangedNotificationSchema, (n) => {
  changed.push(n);
  arrived();
});

let transport;
if (opts.url) {
  const headers = opts.token ? { Authorization: `Bearer ${opts.token}` } : {};
  transport = new StreamableHTTPClientTransport(new URL(opts.url), { requestInit: { headers } });
} else {
  // env: the whole environment (the SDK passes only a few variables by default); stderr inherited.
  transport = new StdioClientTransport({ command: opts.stdio[0], args: opts.stdio.slice(1), env: process.env, stderr: 'inherit' });
}
// The v1 Client keeps the negotiated version to itself; it hands it to the transport.
let protocol;
const setProtocolVersion = transport.setProtocolVersion?.bind(transport);
transport.setProtocolVersion = (v) => { protocol = v; setProtocolVersion?.(v); };

const ops = {
  info: async () => ({ protocol, server: client.getServerVersion(), capabilities: client.getServerCapabilities() }),

  list: async () => ({
    tools: (await client.listTools()).tools.map(({ name, title, description, inputSchema, outputSchema, annotations }) =>
      ({ name, title, description, inputSchema, outputSchema, annotations })),
  }),

  call: async (s) => {
    const progress = [];
    const options = {};
    if (s.timeout_ms) options.timeout = s.timeout_ms;
    if (s.progress) {
      options.onprogress = () => {}; // asks for progress (a token); we record it from the wire, see onProgress
      onProgress = ({ progress: p, total, message }) => progress.push({ progress: p, total, message });
    }
    try {
      const r = await client.callTool({ name: s.name, arguments: s.args ?? {} }, undefined, options);
      return { content: r.content, structuredContent: r.structuredContent ?? null, isError: !!r.isError, progress };
    } catch (e) {
      return { ...errorOf(e), progress };
    } finally {
      onProgress = () => {};
    }
  },

  cancel: async (s) => {
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort('cancelled by the test'), s.after_ms ?? 100);
    try {
      const r = await client.callTool({ name: s.name, arguments: s.args ?? {} }, undefined, { signal: ac.signal });
      return { cancelled: false, content: r.content, isError: !!r.isError };
    } catch (e) {
      if (!ac.signal.aborted) throw e;
      return { cancelled: true, reason: String(e?.message ?? e) };
    } finally {
      clearTimeout(timer);
    }
  },

  wait_list_changed: async (s) => {
    if (!changed.length) {
      await Promise.race([new Promise((r) => { arrived = r; }), sleep(s.timeout_ms ?? 5000)]);
      arrived = () => {};
    }
    if (!changed.length) return { error: 'timeout' };
    const taken = changed;
    changed = [];
    return { notification: taken[0], count: taken.length };
  },

  sleep: async (s) => { await sleep(s.ms ?? 0); return {}; },
  resources: async () => ({ resources: (await client.listResources()).resources }),
  read: async (s) => ({ contents: (await client.readResource({ uri: s.uri })).contents }),
  prompts: async () => ({ prompts: (await client.listPrompts()).prompts }),
  prompt: async (s) => ({ messages: (await client.getPrompt({ name: s.name, arguments: s.args ?? {} })).messages }),
};

// Bounds the connect and the close (a hung server must not keep us); steps carry their own timeouts.
const connectTimer = setTimeout(() => {
  out({ op: 'connect', error: `no connection after ${CONNECT_TIMEOUT_MS / 1000} s` });
  process.exit(1);
}, CONNECT_TIMEOUT_MS);
try {
  await client.connect(transport);
} catch (e) {
  out({ op: 'connect', ...errorOf(e) });
  process.exit(1);
}
clearTimeout(connectTimer);
// Progress is recorded as it comes off the wire: the v1 Client runs notification handlers a
// microtask late, so a progress notification read in the same chunk as the result reaches
// `onprogress` after the call has finished - and is dropped (seen with ts_server.mjs).
// Steps run one at a time, so every progress notification belongs to the current call.
const onmessage = transport.onmessage;
transport.onmessage = (message, extra) => {
  if (message.method === 'notifications/progress') onProgress(message.params);
  onmessage(message, extra);
};

for (const s of opts.steps) {
  const op = ops[s.op];
  const started = Date.now();
  let result;
  try {
    result = op ? await op(s) : { error: `unknown op ${JSON.stringify(s.op)}` };
  } catch (e) {
    result = errorOf(e);
  }
  if (s.op === 'call' || s.op === 'cancel') result = { name: s.name, ...result, ms: Date.now() - started };
  out({ op: s.op, ...result });
}

setTimeout(() => {
  process.stderr.write(`ts_client: close took more than ${CLOSE_TIMEOUT_MS / 1000} s; leaving\n`);
  process.exit(0);
}, CLOSE_TIMEOUT_MS).unref();
try {
  if (transport.sessionId) await transport.terminateSession();
  await client.close();
} catch (e) {
  process.stderr.write(`ts_client: close: ${errorOf(e).error}\n`);
}
process.exit(0);

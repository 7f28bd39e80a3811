// Third-party MCP server for Hearth's MCP tests, written with the official TypeScript SDK v1
// (@modelcontextprotocol/sdk 1.32.2, McpServer). It speaks protocol versions up to
// 2025-11-25. py_server.py serves the same tools from the Python SDK.
//
//   node ts_server.mjs              stdio
//   node ts_server.mjs http PORT    Streamable HTTP on 127.0.0.1:PORT/mcp (0 = any free port),
//                                   one McpServer per session; prints
//                                   `listening http://127.0.0.1:<port>/mcp` to stdout
//
// Env: MCP_TEST_TOKEN (HTTP: 401 without `Authorization: Bearer <token>`),
// MCP_TEST_REQUIRE_HEADER (`Name: value`, HTTP: 401 without it), MCP_TEST_EVENTS (a file
// that gets one line per event the tests look for: `cancelled wait`).
// Tools: add echo slow wait grow shrink fail crash hang image link remove_everything
// (+ late_tool after grow). Resource test://doc/1, prompt greet.
import { randomUUID } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import http from 'node:http';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

// A 1x1 red PNG.
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC';

const text = (t) => ({ content: [{ type: 'text', text: t }] });
const sleep = (ms, signal) => new Promise((resolve, reject) => {
  const timer = setTimeout(resolve, ms);
  signal?.addEventListener('abort', () => { clearTimeout(timer); reject(signal.reason); }, { once: true });
});

// Tell the test something happened: a stderr line, and a line in $MCP_TEST_EVENTS.
function event(line) {
  process.stderr.write(`${line}\n`);
  if (process.env.MCP_TEST_EVENTS) appendFileSync(process.env.MCP_TEST_EVENTS, `${line}\n`);
}

function build() {
  const server = new McpServer({ name: 'ts-test-server', version: '1.0.0' });
  let late = null;

  server.registerTool('add', {
    title: 'Add',
    description: 'Add two integers.',
    inputSchema: { a: z.number().int(), b: z.number().int() },
    outputSchema: { total: z.number().int() },
    annotations: { readOnlyHint: true, idempotentHint: true },
  }, async ({ a, b }) => ({
    content: [{ type: 'text', text: JSON.stringify({ total: a + b }, null, 2) }], // as the Python SDK writes it
    structuredContent: { total: a + b },
  }));

  server.registerTool('echo', {
    description: 'Return the text unchanged.',
    inputSchema: { text: z.string() },
  }, async ({ text: t }) => text(t));

  server.registerTool('slow', {
    description: 'Report progress once per step (every delay_ms), then return "done".',
    inputSchema: { steps: z.number().int(), delay_ms: z.number().int().default(50) },
  }, async ({ steps, delay_ms }, extra) => {
    const token = extra._meta?.progressToken; // absent when the caller wants no progress
    for (let i = 1; i <= steps; i++) {
      await sleep(delay_ms, extra.signal);
      if (token !== undefined) {
        await extra.sendNotification({
          method: 'notifications/progress',
          params: { progressToken: token, progress: i, total: steps, message: `step ${i}` },
        });
      }
    }
    return text('done');
  });

  server.registerTool('wait', {
    description: 'Sleep ms milliseconds; a cancellation is logged as `cancelled wait`.',
    inputSchema: { ms: z.number().int() },
  }, async ({ ms }, extra) => {
    try {
      await sleep(ms, extra.signal);
    } catch (e) {
      event('cancelled wait');
      throw e;
    }
    return text('waited');
  });

  // registerTool()/remove() after connect() send notifications/tools/list_changed themselves.
  server.registerTool('grow', { description: 'Add the tool late_tool and announce the change.' }, async () => {
    if (late) server.sendToolListChanged();
    else late = server.registerTool('late_tool', { description: 'Added at run time by grow.' }, async () => text('late'));
    return text('grown');
  });

  server.registerTool('shrink', { description: 'Remove the tool late_tool and announce the change.' }, async () => {
    if (late) late.remove();
    else server.sendToolListChanged();
    late = null;
    return text('shrunk');
  });

  server.registerTool('fail', { description: 'Return a tool error.' },
    async () => ({ ...text('it failed on purpose'), isError: true }));

  server.registerTool('crash', { description: 'Exit the process with status 3 in the middle of the call.' }, async () => {
    process.stderr.write('crashing on purpose\n');
    process.exit(3);
  });

  server.registerTool('hang', { description: 'Freeze the whole process: block the main thread, so nothing answers.' }, async () => {
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0);
    return text('unreachable');
  });

  server.registerTool('image', { description: 'Return a tiny PNG and a caption.' }, async () => ({
    content: [
      { type: 'image', data: PNG, mimeType: 'image/png' },
      { type: 'text', text: 'a 1x1 red PNG' },
    ],
  }));

  server.registerTool('link', { description: 'Return a link to the resource test://doc/1.' }, async () => ({
    content: [{ type: 'resource_link', uri: 'test://doc/1', name: 'doc1', mimeType: 'text/plain' }],
  }));

  server.registerTool('remove_everything', {
    description: 'Pretend to remove everything.',
    inputSchema: { confirm: z.boolean() },
    annotations: { destructiveHint: true },
  }, async () => text('removed'));

  server.registerResource('doc1', 'test://doc/1', { description: 'A test document.', mimeType: 'text/plain' },
    async (uri) => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'hello resource' }] }));

  server.registerPrompt('greet', { description: 'Greet someone.', argsSchema: { name: z.string() } },
    ({ name }) => ({ messages: [{ role: 'user', content: { type: 'text', text: `Hello, ${name}!` } }] }));

  return server;
}

// The headers every HTTP request must carry (from the env).
function required() {
  const need = [];
  if (process.env.MCP_TEST_TOKEN) need.push(['authorization', `Bearer ${process.env.MCP_TEST_TOKEN}`]);
  const h = process.env.MCP_TEST_REQUIRE_HEADER;
  if (h) {
    const i = h.indexOf(':');
    need.push([h.slice(0, i).trim().toLowerCase(), h.slice(i + 1).trim()]);
  }
  return need;
}

function serveHttp(port) {
  const need = required();
  const sessions = new Map();
  const httpServer = http.createServer(async (req, res) => {
    try {
      if (new URL(req.url, 'http://x').pathname !== '/mcp') {
        res.writeHead(404).end('not found\n');
        return;
      }
      if (need.some(([k, v]) => req.headers[k] !== v)) {
        res.writeHead(401, { 'content-type': 'text/plain', 'www-authenticate': 'Bearer' }).end('unauthorized');
        return;
      }
      const chunks = [];
      for await (const c of req) chunks.push(c);
      const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined;
      const sid = req.headers['mcp-session-id'];
      let transport = sid && sessions.get(sid);
      if (!transport && !sid && req.method === 'POST' && isInitializeRequest(body)) {
        transport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (id) => sessions.set(id, transport),
        });
        transport.onclose = () => sessions.delete(transport.sessionId);
        await build().connect(transport);
      }
      if (!transport) {
        res.writeHead(sid ? 404 : 400, { 'content-type': 'application/json' }).end(JSON.stringify({
          jsonrpc: '2.0', id: null,
          error: { code: -32000, message: sid ? 'Session not found' : 'Bad Request: no session' },
        }));
        return;
      }
      await transport.handleRequest(req, res, body);
    } catch (e) {
      if (!res.headersSent) res.writeHead(400, { 'content-type': 'text/plain' });
      res.end(`${e}\n`);
    }
  });
  httpServer.listen(port, '127.0.0.1', () => {
    process.stdout.write(`listening http://127.0.0.1:${httpServer.address().port}/mcp\n`);
  });
}

process.stderr.write('ts_server ready\n');
if (process.argv[2] === 'http') serveHttp(Number(process.argv[3]));
else await build().connect(new StdioServerTransport());

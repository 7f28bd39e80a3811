// The admin page in a real headless Chromium (puppeteer-core driving Debian's
// /usr/bin/chromium; nothing is downloaded): a real broker with the fixture plugin in
// tests/admin/plugins and a scripted LLM (`hearth dev llm-server`), logged in through
// the form with <data_dir>/admin.token. It restarts the plugin, watches its live log,
// changes settings (and has a wrong type refused), checks that secrets stay masked,
// opens the LLM sources and runs a chat turn with a tool call; requests without a
// session, without the CSRF token, from another origin or another Host are refused.
// A screenshot of each page goes to target/admin-screenshots/ (the CI artifact).
//
// Run: cargo build -p hearth-broker && node --test tests/admin/
// Chromium missing: skipped with a message, except in CI (CI=true), where it fails.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const HEARTH = process.env.HEARTH_BIN || path.join(ROOT, 'target/debug/hearth');
const SHOTS = path.join(ROOT, 'target/admin-screenshots');
const PLUGINS = path.join(ROOT, 'tests/admin/plugins');
const SCRIPT = path.join(ROOT, 'tests/admin/llm-script.json');
const PLUGIN = 'admin_fixture';

function findChromium() {
  const candidates = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'];
  for (const c of candidates) if (c && fs.existsSync(c)) return c;
  return null;
}

const CHROMIUM = findChromium();
const IN_CI = process.env.CI === 'true';
const SKIP = !CHROMIUM && !IN_CI
  ? 'chromium is not installed: `apt-get install chromium` (scripts/setup does it as root or in CI)'
  : false;
if (SKIP) console.warn(`# admin page test skipped: ${SKIP}`);

/** Resolves with the first match of `re` in the child's `stream`, or rejects. */
function waitForLine(child, stream, re, what, ms = 30_000) {
  return new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error(`${what}: no line matching ${re} within ${ms} ms; output:\n${seen}`)), ms);
    child[stream].setEncoding('utf8');
    child[stream].on('data', (chunk) => {
      seen += chunk;
      const m = seen.match(re);
      if (m) { clearTimeout(timer); resolve(m); }
    });
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`${what} exited (${code}) before ${re}; output:\n${seen}`)); });
  });
}

/** Stops `child` (SIGTERM, then SIGKILL after `ms`) and waits for it. */
async function stop(child, ms = 10_000) {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), ms);
  await exited;
  clearTimeout(timer);
}

/** A request with exactly these headers (node:http, so `Host` and `Origin` are ours). */
function raw(base, method, urlPath, headers = {}, body = '') {
  const url = new URL(urlPath, base);
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: url.hostname, port: url.port, path: url.pathname, method,
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'content-length': Buffer.byteLength(body), ...headers },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

describe('admin page in headless Chromium', { skip: SKIP, timeout: 180_000 }, () => {
  let dataDir;
  let llm;
  let broker;
  let base;
  let browser;
  let page;
  let brokerLog = '';

  const shot = async (name, p = page) => {
    await p.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
  };
  const cell = (sel) => page.$eval(`tr[data-plugin="${PLUGIN}"] ${sel}`, (e) => e.textContent.trim());
  const settingsGet = (key, ...flags) => execFileSync(HEARTH, ['--data-dir', dataDir, 'settings', 'get', key, '--plugin', PLUGIN, ...flags], { encoding: 'utf8' }).trim();
  const sessionCookie = async () => (await page.cookies()).find((c) => c.name === 'hearth_session');
  const csrf = () => page.$eval('meta[name="csrf-token"]', (m) => m.content);
  /** Clicks `selector` and waits for the page it loads. */
  const clickAndWait = async (selector) => {
    const [response] = await Promise.all([page.waitForNavigation(), page.click(selector)]);
    return response;
  };

  before(async () => {
    if (!CHROMIUM) throw new Error('CI=true and chromium is not installed: scripts/setup installs it (apt-get install chromium)');
    assert.ok(fs.existsSync(HEARTH), `${HEARTH} is missing: cargo build -p hearth-broker first`);
    fs.mkdirSync(SHOTS, { recursive: true });
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'hearth-admin-'));

    llm = spawn(HEARTH, ['dev', 'llm-server', '--script', SCRIPT, '--listen', '127.0.0.1:0'], { stdio: ['ignore', 'pipe', 'inherit'] });
    const [, llmUrl] = await waitForLine(llm, 'stdout', /listening on (http:\/\/\S+)/, 'hearth dev llm-server');

    broker = spawn(HEARTH, ['--data-dir', dataDir, 'run', '--http-listen', '127.0.0.1:0', '--plugins', PLUGINS, '--llm-url', llmUrl], {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, NO_COLOR: '1', RUST_LOG: process.env.RUST_LOG || 'info' },
    });
    broker.stderr.on('data', (c) => { brokerLog += c; });
    const [, addr] = await waitForLine(broker, 'stderr', /HTTP listening on http:\/\/([\d.]+:\d+)/, 'hearth run');
    base = `http://${addr}`;

    const puppeteer = (await import('puppeteer-core')).default;
    browser = await puppeteer.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: ['--no-sandbox', '--headless=new', '--disable-gpu', '--disable-dev-shm-usage'],
    });
    page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 900 });
  });

  after(async () => {
    await browser?.close();
    await stop(broker);
    await stop(llm);
    if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
  });

  test('without a session every page leads to the login form; health stays open', async () => {
    for (const p of ['/', '/llm', '/chat', `/plugins/${PLUGIN}`]) {
      const r = await raw(base, 'GET', p, { host: new URL(base).host });
      assert.equal(r.status, 303, p);
      assert.equal(r.headers.location, '/login', p);
    }
    const logs = await raw(base, 'GET', `/plugins/${PLUGIN}/logs`, { host: new URL(base).host });
    assert.equal(logs.status, 401);
    assert.equal((await raw(base, 'GET', '/healthz', { host: new URL(base).host })).status, 200);

    const res = await page.goto(`${base}/`);
    assert.equal(new URL(page.url()).pathname, '/login');
    const h = res.headers();
    assert.match(h['content-security-policy'], /default-src 'self'/);
    assert.match(h['content-security-policy'], /frame-ancestors 'none'/);
    assert.equal(h['x-content-type-options'], 'nosniff');
    // same-origin, not no-referrer: under no-referrer the page's own POSTs carry Origin: null.
    assert.equal(h['referrer-policy'], 'same-origin');
    assert.equal(h['cache-control'], 'no-store');
    await shot('01-login');
  });

  test('a wrong token is refused', async () => {
    await page.type('#token', 'not-the-token');
    const res = await clickAndWait('form.login button');
    assert.equal(res.status(), 401);
    assert.match(await page.$eval('.flash.error', (e) => e.textContent), /not the admin token/);
    assert.equal(await sessionCookie(), undefined);
  });

  test('login with the admin token sets an HttpOnly SameSite=Strict session cookie', async () => {
    const token = fs.readFileSync(path.join(dataDir, 'admin.token'), 'utf8').trim();
    await page.type('#token', token);
    await clickAndWait('form.login button');
    assert.equal(new URL(page.url()).pathname, '/');
    const cookie = await sessionCookie();
    assert.ok(cookie, 'hearth_session is set');
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, 'Strict');
    assert.equal(cookie.path, '/');
    // HttpOnly: the page's own script cannot read it.
    assert.equal(await page.evaluate(() => document.cookie), '');
  });

  test('the plugins table shows state, pid, restarts, uptime, sandbox and tools', async () => {
    const deadline = Date.now() + 30_000;
    while ((await cell('.state')) !== 'ready') {
      assert.ok(Date.now() < deadline, `plugin not ready: ${await cell('.state-cell')}\n${brokerLog}`);
      await new Promise((r) => setTimeout(r, 300));
      await page.reload();
    }
    assert.match(await cell('.pid'), /^\d+$/);
    assert.equal(await cell('.restarts'), '0');
    assert.notEqual(await cell('.uptime'), '-');
    assert.ok((await cell('.sandbox')).length > 0);
    assert.match(await cell('.tools'), /fixture_lookup/);
    await shot('02-plugins');
  });

  test('restart from the table: a new pid and the restart counted', async () => {
    const pid = await cell('.pid');
    await clickAndWait(`tr[data-plugin="${PLUGIN}"] form[action$="/restart"] button`);
    assert.match(await page.$eval('.flash.ok', (e) => e.textContent), new RegExp(`plugin ${PLUGIN} restarted`));
    assert.equal(await cell('.restarts'), '1');
    assert.notEqual(await cell('.pid'), pid);
    assert.equal(await cell('.state'), 'ready');
    await shot('03-plugins-after-restart');
  });

  test('POSTs without the CSRF token, from another origin or another Host are refused', async () => {
    const status = (body) => page.evaluate((b) => fetch('/plugins/admin_fixture/restart', { method: 'POST', body: new URLSearchParams(b) }).then((r) => r.status), body);
    assert.equal(await status({}), 403, 'no CSRF token');
    assert.equal(await status({ csrf: 'f'.repeat(64) }), 403, 'another CSRF token');

    const cookie = `hearth_session=${(await sessionCookie()).value}`;
    const token = await csrf();
    const host = new URL(base).host;
    const body = `csrf=${token}`;
    const fromEvil = await raw(base, 'POST', `/plugins/${PLUGIN}/restart`, { host, cookie, origin: 'http://evil.example' }, body);
    assert.equal(fromEvil.status, 403);
    assert.match(fromEvil.text, /cross-site/);
    const rebound = await raw(base, 'POST', `/plugins/${PLUGIN}/restart`, { host: `evil.example:${new URL(base).port}`, cookie }, body);
    assert.equal(rebound.status, 403);
    assert.match(rebound.text, /not a loopback name/);
    const reboundGet = await raw(base, 'GET', '/', { host: 'evil.example', cookie });
    assert.equal(reboundGet.status, 403);
    const noSession = await raw(base, 'POST', `/plugins/${PLUGIN}/restart`, { host, origin: base }, body);
    assert.equal(noSession.status, 303);

    await page.reload();
    assert.equal(await cell('.restarts'), '1', 'none of them restarted the plugin');
  });

  test("the plugin's page shows its live log", async () => {
    await clickAndWait(`tr[data-plugin="${PLUGIN}"] td.name a`);
    assert.equal(new URL(page.url()).pathname, `/plugins/${PLUGIN}`);
    await page.waitForFunction(() => /admin_fixture started, pid \d+/.test(document.getElementById('log').textContent), { timeout: 15_000 });
    // Plugin-provided text is shown as text, not markup.
    const help = await page.$eval('.field[data-key="greeting"] .help', (e) => ({ text: e.textContent, bold: e.querySelectorAll('b').length }));
    assert.match(help.text, /<b>not bold<\/b>/);
    assert.equal(help.bold, 0);
    await shot('04-plugin');
  });

  test('settings: labels from the defs, secrets masked, changes saved', async () => {
    assert.equal(await page.$eval('.field[data-key="max_items"] label', (e) => e.textContent), 'Max items');
    assert.equal(await page.$eval('input[name="v:max_items"]', (e) => e.type), 'number');
    assert.equal(await page.$eval('input[name="v:verbose"]', (e) => e.type), 'checkbox');
    assert.equal(await page.$eval('[name="v:mode"]', (e) => e.tagName), 'SELECT');
    const secret = await page.$eval('input[name="v:api_key"]', (e) => ({ type: e.type, value: e.value }));
    assert.deepEqual(secret, { type: 'password', value: '' });
    assert.ok(!(await page.content()).includes('sk-initial-secret'), 'the secret is not in the page');

    await page.$eval('input[name="v:greeting"]', (e) => { e.value = ''; });
    await page.type('input[name="v:greeting"]', 'hi there');
    await page.$eval('input[name="v:max_items"]', (e) => { e.value = ''; });
    await page.type('input[name="v:max_items"]', '7');
    await page.click('input[name="v:verbose"]');
    await page.select('select[name="v:mode"]', 'careful');
    await clickAndWait('#settings-form button[type="submit"]');
    assert.match(await page.$eval('.flash.ok', (e) => e.textContent), /Saved 4 settings/);
    assert.equal(await page.$eval('input[name="v:greeting"]', (e) => e.value), 'hi there');
    assert.equal(await page.$eval('input[name="v:max_items"]', (e) => e.value), '7');
    assert.equal(await page.$eval('input[name="v:verbose"]', (e) => e.checked), true);
    assert.equal(await page.$eval('select[name="v:mode"]', (e) => e.value), 'careful');
    assert.equal(settingsGet('max_items'), '7');
    assert.equal(settingsGet('greeting'), '"hi there"');
    assert.equal(settingsGet('verbose'), 'true');
    assert.equal(settingsGet('api_key', '--show-secrets'), '"sk-initial-secret"', 'an empty secret field leaves it as it is');
    await shot('05-plugin-settings-saved');
  });

  test('settings: a value of the wrong type is refused with the reason, nothing saved', async () => {
    // The browser's number field would not let text through; the server must refuse
    // it on its own.
    await page.$eval('input[name="v:max_items"]', (e) => { e.type = 'text'; e.value = ''; });
    await page.type('input[name="v:max_items"]', 'many');
    await page.$eval('input[name="v:greeting"]', (e) => { e.value = 'not saved'; });
    const res = await clickAndWait('#settings-form button[type="submit"]');
    assert.equal(res.status(), 400);
    assert.match(await page.$eval('.flash.error', (e) => e.textContent), /Not saved/);
    assert.match(await page.$eval('.field[data-key="max_items"] .field-error', (e) => e.textContent), /expected an integer/);
    assert.equal(await page.$eval('input[name="v:max_items"]', (e) => e.value), 'many', 'what was typed comes back');
    assert.equal(settingsGet('max_items'), '7');
    assert.equal(settingsGet('greeting'), '"hi there"');
    await shot('06-plugin-settings-refused');
  });

  test('settings: a typed secret replaces the stored one and is not shown', async () => {
    await page.goto(`${base}/plugins/${PLUGIN}`);
    await page.type('input[name="v:api_key"]', 'sk-new-secret');
    await clickAndWait('#settings-form button[type="submit"]');
    assert.match(await page.$eval('.flash.ok', (e) => e.textContent), /Saved 1 setting: api_key/);
    assert.ok(!(await page.content()).includes('sk-new-secret'));
    assert.equal(await page.$eval('input[name="v:api_key"]', (e) => e.value), '');
    assert.equal(settingsGet('api_key', '--show-secrets'), '"sk-new-secret"');
  });

  test('LLM sources with their state', async () => {
    await clickAndWait('nav a[href="/llm"]');
    const row = await page.$eval('tr[data-source="cli"]', (e) => e.textContent);
    assert.match(row, /ok/);
    assert.match(await page.$eval('tr[data-source="cli"] .cooldown', (e) => e.textContent), /^-$/);
    await shot('07-llm');
  });

  test('a chat turn streams its tool call and reply (and the live log shows the call)', async () => {
    // A second tab on the plugin's page, to see the call's log line arrive live.
    const logTab = await browser.newPage();
    await logTab.setViewport({ width: 1280, height: 900 });
    await logTab.goto(`${base}/plugins/${PLUGIN}`);
    await logTab.waitForFunction(() => /admin_fixture started/.test(document.getElementById('log').textContent));
    await page.bringToFront();

    await clickAndWait('nav a[href="/chat"]');
    await page.type('#chat-message', 'please lookup hearth');
    await page.click('#chat-form button[type="submit"]');
    await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 30_000 });
    const tool = await page.$eval('.tool-call[data-tool="fixture_lookup"]', (e) => ({ done: e.classList.contains('done'), text: e.textContent }));
    assert.ok(tool.done, tool.text);
    assert.match(tool.text, /hearth is a plugin broker/);
    const reply = await page.$eval('.msg.assistant .text', (e) => e.textContent);
    assert.match(reply, /^The lookup said: .*hearth is a plugin broker/);
    assert.equal(await page.$eval('.msg.user', (e) => e.textContent), 'please lookup hearth');
    await shot('08-chat');

    await logTab.waitForFunction(() => /fixture_lookup called: topic=hearth/.test(document.getElementById('log').textContent), { timeout: 15_000 });
    await shot('09-plugin-live-log', logTab);
    await logTab.close();
  });

  test('logout ends the session', async () => {
    await clickAndWait('form.logout button');
    assert.equal(new URL(page.url()).pathname, '/login');
    await page.goto(`${base}/`);
    assert.equal(new URL(page.url()).pathname, '/login');
  });
});

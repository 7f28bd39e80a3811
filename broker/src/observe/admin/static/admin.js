// Hearth admin page: the few things a server-rendered page cannot do alone.
// - forms with data-confirm ask before they are sent (unload);
// - <pre id="log" data-src> shows a plugin's log live (EventSource);
// - #chat-form posts a message and shows the turn as it streams (fetch + NDJSON).
// Everything from the server is put in the page as text (textContent), never as HTML.
'use strict';

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function confirmForms() {
  for (const form of document.querySelectorAll('form[data-confirm]')) {
    form.addEventListener('submit', (ev) => {
      if (!window.confirm(form.dataset.confirm)) ev.preventDefault();
    });
  }
}

function liveLog() {
  const pre = document.getElementById('log');
  if (!pre || !pre.dataset.src) return;
  const MAX_LINES = 2000;
  const source = new EventSource(pre.dataset.src);
  // Each (re)connection sends the kept tail first.
  source.addEventListener('open', () => { pre.textContent = ''; });
  source.addEventListener('message', (ev) => {
    let line;
    try { line = JSON.parse(ev.data); } catch { return; }
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
    const row = el('span', 'line ' + line.stream);
    const when = new Date(line.unix_ms).toLocaleTimeString();
    row.append(el('span', 'when', when + ' '), line.stream === 'stdout' ? '' : '[' + line.stream + '] ', line.text, '\n');
    pre.append(row);
    while (pre.childNodes.length > MAX_LINES) pre.firstChild.remove();
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  });
}

function chat() {
  const form = document.getElementById('chat-form');
  if (!form) return;
  const log = document.getElementById('chat-log');
  const input = document.getElementById('chat-message');
  const button = form.querySelector('button');

  input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && !ev.shiftKey) { ev.preventDefault(); form.requestSubmit(); }
  });

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const message = input.value;
    if (!message.trim()) return;
    const body = new URLSearchParams(new FormData(form));
    input.value = '';
    button.disabled = true;
    log.append(el('div', 'msg user', message));
    const reply = el('div', 'msg assistant');
    reply.dataset.state = 'streaming';
    const reasoning = el('span', 'reasoning');
    const text = el('span', 'text');
    reply.append(reasoning, text);
    log.append(reply);
    const calls = new Map();
    try {
      const res = await fetch(form.action, { method: 'POST', body, credentials: 'same-origin' });
      if (!res.ok) {
        reply.append(el('span', 'error', (await res.text()).trim() || res.statusText));
        return;
      }
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let nl;
        while ((nl = buffer.indexOf('\n')) >= 0) {
          const line = buffer.slice(0, nl);
          buffer = buffer.slice(nl + 1);
          if (line.trim()) show(JSON.parse(line));
        }
      }
    } catch (e) {
      reply.append(el('span', 'error', String(e)));
    } finally {
      reply.dataset.state = 'done';
      button.disabled = false;
      input.focus();
    }

    function show(e) {
      switch (e.type) {
        case 'text_delta':
          (e.reasoning ? reasoning : text).append(e.text);
          break;
        case 'tool_call_started': {
          const call = el('div', 'tool-call');
          call.dataset.tool = e.tool;
          call.append(el('span', 'head', '⚙ ' + e.tool + ' ' + JSON.stringify(e.args)));
          const progress = el('span', 'progress');
          call.append(progress);
          calls.set(e.call_id, { call, progress });
          reply.insertBefore(call, text);
          break;
        }
        case 'tool_call_progress': {
          const c = calls.get(e.call_id);
          if (!c) break;
          const amount = e.total > 0 ? e.progress + ' / ' + e.total : (e.progress ? String(e.progress) : '');
          c.progress.textContent = [amount, e.message].filter(Boolean).join(' — ');
          break;
        }
        case 'tool_call_finished': {
          const c = calls.get(e.call_id);
          if (!c) break;
          const ms = (e.elapsed_us / 1000).toFixed(1) + ' ms';
          c.call.classList.add(e.success ? 'done' : 'failed');
          c.progress.textContent = '';
          c.call.append(el('span', 'result', (e.success ? '✓ ' : '✗ ') + ms + ': ' + (e.success ? e.content : (e.error || e.denied_by))));
          break;
        }
        case 'plugin_reply':
          if (!e.inline) reply.append(el('span', 'plugin-reply', e.plugin + ': ' + e.text));
          break;
        case 'short_circuit':
          text.textContent = e.text;
          break;
        case 'queued':
          reply.append(el('span', 'usage', 'queued behind ' + e.ahead));
          break;
        case 'interrupted':
          reply.append(el('span', 'usage', 'interrupted by ' + e.source));
          break;
        case 'final':
          if (e.text && !text.textContent) text.textContent = e.text;
          if (e.error) reply.append(el('span', 'error', e.error));
          if (e.token_usage && Object.keys(e.token_usage).length) {
            reply.append(el('span', 'usage', Object.entries(e.token_usage).map(([k, v]) => k + ' ' + v).join(' · ')));
          }
          break;
      }
    }
  });
}

confirmForms();
liveLog();
chat();

// The SafeAgent demo served by `cargo xtask serve --acp`, driven by the real
// TypeScript ACP SDK client as an editor drives it (crates/reins-demo/tests/serve_acp.rs
// runs it): the client starts the program and speaks ACP on its stdin/stdout.
// - "delete temp.txt": the editor is asked, allows once, the file is deleted;
// - "delete notes.md": the editor cancels the question; the call waits in the inbox
//   (reins-server's API, with the token from the program's stderr banner).
// Every message the agent sends is validated against the pinned ACP schema.
// Usage: node demo.mjs COMMAND ARGS...; prints one JSON line.
import { spawn } from 'node:child_process';
import { Readable, Writable } from 'node:stream';
import * as acp from '@agentclientprotocol/sdk';
import { Validator } from './schema.mjs';

const [command, ...args] = process.argv.slice(2);
const child = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'] });
let banner = '';
child.stderr.on('data', chunk => { banner += String(chunk); process.stderr.write(chunk); });

const validator = new Validator();
const raw = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const tapOut = new TransformStream({ transform(m, c) { validator.sent(m); c.enqueue(m); } });
tapOut.readable.pipeTo(raw.writable).catch(() => {});
const readable = raw.readable.pipeThrough(new TransformStream({
  transform(m, c) { validator.check(m); c.enqueue(m); },
}));

const answers = ['allow-once', 'cancel'];
const asked = [];
const updates = [];
const app = acp.client({ name: 'reins-demo-test-editor' })
  .onNotification('session/update', ({ params }) => { updates.push(params.update); })
  .onRequest('session/request_permission', ({ params }) => {
    asked.push(params.toolCall.title);
    const next = answers.shift();
    if (next === 'cancel') return { outcome: { outcome: 'cancelled' } };
    return { outcome: { outcome: 'selected', optionId: next } };
  });

const out = {};
await app.connectWith({ readable, writable: tapOut.writable }, async ctx => {
  out.init = await ctx.request('initialize', { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
  const { sessionId } = await ctx.request('session/new', { cwd: process.cwd(), mcpServers: [] });
  out.session = sessionId;
  const prompt = async text => {
    const from = updates.length;
    const r = await ctx.request('session/prompt', { sessionId, prompt: [{ type: 'text', text }] });
    const said = updates.slice(from).filter(u => u.sessionUpdate === 'agent_message_chunk').map(u => u.content.text).join('');
    return { stopReason: r.stopReason, said };
  };
  out.allowed = await prompt('delete temp.txt');
  out.cancelled = await prompt('delete notes.md');

  // What the inbox shows (while the program runs): the call that waits.
  const token = /token: (\S+)/.exec(banner)?.[1];
  const inbox = /inbox:\s+(http:\/\/[^/\s]+)\//.exec(banner)?.[1];
  const view = await (await fetch(`${inbox}/v1/sessions/${encodeURIComponent(out.session)}`, {
    headers: { Authorization: `Bearer ${token}` },
  })).json();
  out.pendingInInbox = (view.requirements ?? []).map(r => r.tool_use.name);
});
out.asked = asked;
out.validated = validator.count;
out.invalid = validator.invalid;
child.stdin.end();
await new Promise(r => child.on('exit', r));
console.log(JSON.stringify(out));

// The door's scenarios, the same on every driver (tests/drivers.rs serves an agent on
// the local driver and one whose sessions run on Restate), with the real TypeScript ACP
// SDK client: a streamed answer, allow once, reject once, a late second approver, a
// prompt sent again while the first runs, cancel mid-run, a pending question asked
// again on load, and the editor's files and terminal as client tools. Every message
// the agent sends is validated against the pinned ACP schema. Waits on events (the
// test's files, the agent's updates), never a timer.
// Usage: node drivers.mjs DIR
//   DIR/ran.txt      what the agent's tools ran (written by the process that runs them)
//   DIR/decided      touched by the test once it decided as another approver (asked
//                    for with a `DECIDE <session> <requirement>` line on stderr)
//   DIR/result.json  written at the end
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { Readable, Writable } from 'node:stream';
import * as acp from '@agentclientprotocol/sdk';
import { Validator } from './schema.mjs';

const [dir] = process.argv.slice(2);
const log = (...a) => process.stderr.write(a.join(' ') + '\n');
const sleep = ms => new Promise(r => setTimeout(r, ms));
const ran = () => (existsSync(`${dir}/ran.txt`) ? readFileSync(`${dir}/ran.txt`, 'utf8').split('\n') : []);
async function until(what, ok) {
  for (let i = 0; i < 3000; i++) {
    if (ok()) return;
    await sleep(20);
  }
  throw new Error(`waited 60 s for ${what}`);
}
const validator = new Validator();

const raw = acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
const tapOut = new TransformStream({ transform(m, c) { validator.sent(m); c.enqueue(m); } });
tapOut.readable.pipeTo(raw.writable).catch(() => {});
const readable = raw.readable.pipeThrough(new TransformStream({ transform(m, c) { validator.check(m); c.enqueue(m); } }));
const stream = { readable, writable: tapOut.writable };

// Permission answers: an optionId, 'cancel', or 'late' (ask the test to decide in the
// inbox first, then answer allow-once).
const answers = [];
const asked = [];
const updates = new Map(); // sessionId -> [update]
const written = [];

const app = acp.client({ name: 'reins-acp-drivers' })
  .onNotification('session/update', ({ params }) => {
    if (!updates.has(params.sessionId)) updates.set(params.sessionId, []);
    updates.get(params.sessionId).push(params.update);
  })
  .onRequest('session/request_permission', async ({ params }) => {
    asked.push({ sessionId: params.sessionId, toolCallId: params.toolCall.toolCallId });
    const next = answers.shift();
    if (next === undefined || next === 'cancel') return { outcome: { outcome: 'cancelled' } };
    if (next === 'late') {
      log(`DECIDE ${params.sessionId} ${params.toolCall.toolCallId}`);
      await until('the inbox decision', () => existsSync(`${dir}/decided`));
      return { outcome: { outcome: 'selected', optionId: 'allow-once' } };
    }
    return { outcome: { outcome: 'selected', optionId: next } };
  })
  .onRequest('fs/read_text_file', ({ params }) => ({ content: `contents of ${params.path}` }))
  .onRequest('fs/write_text_file', ({ params }) => { written.push(params); return {}; })
  .onRequest('terminal/create', () => ({ terminalId: 'term-1' }))
  .onRequest('terminal/wait_for_exit', () => ({ exitCode: 0, signal: null }))
  .onRequest('terminal/output', () => ({ output: 'hi\n', truncated: false, exitStatus: { exitCode: 0, signal: null } }))
  .onRequest('terminal/release', () => ({}));

async function failure(promise) {
  try { return { ok: true, value: await promise }; } catch (e) {
    return { ok: false, code: e.code ?? null, message: String(e.message ?? e), data: e.data ?? null };
  }
}

const cwd = '/home/ana/project';
const out = {};

await app.connectWith(stream, async ctx => {
  const text = t => [{ type: 'text', text: t }];
  const newSession = async () => (await ctx.request('session/new', { cwd, mcpServers: [] })).sessionId;
  const turn = async (sessionId, t) => {
    const before = (updates.get(sessionId) ?? []).length;
    const r = await ctx.request('session/prompt', { sessionId, prompt: text(t) });
    const us = (updates.get(sessionId) ?? []).slice(before);
    const said = us.filter(u => u.sessionUpdate === 'agent_message_chunk').map(u => u.content.text).join('');
    return { stopReason: r.stopReason, updates: us, said, asked: asked.filter(a => a.sessionId === sessionId).length };
  };

  await ctx.request('initialize', {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
    clientInfo: { name: 'reins-acp-drivers', version: '1.0.0' },
  });

  const s1 = await newSession();
  out.stream = { session: s1, ...await turn(s1, 'hello there') };
  answers.push('allow-once');
  out.allowOnce = await turn(s1, 'delete a.txt');
  answers.push('reject-once');
  out.rejectOnce = await turn(s1, 'delete b.txt');

  // A late second approver: the inbox decides while the editor asks.
  const s2 = await newSession();
  answers.push('late');
  out.late = { session: s2, ...await turn(s2, 'delete c.txt') };

  // Cancel mid-run; the same prompt sent again meanwhile is refused (busy).
  const s3 = await newSession();
  const slow = turn(s3, 'slow g.txt');
  await until('the slow tool to start', () => ran().includes('slow-start:g.txt'));
  out.again = await failure(ctx.request('session/prompt', { sessionId: s3, prompt: text('slow g.txt') }));
  await ctx.notify('session/cancel', { sessionId: s3 });
  out.cancel = { session: s3, ...await slow };
  out.afterCancel = await turn(s3, 'still there?');

  // A question left open (cancelled) is asked again on load; allow runs it once.
  const s4 = await newSession();
  answers.push('cancel');
  out.left = { session: s4, ...await turn(s4, 'delete h.txt') };
  answers.push('allow-once');
  const before = updates.get(s4).length;
  out.reload = { result: await ctx.request('session/load', { sessionId: s4, cwd, mcpServers: [] }) };
  out.reload.updates = updates.get(s4).slice(before);
  out.reload.asked = asked.filter(a => a.sessionId === s4).length;

  // The editor's files and terminal, as client tools the run pauses for.
  const s5 = await newSession();
  out.read = { session: s5, ...await turn(s5, 'read notes.txt') };
  answers.push('allow-once');
  out.write = await turn(s5, 'write out.txt');
  answers.push('allow-once');
  out.run = await turn(s5, 'run');
  out.plan = await turn(s5, 'plan');
  out.written = written;
});

out.validated = validator.count;
out.invalid = validator.invalid;
writeFileSync(`${dir}/result.json`, JSON.stringify(out, null, 1));

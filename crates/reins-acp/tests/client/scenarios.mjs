// The real TypeScript ACP SDK client driving a reins agent. This process's stdin and
// stdout are the ACP wire (the Rust test serves the agent on them); every message the
// agent sends is validated against the pinned ACP JSON schema (tests/fixtures).
// Usage: node scenarios.mjs <work dir> <id of a session paused in another process>
// Writes <work dir>/result.json; logs and requests to the test go to stderr.
import { readFileSync, writeFileSync, existsSync } from 'node:fs';
import { Readable, Writable } from 'node:stream';
import * as acp from '@agentclientprotocol/sdk';
import { Validator } from './schema.mjs';

const [dir, pausedId] = process.argv.slice(2);
const log = (...a) => process.stderr.write(a.join(' ') + '\n');
const sleep = ms => new Promise(r => setTimeout(r, ms));
const validator = new Validator();
// The whole session, both directions, for docs/acp.md (the test copies it out when
// REINS_ACP_TRANSCRIPT names a file).
const transcript = [];

// The wire, tapped: requests this client sends (to validate their responses by
// method) and every message the agent sends (validated).
const raw = acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
const tapOut = new TransformStream({
  transform(m, c) { validator.sent(m); transcript.push({ from: 'client', message: m }); c.enqueue(m); },
});
tapOut.readable.pipeTo(raw.writable).catch(() => {});
const readable = raw.readable.pipeThrough(new TransformStream({
  transform(m, c) { validator.check(m); transcript.push({ from: 'agent', message: m }); c.enqueue(m); },
}));
const stream = { readable, writable: tapOut.writable };

// Permission answers the scenarios queue: an optionId, 'cancel', or 'stale' (ask the
// test to decide in the inbox first, then answer allow-once).
const answers = [];
// Form answers (elicitation/create), in order.
const forms = [];
const formsAsked = [];
const asked = [];
const updates = new Map(); // sessionId -> [update]
const files = { written: [] };
let onUpdate = () => {};

const app = acp.client({ name: 'reins-acp-test' })
  .onNotification('session/update', ({ params }) => {
    if (!updates.has(params.sessionId)) updates.set(params.sessionId, []);
    updates.get(params.sessionId).push(params.update);
    onUpdate(params);
  })
  .onRequest('session/request_permission', async ({ params }) => {
    asked.push({
      sessionId: params.sessionId,
      toolCallId: params.toolCall.toolCallId,
      title: params.toolCall.title,
      kind: params.toolCall.kind,
      locations: params.toolCall.locations ?? [],
      options: params.options.map(o => o.kind),
    });
    const next = answers.shift();
    if (next === undefined || next === 'cancel') return { outcome: { outcome: 'cancelled' } };
    if (next === 'stale') {
      log(`DECIDE ${params.sessionId} ${params.toolCall.toolCallId}`);
      while (!existsSync(`${dir}/decided`)) await sleep(20);
      return { outcome: { outcome: 'selected', optionId: 'allow-once' } };
    }
    return { outcome: { outcome: 'selected', optionId: next } };
  })
  .onRequest('elicitation/create', ({ params }) => {
    formsAsked.push(params);
    return forms.shift() ?? { action: 'cancel' };
  })
  .onRequest('fs/read_text_file', ({ params }) => ({ content: `contents of ${params.path}` }))
  .onRequest('fs/write_text_file', ({ params }) => { files.written.push(params); return {}; })
  .onRequest('terminal/create', () => ({ terminalId: 'term-1' }))
  .onRequest('terminal/wait_for_exit', () => ({ exitCode: 0, signal: null }))
  .onRequest('terminal/output', () => ({ output: 'hi\n', truncated: false, exitStatus: { exitCode: 0, signal: null } }))
  .onRequest('terminal/release', () => ({}));

async function failure(promise) {
  try { return { ok: true, value: await promise }; } catch (e) {
    return { ok: false, code: e.code ?? null, message: String(e.message ?? e) };
  }
}

const cwd = '/home/ana/project';
const out = {};

await app.connectWith(stream, async ctx => {
  const text = t => [{ type: 'text', text: t }];
  const newSession = async () => (await ctx.request('session/new', { cwd, mcpServers: [] })).sessionId;
  // One prompt: the stop reason, the updates of the turn, the agent's text.
  const turn = async (sessionId, t) => {
    const before = (updates.get(sessionId) ?? []).length;
    const r = await ctx.request('session/prompt', { sessionId, prompt: text(t) });
    const us = (updates.get(sessionId) ?? []).slice(before);
    const said = us.filter(u => u.sessionUpdate === 'agent_message_chunk').map(u => u.content.text).join('');
    return { stopReason: r.stopReason, updates: us, said, asked: asked.filter(a => a.sessionId === sessionId).length };
  };

  out.init = await ctx.request('initialize', {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true, elicitation: { form: {} } },
    clientInfo: { name: 'reins-acp-test', version: '1.0.0' },
  });

  // A prompt that streams.
  const s1 = await newSession();
  out.stream = await turn(s1, 'hello there');

  // Allow once: ran once.
  answers.push('allow-once');
  out.allowOnce = { session: s1, ...await turn(s1, 'delete a.txt') };
  // Reject once: never ran, the model told.
  answers.push('reject-once');
  out.rejectOnce = await turn(s1, 'delete b.txt');

  // Allow always: the next identical call runs without asking.
  const s2 = await newSession();
  answers.push('allow-always');
  out.allowAlways = { session: s2, ...await turn(s2, 'delete c.txt') };
  out.allowAlwaysNext = await turn(s2, 'delete d.txt');
  // Reject always: the next call is rejected without asking.
  const s3 = await newSession();
  answers.push('reject-always');
  out.rejectAlways = { session: s3, ...await turn(s3, 'delete e.txt') };
  out.rejectAlwaysNext = await turn(s3, 'delete f.txt');

  // Cancel mid-stream; a second prompt meanwhile is refused (busy); the session goes on.
  const s4 = await newSession();
  const running = new Promise(resolve => {
    onUpdate = p => {
      if (p.sessionId === s4 && p.update.sessionUpdate === 'tool_call_update' && p.update.status === 'in_progress') resolve();
    };
  });
  const slow = turn(s4, 'slow g.txt');
  await running;
  onUpdate = () => {};
  out.busy = await failure(ctx.request('session/prompt', { sessionId: s4, prompt: text('hello') }));
  await ctx.notify('session/cancel', { sessionId: s4 });
  out.cancel = { session: s4, ...await slow };
  out.afterCancel = await turn(s4, 'still there?');

  // A cancelled permission request leaves the requirement pending; loading the session
  // asks again, and allow runs it once.
  const s5 = await newSession();
  answers.push('cancel');
  out.cancelledAsk = { session: s5, ...await turn(s5, 'delete h.txt') };
  answers.push('allow-once');
  const before5 = updates.get(s5).length;
  out.reload = { result: await ctx.request('session/load', { sessionId: s5, cwd, mcpServers: [] }) };
  out.reload.updates = updates.get(s5).slice(before5);
  out.reload.asked = asked.filter(a => a.sessionId === s5).length;

  // A session paused in another process: load replays it, asks again, runs once.
  answers.push('allow-once');
  out.load = { result: await ctx.request('session/load', { sessionId: pausedId, cwd, mcpServers: [] }) };
  out.load.updates = updates.get(pausedId) ?? [];
  out.load.asked = asked.filter(a => a.sessionId === pausedId);

  // A stale answer: decided in the inbox while the editor asked; the editor's allow
  // changes nothing.
  const s6 = await newSession();
  answers.push('stale');
  out.stale = { session: s6, ...await turn(s6, 'delete s.txt') };

  // Client tools: fs and terminal through this client, the plan as a plan update.
  const s7 = await newSession();
  out.read = { session: s7, ...await turn(s7, 'read notes.txt') };
  answers.push('allow-once');
  out.write = await turn(s7, 'write out.txt');
  answers.push('allow-once');
  out.run = await turn(s7, 'run');
  out.plan = await turn(s7, 'plan');
  out.written = files.written;

  // User input as a form: accepted → ran with the value; declined → rejected.
  const s8 = await newSession();
  forms.push({ action: 'accept', content: { tag: 'blue' } });
  out.formAccept = await turn(s8, 'tag c.txt');
  forms.push({ action: 'decline' });
  out.formDecline = await turn(s8, 'tag d.txt');
  out.formsAsked = formsAsked;

  // The protocol's errors.
  out.errors = {
    unknownPrompt: await failure(ctx.request('session/prompt', { sessionId: 'acp/nobody/none', prompt: text('hi') })),
    unknownLoad: await failure(ctx.request('session/load', { sessionId: 'acp/nobody/none', cwd, mcpServers: [] })),
    relativeCwd: await failure(ctx.request('session/new', { cwd: 'project', mcpServers: [] })),
    image: await failure(ctx.request('session/prompt', { sessionId: s1, prompt: [{ type: 'image', data: 'AA==', mimeType: 'image/png' }] })),
    unknownMethod: await failure(ctx.request('session/set_mode', { sessionId: s1, modeId: 'x' })),
  };
});

out.validated = validator.count;
out.invalid = validator.invalid;
writeFileSync(`${dir}/result.json`, JSON.stringify(out, null, 1));
writeFileSync(`${dir}/transcript.jsonl`, transcript.map(t => JSON.stringify(t)).join('\n') + '\n');
log(`done: ${validator.count} agent messages validated, ${validator.invalid.length} invalid`);

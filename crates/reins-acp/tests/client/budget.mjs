// A reached budget through the real TypeScript ACP SDK client: asked as a permission
// request; allow extends it (to the suggested limit) and the turn goes on, reject ends
// the run. Every message the agent sends is validated against the pinned schema.
// Usage: node budget.mjs <work dir>. Writes <work dir>/result.json.
import { writeFileSync } from 'node:fs';
import { Readable, Writable } from 'node:stream';
import * as acp from '@agentclientprotocol/sdk';
import { Validator } from './schema.mjs';

const [dir] = process.argv.slice(2);
const validator = new Validator();
const raw = acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
const tapOut = new TransformStream({ transform(m, c) { validator.sent(m); c.enqueue(m); } });
tapOut.readable.pipeTo(raw.writable).catch(() => {});
const readable = raw.readable.pipeThrough(new TransformStream({ transform(m, c) { validator.check(m); c.enqueue(m); } }));

const answers = [];
const asked = [];
const updates = new Map();
const app = acp.client({ name: 'reins-acp-budget-test' })
  .onNotification('session/update', ({ params }) => {
    if (!updates.has(params.sessionId)) updates.set(params.sessionId, []);
    updates.get(params.sessionId).push(params.update);
  })
  .onRequest('session/request_permission', async ({ params }) => {
    asked.push({
      sessionId: params.sessionId,
      toolCallId: params.toolCall.toolCallId,
      title: params.toolCall.title,
      rawInput: params.toolCall.rawInput ?? null,
      options: params.options.map(o => o.kind),
    });
    const next = answers.shift();
    if (next === undefined) return { outcome: { outcome: 'cancelled' } };
    return { outcome: { outcome: 'selected', optionId: next } };
  });

const cwd = '/home/ana/project';
const out = {};
await app.connectWith({ readable, writable: tapOut.writable }, async ctx => {
  const text = t => [{ type: 'text', text: t }];
  const turn = async (sessionId, t) => {
    const before = (updates.get(sessionId) ?? []).length;
    const r = await ctx.request('session/prompt', { sessionId, prompt: text(t) });
    const us = (updates.get(sessionId) ?? []).slice(before);
    const said = us.filter(u => u.sessionUpdate === 'agent_message_chunk').map(u => u.content.text).join('');
    return { stopReason: r.stopReason, said, asked: asked.filter(a => a.sessionId === sessionId) };
  };
  await ctx.request('initialize', {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    clientInfo: { name: 'reins-acp-budget-test', version: '1.0.0' },
  });
  // Allow the delete, then allow the budget: extended, the delete runs.
  const s1 = (await ctx.request('session/new', { cwd, mcpServers: [] })).sessionId;
  answers.push('allow-once', 'allow-once');
  out.extended = await turn(s1, 'delete a.txt');
  // Allow the delete, then reject the budget: the run ends, nothing runs.
  const s2 = (await ctx.request('session/new', { cwd, mcpServers: [] })).sessionId;
  answers.push('allow-once', 'reject-once');
  out.ended = await turn(s2, 'delete b.txt');
});
out.validated = validator.count;
out.invalid = validator.invalid;
writeFileSync(`${dir}/result.json`, JSON.stringify(out, null, 1));

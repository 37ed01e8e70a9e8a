// The door's scenarios with the SDK before 2026-07-28 (@modelcontextprotocol/sdk 1.x:
// the server asks with elicitation/create while the call waits), the same on every
// driver (tests/drivers.rs): approve, decline, a late second approver, and cancel
// mid-run. Waits on events: the test's files, never a timer.
// Usage: node drivers_legacy.mjs URL DIR   (DIR as for drivers.mjs)
import { existsSync, readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { failure, sleep, text } from './common.mjs';

const [url, dir] = process.argv.slice(2);
const log = (...a) => process.stderr.write(a.join(' ') + '\n');
const ran = () => (existsSync(`${dir}/ran.txt`) ? readFileSync(`${dir}/ran.txt`, 'utf8').split('\n') : []);
async function until(what, ok) {
  for (let i = 0; i < 3000; i++) {
    if (ok()) return;
    await sleep(20);
  }
  throw new Error(`waited 60 s for ${what}`);
}

// Each question is answered by the next entry: an answer, or a function of the
// question that returns one.
const queue = [];
const client = new Client({ name: 'reins-test-drivers-legacy', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } });
client.setRequestHandler(ElicitRequestSchema, async request => {
  const next = queue.shift();
  if (!next) return { action: 'cancel' };
  return typeof next === 'function' ? next(request.params) : next;
});
await client.connect(new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: 'Bearer token-alice' } },
}));
const name = (await client.listTools()).tools[0].name;
const call = (args, opts) => client.callTool({ name, arguments: args }, undefined, opts);
const out = {};

queue.push({ action: 'accept', content: { decision: 'approve' } });
let r = await call({ message: 'delete a.txt' });
out.approve = { text: text(r), session: r.structuredContent?.session };
queue.push({ action: 'decline' });
r = await call({ message: 'delete b.txt' });
out.reject = { text: text(r) };

// A late second approver: the inbox decides while the client is asked; the client's
// answer is refused as already decided.
const session = out.approve.session;
queue.push(async params => {
  const id = params._meta['dev.reins/requirement'].id;
  log(`DECIDE ${session} ${id}`);
  await until('the inbox decision', () => existsSync(`${dir}/decided`));
  return { action: 'accept', content: { decision: 'approve' } };
});
out.late = await failure(call({ message: 'delete c.txt', session }));

// Cancel mid-run: abort the call once the slow tool has started.
const ac = new AbortController();
const slow = failure(call({ message: 'slow g.txt' }, { signal: ac.signal }));
await until('the slow tool to start', () => ran().includes('slow-start:g.txt'));
ac.abort();
out.cancel = await slow;
// The SDK tells the server with notifications/cancelled, sent on its own: the client
// stays connected until the tool has stopped (closing first may drop the notice).
await until('the slow tool to stop', () => ran().includes('slow-stopped:g.txt'));

await client.close();
console.log(JSON.stringify(out));
// The 1.x transport keeps an idle connection that holds node for seconds after close.
process.exit(0);

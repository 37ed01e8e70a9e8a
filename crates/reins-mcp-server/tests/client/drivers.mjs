// The door's scenarios, the same on every driver (tests/drivers.rs runs them against a
// server on the local driver and on one whose sessions run on Restate), with the real
// TypeScript SDK at revision 2026-07-28 (MRTR): approve, reject, a late second
// approver, a retried identical answer (twice in a row and twice at once), and cancel
// mid-run. Waits on events: the test's files, never a timer.
// Usage: node drivers.mjs URL DIR
//   DIR/ran.txt   what the agent's tools ran (written by the process that runs them)
//   DIR/decided   touched by the test once it decided as another approver (asked for
//                 with a `DECIDE <session> <requirement>` line on stderr)
import { existsSync, readFileSync } from 'node:fs';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Answers, failure, sleep, text } from './common.mjs';

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

const answers = new Answers();
const client = new Client(
  { name: 'reins-test-drivers', version: '1.0.0' },
  { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: { pin: '2026-07-28' } } },
);
client.setRequestHandler('elicitation/create', async request => answers.handle(request.params));
await client.connect(new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: 'Bearer token-alice' } },
}));
const name = (await client.listTools()).tools[0].name;
const call = (args, opts) => client.callTool({ name, arguments: args }, opts);
const raw = (args, opts) => call(args, { allowInputRequired: true, ...opts });
const retry = (args, first, responses) => client.callTool(
  { name, arguments: args, inputResponses: responses, requestState: first.requestState },
  { allowInputRequired: true },
);
const approveAll = first => Object.fromEntries(Object.keys(first.inputRequests)
  .map(k => [k, { action: 'accept', content: { decision: 'approve' } }]));
const out = {};

// Pause, approve: the tool runs once and the answer says so.
answers.push({ action: 'accept', content: { decision: 'approve' } });
let r = await call({ message: 'delete a.txt' });
out.approve = { text: text(r), isError: r.isError ?? false, session: r.structuredContent?.session };
// Pause, reject: nothing runs; the model is told the note.
answers.push({ action: 'accept', content: { decision: 'reject', note: 'keep it' } });
r = await call({ message: 'delete b.txt' });
out.reject = { text: text(r), isError: r.isError ?? false };

// A late second approver: another person decides in the inbox while this client is
// asked; this client's answer is refused as already decided, and nothing runs again.
const session = out.approve.session;
const lateArgs = { message: 'delete c.txt', session };
const late = await raw(lateArgs);
out.lateAsked = late.resultType;
const lateKey = Object.keys(late.inputRequests)[0];
log(`DECIDE ${session} ${lateKey}`);
await until('the inbox decision', () => existsSync(`${dir}/decided`));
out.late = await failure(retry(lateArgs, late, approveAll(late)));

// A retried identical answer: once in a row (the same requestState and answers again),
// and twice at once on another call. One answer applies; the others are told it was
// already decided; the tool runs once each time.
const againArgs = { message: 'delete d.txt', session };
const again = await raw(againArgs);
const first = await retry(againArgs, again, approveAll(again));
out.retriedFirst = { text: text(first) };
out.retried = await failure(retry(againArgs, again, approveAll(again)));
const racingArgs = { message: 'delete e.txt', session };
const racing = await raw(racingArgs);
out.racing = await Promise.all([
  failure(retry(racingArgs, racing, approveAll(racing))),
  failure(retry(racingArgs, racing, approveAll(racing))),
]);
out.racing = out.racing.map(x => (x.ok ? { ok: true, text: text(x.value) } : x));

// Cancel mid-run: abort the call once the slow tool has started.
const ac = new AbortController();
const slow = failure(call({ message: 'slow g.txt' }, { signal: ac.signal }));
await until('the slow tool to start', () => ran().includes('slow-start:g.txt'));
ac.abort();
out.cancel = await slow;
await until('the slow tool to stop', () => ran().includes('slow-stopped:g.txt'));
// The session goes on after it.
r = await call({ message: 'still there?' });
out.afterCancel = { text: text(r) };

await client.close();
console.log(JSON.stringify(out));

// A reached budget asked through the real TypeScript SDK client (@modelcontextprotocol/sdk
// 1.x, elicitation/create): the budget form extended with a limit of the user's own
// (a first, too low limit is refused and the form asked again), then, on another call,
// the run ended with a note.
// Usage: node budget.mjs http URL [TOKEN]
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { target, text } from './common.mjs';

const t = target(process.argv.slice(2));
// Answers by the kind of the question (a budget form offers extend / end); records
// what was asked.
const queues = { budget: [], confirmation: [] };
const asked = [];
const client = new Client({ name: 'reins-test-budget', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } });
client.setRequestHandler(ElicitRequestSchema, async request => {
  const p = request.params;
  const decisions = p.requestedSchema?.properties?.decision?.enum ?? [];
  const kind = decisions.includes('extend') ? 'budget' : 'confirmation';
  asked.push({ kind, message: p.message, schema: p.requestedSchema });
  return queues[kind].shift() ?? { action: 'cancel' };
});
await client.connect(new StreamableHTTPClientTransport(new URL(t.url), { requestInit: { headers: { Authorization: `Bearer ${t.token}` } } }));
const name = (await client.listTools()).tools[0].name;
const call = args => client.callTool({ name, arguments: args });
const out = {};

queues.confirmation.push({ action: 'accept', content: { decision: 'approve' } });
queues.budget.push({ action: 'accept', content: { decision: 'extend', tokens: 2 } });
queues.budget.push({ action: 'accept', content: { decision: 'extend', tokens: 1000 } });
out.extended = { text: text(await call({ message: 'delete a.txt' })) };

queues.confirmation.push({ action: 'accept', content: { decision: 'approve' } });
queues.budget.push({ action: 'accept', content: { decision: 'end', note: 'enough for today' } });
out.ended = { text: text(await call({ message: 'delete b.txt' })) };

out.asked = asked;
await client.close();
console.log(JSON.stringify(out));

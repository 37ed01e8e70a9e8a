// The real TypeScript SDK client (@modelcontextprotocol/client, revision 2026-07-28)
// calling the agent's tool with a W3C trace context in the request's `_meta`
// (`traceparent`, as OpenTelemetry's MCP conventions put it): a plain call, a call
// that pauses and is approved through MRTR, and a call with a malformed traceparent.
// Usage: node traced.mjs http URL [TOKEN]; TRACEPARENT_PLAIN, TRACEPARENT_APPROVE.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { Answers, target, text } from './common.mjs';

const t = target(process.argv.slice(2));
const answers = new Answers();
const client = new Client(
  { name: 'reins-test-traced', version: '1.0.0' },
  {
    capabilities: { elicitation: { form: {} } },
    versionNegotiation: { mode: { pin: '2026-07-28' } },
  },
);
client.setRequestHandler('elicitation/create', async request => answers.handle(request.params));
const transport = new StreamableHTTPClientTransport(new URL(t.url), {
  requestInit: { headers: { Authorization: `Bearer ${t.token}` } },
});
await client.connect(transport);
const name = (await client.listTools()).tools[0].name;
const call = (message, traceparent) =>
  client.callTool({ name, arguments: { message }, _meta: { traceparent } });

const out = {};
let r = await call('hello there', process.env.TRACEPARENT_PLAIN);
out.plain = { text: text(r), isError: r.isError ?? false };
answers.push({ action: 'accept', content: { decision: 'approve' } });
r = await call('delete a.txt', process.env.TRACEPARENT_APPROVE);
out.approve = { text: text(r), isError: r.isError ?? false };
r = await call('hello again', '00-not-a-trace-context');
out.malformed = { text: text(r), isError: r.isError ?? false };
await client.close();
console.log(JSON.stringify(out));

// The real TypeScript SDK client at revision 2026-07-28 (@modelcontextprotocol/client,
// the SDK's v2 package), pinned to that revision: plain call, pauses answered through
// MRTR (auto-fulfilled by the SDK from its elicitation handler), manual MRTR with a
// tampered / expired / replayed requestState, and cancel mid-run.
// Usage: node modern.mjs http URL [TOKEN] | node modern.mjs stdio COMMAND ARGS...
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { Answers, failure, sleep, target, text } from './common.mjs';

const t = target(process.argv.slice(2));
const answers = new Answers();
const client = new Client(
  { name: 'reins-test-modern', version: '1.0.0' },
  {
    capabilities: { elicitation: { form: {} } },
    versionNegotiation: { mode: { pin: '2026-07-28' } },
  },
);
client.setRequestHandler('elicitation/create', async request => answers.handle(request.params));
const transport = t.kind === 'http'
  ? new StreamableHTTPClientTransport(new URL(t.url), { requestInit: { headers: { Authorization: `Bearer ${t.token}` } } })
  : new StdioClientTransport({ command: t.command, args: t.args, env: { ...process.env }, stderr: 'inherit' });
await client.connect(transport);
const out = { era: client.getNegotiatedProtocolVersion?.() ?? null };

const tools = await client.listTools();
out.tools = tools.tools.map(x => ({ name: x.name, annotations: x.annotations, required: x.inputSchema.required }));
const name = tools.tools[0].name;
const call = (args, opts) => client.callTool({ name, arguments: args }, opts);

// A plain answer.
let r = await call({ message: 'hello there' });
out.plain = { text: text(r), session: r.structuredContent?.session, isError: r.isError ?? false };

// A pause answered approve / reject / input (the SDK fulfils input_required itself).
answers.push({ action: 'accept', content: { decision: 'approve' } });
r = await call({ message: 'delete a.txt' });
out.approve = { text: text(r), isError: r.isError ?? false };
answers.push({ action: 'accept', content: { decision: 'reject', note: 'keep it' } });
r = await call({ message: 'delete b.txt' });
out.reject = { text: text(r) };
answers.push({ action: 'accept', content: { tag: 'blue' } });
r = await call({ message: 'tag c.txt' });
out.input = { text: text(r) };
out.asked = answers.asked;

// Manual MRTR: the raw input_required result, then retries.
const args = { message: 'delete d.txt' };
const first = await call(args, { allowInputRequired: true });
out.manual = { resultType: first.resultType, keys: Object.keys(first.inputRequests ?? {}), hasState: typeof first.requestState === 'string' };
const key = Object.keys(first.inputRequests)[0];
const approve = { [key]: { action: 'accept', content: { decision: 'approve' } } };
const s = first.requestState;
const tampered = s.slice(0, -4) + (s.endsWith('AAAA') ? 'BBBB' : 'AAAA');
out.tampered = await failure(client.callTool({ name, arguments: args, inputResponses: approve, requestState: tampered }, { allowInputRequired: true }));
out.otherArgs = await failure(client.callTool({ name, arguments: { message: 'delete e.txt' }, inputResponses: approve, requestState: s }, { allowInputRequired: true }));
const ok = await client.callTool({ name, arguments: args, inputResponses: approve, requestState: s }, { allowInputRequired: true });
out.retried = { text: text(ok) };
out.replayed = await failure(client.callTool({ name, arguments: args, inputResponses: approve, requestState: s }, { allowInputRequired: true }));

// An expired state (the test server's TTL is 3 s).
const late = await call({ message: 'delete f.txt' }, { allowInputRequired: true });
await sleep(3500);
const lk = Object.keys(late.inputRequests)[0];
out.expired = await failure(client.callTool({ name, arguments: { message: 'delete f.txt' }, inputResponses: { [lk]: { action: 'accept', content: { decision: 'approve' } } }, requestState: late.requestState }, { allowInputRequired: true }));

// Cancel mid-run: abort the call while the slow tool runs.
// Arguments the tool cannot take come back as a tool result with isError (a tool
// execution error the caller can fix); an unknown tool is a JSON-RPC error.
const invalid = async args => { const r = await failure(call(args)); return r.ok ? { ok: true, isError: r.value.isError ?? false, text: text(r.value) } : r; };
out.missingMessage = await invalid({ text: 'no message' });
out.wrongType = await invalid({ message: 42 });
out.foreignSession = await invalid({ message: 'hi', session: 'mcp/mallory/0001' });
out.unknownTool = await failure(client.callTool({ name: 'no_such_tool', arguments: { message: 'hi' } }));

const ac = new AbortController();
setTimeout(() => ac.abort(), 700);
out.cancel = await failure(call({ message: 'slow g.txt' }, { signal: ac.signal }));
await sleep(1200);

await client.close();
console.log(JSON.stringify(out));

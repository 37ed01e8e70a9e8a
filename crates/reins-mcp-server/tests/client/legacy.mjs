// The real TypeScript SDK client before 2026-07-28 (@modelcontextprotocol/sdk 1.x,
// which negotiates 2025-11-25 with `initialize`): plain call, pauses asked with
// elicitation/create while the call waits, and cancel mid-run.
// Usage: node legacy.mjs http URL [TOKEN] | node legacy.mjs stdio COMMAND ARGS...
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { Answers, failure, sleep, target, text } from './common.mjs';

const t = target(process.argv.slice(2));
const answers = new Answers();
const client = new Client({ name: 'reins-test-legacy', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } });
client.setRequestHandler(ElicitRequestSchema, async request => answers.handle(request.params));
const transport = t.kind === 'http'
  ? new StreamableHTTPClientTransport(new URL(t.url), { requestInit: { headers: { Authorization: `Bearer ${t.token}` } } })
  : new StdioClientTransport({ command: t.command, args: t.args, env: { ...process.env }, stderr: 'inherit' });
await client.connect(transport);
const out = { version: transport.protocolVersion ?? null };
const tools = await client.listTools();
out.tools = tools.tools.map(x => ({ name: x.name, annotations: x.annotations }));
const name = tools.tools[0].name;
const call = (args, opts) => client.callTool({ name, arguments: args }, undefined, opts);

let r = await call({ message: 'hello there' });
out.plain = { text: text(r) };
answers.push({ action: 'accept', content: { decision: 'approve' } });
r = await call({ message: 'delete a.txt' });
out.approve = { text: text(r) };
answers.push({ action: 'decline' });
r = await call({ message: 'delete b.txt' });
out.reject = { text: text(r) };
answers.push({ action: 'accept', content: { tag: 'blue' } });
r = await call({ message: 'tag c.txt' });
out.input = { text: text(r) };
out.asked = answers.asked;

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

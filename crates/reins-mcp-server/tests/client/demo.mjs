// The SafeAgent demo served by `cargo xtask serve --mcp stdio|http`, driven by the real
// TypeScript SDK clients (crates/reins-demo/tests/serve_mcp.rs runs it):
// - as a host without elicitation would (the MCP Inspector, @modelcontextprotocol/sdk
//   1.x declaring no capabilities): a call that needs approval comes back paused with the
//   inbox URL where a person decides; the decision is made there (reins-server's API,
//   as the inbox page makes it), and the next call on the session sees the outcome;
// - as a host with elicitation (@modelcontextprotocol/client 2.x at 2026-07-28): the
//   approval is asked as a form and answered in the client.
// Usage: node demo.mjs http URL TOKEN | node demo.mjs stdio COMMAND ARGS...
// (over stdio, the token is read from the server's stderr banner).
import { Client as LegacyClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport as LegacyStdio } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport as LegacyHttp } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { Answers, failure, text } from './common.mjs';

const [kind, ...rest] = process.argv.slice(2);
let token = kind === 'http' ? rest[1] : null;
const out = {};

// Over stdio the server prints its banner (inbox URL, token) on stderr.
// The banner may arrive split across chunks: the token is read from whole lines only
// (a token cut at a chunk's end would be refused with 401).
function watchStderr(transport) {
  let pending = '';
  transport.stderr?.on('data', chunk => {
    pending += String(chunk);
    const lines = pending.split('\n');
    pending = lines.pop();
    for (const line of lines) {
      const m = /^token: (\S+)$/.exec(line.trim());
      if (m) token = m[1];
    }
    process.stderr.write(chunk);
  });
}

const legacy = new LegacyClient({ name: 'reins-demo-test-inspector-like', version: '1.0.0' }, { capabilities: {} });
const legacyTransport = kind === 'http'
  ? new LegacyHttp(new URL(rest[0]))
  : new LegacyStdio({ command: rest[0], args: rest.slice(1), env: { ...process.env }, stderr: 'pipe' });
if (kind !== 'http') watchStderr(legacyTransport);
await legacy.connect(legacyTransport);
const tools = await legacy.listTools();
out.tools = tools.tools.map(t => t.name);
const name = tools.tools[0].name;

// A call that needs approval: the client cannot be asked, so the result says where.
const paused = await legacy.callTool({ name, arguments: { message: 'delete temp.txt' } });
out.paused = { isError: paused.isError ?? false, text: text(paused), structured: paused.structuredContent ?? null };
const session = paused.structuredContent?.session;
const decideAt = paused.structuredContent?.decide_at;

// Arguments the tool cannot take: a result with isError, not a protocol error.
const bad = await failure(legacy.callTool({ name, arguments: { text: 'no message' } }));
out.badArgs = bad.ok ? { isError: bad.value.isError ?? false, text: text(bad.value) } : bad;

// A person decides at the link: the inbox page calls reins-server's API with its token.
for (let i = 0; i < 50 && !token; i++) await new Promise(r => setTimeout(r, 100));
const api = new URL(decideAt);
const sessionUrl = `${api.origin}/v1/sessions/${encodeURIComponent(session)}`;
const auth = { Authorization: `Bearer ${token}` };
const viewResponse = await fetch(sessionUrl, { headers: auth });
const view = await viewResponse.json();
if (!viewResponse.ok) throw new Error(`GET ${sessionUrl}: ${viewResponse.status} ${JSON.stringify(view)}`);
out.pendingInInbox = view.requirements.map(r => r.tool_use.name);
const decided = await fetch(`${sessionUrl}/decisions`, {
  method: 'POST',
  headers: { ...auth, 'Content-Type': 'application/json' },
  body: JSON.stringify({ view_token: view.view_token, decisions: [{ requirement_id: view.requirements[0].id, action: 'approve' }] }),
});
const run = await decided.json();
out.decided = { status: decided.status, runStatus: run.status, text: JSON.stringify(run.message ?? null) };

// The conversation goes on from the MCP client.
const next = await legacy.callTool({ name, arguments: { message: 'what happened?', session } });
out.next = { isError: next.isError ?? false, text: text(next), session: next.structuredContent?.session };
await legacy.close();

// A host that answers questions: the approval is a form, answered in the client.
const answers = new Answers();
const modern = new Client(
  { name: 'reins-demo-test-modern', version: '1.0.0' },
  { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: { pin: '2026-07-28' } } },
);
modern.setRequestHandler('elicitation/create', async request => answers.handle(request.params));
const modernTransport = kind === 'http'
  ? new StreamableHTTPClientTransport(new URL(rest[0]))
  : new StdioClientTransport({ command: rest[0], args: rest.slice(1), env: { ...process.env }, stderr: 'inherit' });
await modern.connect(modernTransport);
answers.push({ action: 'accept', content: { decision: 'approve' } });
const approved = await modern.callTool({ name, arguments: { message: 'delete notes.md' } });
out.elicited = { isError: approved.isError ?? false, text: text(approved), asked: answers.asked.map(a => a.message) };
await modern.close();

console.log(JSON.stringify(out));

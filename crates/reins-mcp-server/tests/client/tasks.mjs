// The Tasks extension (io.modelcontextprotocol/tasks, SEP-2663) with a raw JSON-RPC
// client over streamable HTTP, written from the spec: the published TypeScript SDK
// (@modelcontextprotocol/client 2.4.0) refuses `tasks/get` toward a 2026-07-28 peer
// (it knows only the 2025-11-25 core tasks), so it cannot drive this extension yet.
// Usage:
//   node tasks.mjs flow URL_A URL_B RAN_FILE
//                                     create on A, answer and cancel on B, read on both
//                                     (RAN_FILE: what the tools ran, one per line)
//   node tasks.mjs start URL MESSAGE  create a task, wait for input_required, print it
//   node tasks.mjs get URL TASK_ID    poll until terminal, print the task
//   node tasks.mjs peek URL TASK_ID   one tasks/get, print its status or error
//   node tasks.mjs update URL TASK_ID wait for input_required, approve what it asks
import { existsSync, readFileSync } from 'node:fs';
import { sleep } from './common.mjs';

let nextId = 1;
const META = caps => ({
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientInfo': { name: 'reins-test-tasks', version: '1.0.0' },
  'io.modelcontextprotocol/clientCapabilities': caps ?? {
    elicitation: { form: {} },
    extensions: { 'io.modelcontextprotocol/tasks': {} },
  },
});

export async function rpc(url, method, params, { token = 'token-alice', caps } = {}) {
  const body = { jsonrpc: '2.0', id: nextId++, method, params: { ...params, _meta: META(caps) } };
  const headers = {
    'Content-Type': 'application/json',
    Accept: 'application/json, text/event-stream',
    'MCP-Protocol-Version': '2026-07-28',
    'Mcp-Method': method,
    Authorization: `Bearer ${token}`,
  };
  const name = params.name ?? params.taskId;
  if (name) headers['Mcp-Name'] = name;
  const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body) });
  const type = res.headers.get('content-type') ?? '';
  const raw = await res.text();
  let msg;
  if (type.includes('text/event-stream')) {
    const datas = raw.split('\n').filter(l => l.startsWith('data:')).map(l => l.slice(5).trim()).filter(Boolean);
    msg = datas.map(d => JSON.parse(d)).find(m => m.id === body.id);
  } else {
    msg = JSON.parse(raw);
  }
  if (!msg) throw new Error(`no response to ${method} (HTTP ${res.status}): ${raw}`);
  return msg;
}

async function poll(url, taskId, until, opts) {
  let last;
  for (let i = 0; i < 300; i++) {
    const m = await rpc(url, 'tasks/get', { taskId }, opts);
    if (m.error) return { error: m.error };
    if (until.includes(m.result.status)) return m.result;
    last = m.result;
    await sleep(m.result.pollIntervalMs ?? 100);
  }
  throw new Error(`task ${taskId} never reached ${until}; last: ${JSON.stringify(last)}`);
}

const [cmd, ...args] = process.argv.slice(2);
const call = (url, message) => rpc(url, 'tools/call', { name: 'files', arguments: { message } });
const out = {};
if (cmd === 'flow') {
  const [a, b, ranFile] = args;
  const ran = () => (existsSync(ranFile) ? readFileSync(ranFile, 'utf8').split('\n') : []);
  // Without the extension declared, the call is not a task.
  const plain = await rpc(a, 'tools/call', { name: 'files', arguments: { message: 'hello' } }, { caps: {} });
  out.withoutExtension = plain.result?.resultType ?? null;
  const created = await call(a, 'delete t.txt');
  out.created = { resultType: created.result.resultType, status: created.result.status, taskId: created.result.taskId, pollIntervalMs: created.result.pollIntervalMs };
  const id = created.result.taskId;
  const waiting = await poll(b, id, ['input_required', 'completed', 'failed', 'cancelled']);
  if (waiting.error) throw new Error(`tasks/get on B failed: ${JSON.stringify(waiting.error)}`);
  out.waitingOnB = { status: waiting.status, keys: Object.keys(waiting.inputRequests ?? {}), message: Object.values(waiting.inputRequests ?? {})[0]?.params?.message };
  // Another principal cannot see it.
  out.foreign = (await rpc(b, 'tasks/get', { taskId: id }, { token: 'token-bob' })).error ?? null;
  const key = out.waitingOnB.keys[0];
  out.update = await rpc(b, 'tasks/update', { taskId: id, inputResponses: { [key]: { action: 'accept', content: { decision: 'approve' } } } });
  const done = await poll(a, id, ['completed', 'failed', 'cancelled']);
  out.doneOnA = { status: done.status, text: done.result?.content?.[0]?.text };
  const again = await poll(b, id, ['completed', 'failed', 'cancelled']);
  out.doneOnB = { status: again.status };
  // Cancel from B while A runs the slow tool.
  const slow = await call(a, 'slow s.txt');
  const sid = slow.result.taskId;
  for (let i = 0; !ran().includes('slow-start:s.txt'); i++) {
    if (i > 3000) throw new Error('the slow tool never started');
    await sleep(20);
  }
  out.workingBeforeCancel = (await rpc(b, 'tasks/get', { taskId: sid })).result.status;
  out.cancel = await rpc(b, 'tasks/cancel', { taskId: sid });
  const cancelled = await poll(a, sid, ['completed', 'failed', 'cancelled']);
  out.cancelled = { status: cancelled.status };
  out.unknown = (await rpc(a, 'tasks/get', { taskId: 'mcp/alice/nope' })).error ?? null;
} else if (cmd === 'start') {
  const [url, message] = args;
  const created = await call(url, message);
  const id = created.result.taskId;
  const waiting = await poll(url, id, ['input_required', 'completed', 'failed', 'cancelled']);
  out.taskId = id;
  out.status = waiting.status;
} else if (cmd === 'get') {
  const [url, id] = args;
  const done = await poll(url, id, ['completed', 'failed', 'cancelled']);
  out.status = done.status;
  out.text = done.result?.content?.[0]?.text;
} else if (cmd === 'peek') {
  const [url, id] = args;
  const m = await rpc(url, 'tasks/get', { taskId: id });
  out.status = m.result?.status ?? null;
  out.error = m.error ?? null;
} else if (cmd === 'update') {
  const [url, id] = args;
  const waiting = await poll(url, id, ['input_required']);
  const key = Object.keys(waiting.inputRequests)[0];
  out.update = await rpc(url, 'tasks/update', { taskId: id, inputResponses: { [key]: { action: 'accept', content: { decision: 'approve' } } } });
} else {
  throw new Error(`unknown command ${cmd}`);
}
console.log(JSON.stringify(out));

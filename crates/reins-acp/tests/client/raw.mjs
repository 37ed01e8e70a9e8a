// Bad JSON-RPC, written byte for byte (the SDK never sends it): each line must get the
// protocol's error, valid under the pinned ACP schema. stdin/stdout are the wire.
// Usage: node raw.mjs <work dir>; writes <work dir>/result.json.
import { writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { Validator } from './schema.mjs';

const [dir] = process.argv.slice(2);
const validator = new Validator();
const lines = [
  ['parse', '{not json'],
  // Not UTF-8 (0xff 0xfe inside a string): a parse error, and the agent keeps serving
  // the lines after it.
  ['notUtf8', Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":9,"method":"initialize","params":{"x":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}}')])],
  ['batch', '[{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}]'],
  ['version', '{"jsonrpc":"1.0","id":2,"method":"initialize"}'],
  ['beforeInit', '{"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd":"/p","mcpServers":[]}}'],
  ['noProtocolVersion', '{"jsonrpc":"2.0","id":4,"method":"initialize","params":{}}'],
  ['futureVersion', '{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":99,"clientCapabilities":{}}}'],
  ['unknownMethod', '{"jsonrpc":"2.0","id":6,"method":"nope/never"}'],
  ['unknownSession', '{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"sessionId":"acp/x/y","prompt":[{"type":"text","text":"hi"}]}}'],
  ['noSessionId', '{"jsonrpc":"2.0","id":8,"method":"session/prompt","params":{"prompt":[]}}'],
];
const got = [];
const rl = createInterface({ input: process.stdin });
const done = new Promise(resolve => {
  rl.on('line', line => {
    const m = JSON.parse(line);
    validator.check(m);
    got.push(m);
    if (got.length === lines.length) resolve();
  });
  // The agent stopped (it should not): what it answered is the result.
  rl.on('close', resolve);
});
for (const [, line] of lines) {
  try { if (typeof line === 'string') validator.sent(JSON.parse(line)); } catch { /* not JSON: nothing to remember */ }
  process.stdout.write(Buffer.isBuffer(line) ? Buffer.concat([line, Buffer.from('\n')]) : line + '\n');
}
await done;
const out = { responses: got, validated: validator.count, invalid: validator.invalid, names: lines.map(l => l[0]) };
writeFileSync(`${dir}/result.json`, JSON.stringify(out, null, 1));
rl.close();
process.stdin.destroy();

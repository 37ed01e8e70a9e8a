// Validates what the agent sends against the ACP JSON schema of the pinned version
// (tests/fixtures/acp-schema-v1.json, copied from @agentclientprotocol/sdk's
// schema/v1/schema.json): each message as an agent message, and its params, result or
// error against the definition for its method (the schema's x-method / x-side).
import { readFileSync } from 'node:fs';
import Ajv2020Module from 'ajv/dist/2020.js';

const Ajv2020 = Ajv2020Module.default ?? Ajv2020Module;
const schemaPath = new URL('../fixtures/acp-schema-v1.json', import.meta.url);

export class Validator {
  constructor() {
    const schema = JSON.parse(readFileSync(schemaPath, 'utf8'));
    const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
    const agentMessage = schema.anyOf.find(v => v.title === 'Agent');
    ajv.addSchema({ $id: 'acp', $defs: schema.$defs, ...agentMessage });
    this.message = ajv.getSchema('acp');
    this.def = name => ajv.getSchema(`acp#/$defs/${name}`);
    // method -> definition, for what the agent sends.
    this.requests = new Map();
    this.notifications = new Map();
    this.responses = new Map();
    for (const [name, d] of Object.entries(schema.$defs)) {
      const m = d['x-method'];
      if (!m) continue;
      if (d['x-side'] === 'client' && name.endsWith('Request')) this.requests.set(m, name);
      if (d['x-side'] === 'client' && name.endsWith('Notification')) this.notifications.set(m, name);
      if (d['x-side'] === 'agent' && name.endsWith('Response')) this.responses.set(m, name);
    }
    this.pending = new Map(); // id of a request this client sent -> method
    this.count = 0;
    this.invalid = [];
  }

  // A message this client sends (remembered to validate the agent's answer).
  sent(m) {
    if (m && m.method !== undefined && m.id !== undefined) this.pending.set(m.id, m.method);
  }

  fail(m, what, errors) {
    this.invalid.push({ message: m, what, errors });
  }

  // A message the agent sent.
  check(m) {
    this.count += 1;
    if (!this.message(m)) return this.fail(m, 'agent message', this.message.errors);
    if (m.method !== undefined) {
      const table = m.id !== undefined ? this.requests : this.notifications;
      const name = table.get(m.method);
      if (!name) return this.fail(m, `no schema for agent-sent ${m.method}`, []);
      const v = this.def(name);
      if (!v(m.params)) this.fail(m, name, v.errors);
      return;
    }
    const method = this.pending.get(m.id);
    this.pending.delete(m.id);
    if (m.error !== undefined) {
      const v = this.def('Error');
      if (!v(m.error)) this.fail(m, 'Error', v.errors);
      return;
    }
    if (method === undefined) return this.fail(m, 'a response to no request of this client', []);
    const name = this.responses.get(method);
    if (!name) return this.fail(m, `no schema for the response to ${method}`, []);
    const v = this.def(name);
    if (!v(m.result)) this.fail(m, name, v.errors);
  }
}

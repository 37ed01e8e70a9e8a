// Shared by the test clients: connect over stdio or HTTP, answer questions from a queue.
export function target(args) {
  const [kind, ...rest] = args;
  if (kind === 'http') return { kind, url: rest[0], token: rest[1] ?? 'token-alice' };
  if (kind === 'stdio') return { kind, command: rest[0], args: rest.slice(1) };
  throw new Error(`unknown transport ${kind}`);
}

// Answers elicitation/create from a queue the scenario fills; records what was asked.
export class Answers {
  constructor() { this.queue = []; this.asked = []; }
  push(a) { this.queue.push(a); }
  handle(params) {
    this.asked.push({ message: params.message, schema: params.requestedSchema, meta: params._meta ?? null });
    const next = this.queue.shift();
    if (!next) return { action: 'cancel' };
    return next;
  }
}

export function text(result) {
  return (result.content ?? []).filter(c => c.type === 'text').map(c => c.text).join('\n');
}

export async function failure(promise) {
  try {
    const r = await promise;
    return { ok: true, value: r };
  } catch (e) {
    return { ok: false, code: e.code ?? null, message: String(e.message ?? e), data: e.data ?? null };
  }
}

export const sleep = ms => new Promise(r => setTimeout(r, ms));

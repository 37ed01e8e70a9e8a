// JSON Schema checks in the page, so that a person sees a mistake before anything is
// sent (the server checks again: what it refuses is shown too), and a line diff of two
// JSON values for edited arguments.
"use strict";

function typeOf(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v;
}

function typeOk(v, t) {
  const ts = Array.isArray(t) ? t : [t];
  const got = typeOf(v);
  return ts.some(x => x === got || (x === "number" && got === "integer"));
}

// The problems of `value` against `schema`, each a sentence naming where it is
// (`quantity: must be at least 1`); `path` is "" for the whole value.
function checkSchema(value, schema, path) {
  const problems = [];
  if (!schema || typeof schema !== "object") return problems;
  const at = path || "arguments";
  if (schema.type && !typeOk(value, schema.type)) {
    problems.push(`${at}: expected ${[].concat(schema.type).join(" or ")}, got ${typeOf(value)}`);
    return problems;
  }
  if (schema.enum && !schema.enum.some(e => JSON.stringify(e) === JSON.stringify(value)))
    problems.push(`${at}: must be one of ${schema.enum.map(e => JSON.stringify(e)).join(", ")}`);
  const t = typeOf(value);
  if (t === "integer" || t === "number") {
    if (typeof schema.minimum === "number" && value < schema.minimum) problems.push(`${at}: must be at least ${schema.minimum}`);
    if (typeof schema.maximum === "number" && value > schema.maximum) problems.push(`${at}: must be at most ${schema.maximum}`);
    if (typeof schema.exclusiveMinimum === "number" && value <= schema.exclusiveMinimum) problems.push(`${at}: must be more than ${schema.exclusiveMinimum}`);
    if (typeof schema.exclusiveMaximum === "number" && value >= schema.exclusiveMaximum) problems.push(`${at}: must be less than ${schema.exclusiveMaximum}`);
  }
  if (t === "string") {
    const len = [...value].length;
    if (typeof schema.minLength === "number" && len < schema.minLength) problems.push(`${at}: must be at least ${plural(schema.minLength, "character")} long`);
    if (typeof schema.maxLength === "number" && len > schema.maxLength) problems.push(`${at}: must be at most ${plural(schema.maxLength, "character")} long`);
    if (typeof schema.pattern === "string") {
      let re = null;
      try { re = new RegExp(schema.pattern, "u"); } catch (_) { /* the server judges patterns it can read */ }
      if (re && !re.test(value)) problems.push(`${at}: must match the pattern ${schema.pattern}`);
    }
  }
  if (t === "array") {
    if (typeof schema.minItems === "number" && value.length < schema.minItems) problems.push(`${at}: needs at least ${plural(schema.minItems, "item")}`);
    if (typeof schema.maxItems === "number" && value.length > schema.maxItems) problems.push(`${at}: takes at most ${plural(schema.maxItems, "item")}`);
    if (schema.items && typeof schema.items === "object" && !Array.isArray(schema.items))
      value.forEach((item, i) => problems.push(...checkSchema(item, schema.items, `${at}[${i}]`)));
  }
  if (t === "object") {
    for (const r of schema.required || [])
      if (!(r in value)) problems.push(`${path ? path + ": " : ""}missing required field \`${r}\``);
    const props = schema.properties || {};
    for (const [k, v] of Object.entries(value)) {
      if (props[k]) problems.push(...checkSchema(v, props[k], path ? `${path}.${k}` : k));
      else if (schema.additionalProperties === false) problems.push(`${path ? path + ": " : ""}unknown field \`${k}\``);
    }
  }
  return problems;
}

// A line diff of two pretty-printed JSON values (longest common subsequence).
function diffLines(a, b) {
  const x = a.split("\n"), y = b.split("\n");
  const n = x.length, m = y.length;
  const L = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--)
    L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = []; let i = 0, j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { i++; j++; }
    else if (L[i + 1][j] >= L[i][j + 1]) out.push(["del", x[i++]]);
    else out.push(["add", y[j++]]);
  }
  while (i < n) out.push(["del", x[i++]]);
  while (j < m) out.push(["add", y[j++]]);
  return out;
}

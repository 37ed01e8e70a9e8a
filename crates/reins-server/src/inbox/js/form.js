// The user-input form: one control per field of a requirement's JSON Schema (`fields`),
// each read as the type the schema asks for, so the server receives numbers, booleans
// and the chosen enum values, not strings. Integers and numbers are text boxes read as
// numbers, booleans checkboxes (always sent: unchecked is false), enums selects, other
// strings text boxes; objects, arrays and fields of several types are a JSON text box,
// parsed before sending. Defaults are filled in, required fields are marked, an empty
// optional field is left out, and a wrong field says why next to it (nothing is sent).
"use strict";

let formSeq = 0;

// Follows `$ref`s into the form's own schema (`#/$defs/Size`), a few levels at most.
function resolveSchema(schema, root) {
  let s = schema && typeof schema === "object" ? schema : {};
  for (let i = 0; i < 8 && typeof s.$ref === "string" && s.$ref.startsWith("#/"); i++) {
    let target = root;
    for (const key of s.$ref.slice(2).split("/")) {
      const k = key.replace(/~1/g, "/").replace(/~0/g, "~");
      target = target && typeof target === "object" ? target[k] : undefined;
    }
    if (!target || typeof target !== "object") break;
    const { $ref, ...here } = s;
    s = Object.assign({}, target, here);
  }
  // An optional value written `anyOf: [X, {"type": "null"}]` (a schema generator's
  // `Option<T>`) is asked for as X.
  const alts = s.anyOf || s.oneOf;
  if (Array.isArray(alts) && s.type === undefined && s.enum === undefined) {
    const real = alts.filter(a => !(a && a.type === "null"));
    if (real.length === 1 && real[0] && typeof real[0] === "object") {
      const inner = resolveSchema(real[0], root);
      const outer = {};
      for (const k of ["title", "description", "default"]) if (s[k] !== undefined) outer[k] = s[k];
      return Object.assign({}, inner, outer);
    }
  }
  return s;
}

// How a field is asked for: "enum", "boolean", "integer", "number", "string" or "json".
function fieldKind(s) {
  if (Array.isArray(s.enum) && s.enum.length) return "enum";
  const types = [].concat(s.type || []).filter(t => t !== "null");
  if (types.length === 1 && ["boolean", "integer", "number", "string"].includes(types[0])) return types[0];
  return "json";
}

function renderInputForm(fields) {
  const root = fields && typeof fields === "object" ? fields : {};
  const form = document.createElement("div");
  form.className = "input-form";
  const props = root.properties && typeof root.properties === "object" ? root.properties : {};
  const required = new Set(Array.isArray(root.required) ? root.required : []);
  // Required fields first, in the order the schema lists them (`required` is an
  // array: its order survives where an object's key order may not).
  const names = [...new Set([...required, ...Object.keys(props)])];
  // No named fields: the whole answer is one JSON object.
  if (!names.length) form.appendChild(fieldRow(null, { type: "object" }, true, root));
  for (const name of names) form.appendChild(fieldRow(name, props[name], required.has(name), root));
  return form;
}

function fieldRow(name, raw, required, root) {
  const s = resolveSchema(raw, root);
  const kind = fieldKind(s);
  const row = document.createElement("div");
  row.className = "field";
  row.dataset.kind = kind;
  if (name !== null) row.dataset.name = name;
  row.schema = s;
  row.required = required;
  const id = "input-" + (++formSeq);
  const label = document.createElement("label");
  label.htmlFor = id;
  const title = document.createElement("span");
  title.className = "fname";
  title.textContent = s.title || (name === null ? "values (a JSON object)" : name);
  label.appendChild(title);
  const mark = document.createElement("span");
  mark.className = required ? "req" : "opt";
  mark.textContent = required ? " *" : " (optional)";
  mark.title = required ? "required" : "may be left empty";
  label.appendChild(mark);
  if (s.description) {
    const d = document.createElement("span");
    d.className = "desc";
    d.textContent = " — " + s.description;
    label.appendChild(d);
  }
  const has = s.default !== undefined;
  let input;
  if (kind === "boolean") {
    input = document.createElement("input");
    input.type = "checkbox";
    input.checked = s.default === true;
    row.classList.add("check");
    label.prepend(input);
  } else if (kind === "enum") {
    input = document.createElement("select");
    if (!required || !has) input.add(new Option(required ? "— choose —" : "— none —", ""));
    s.enum.forEach((v, i) => {
      const o = new Option(typeof v === "string" ? v : JSON.stringify(v), String(i));
      if (has && JSON.stringify(v) === JSON.stringify(s.default)) o.selected = true;
      input.add(o);
    });
  } else if (kind === "json") {
    input = document.createElement("textarea");
    input.spellcheck = false;
    const types = [].concat(s.type || []);
    input.placeholder = types.includes("array") ? 'JSON, e.g. ["a", "b"]'
      : types.includes("object") ? 'JSON, e.g. {"key": "value"}' : "JSON, e.g. \"text\", 3 or true";
    if (has) input.value = pretty(s.default);
  } else {
    input = document.createElement("input");
    input.type = "text";
    if (kind === "integer") { input.inputMode = "numeric"; input.placeholder = "a whole number"; }
    if (kind === "number") { input.inputMode = "decimal"; input.placeholder = "a number"; }
    if (kind === "string" && s.format) input.placeholder = s.format;
    if (has) input.value = typeof s.default === "string" ? s.default : JSON.stringify(s.default);
  }
  input.id = id;
  input.classList.add("input-field");
  if (required) input.setAttribute("aria-required", "true");
  const problem = document.createElement("div");
  problem.className = "field-problem";
  problem.hidden = true;
  problem.id = id + "-problem";
  input.setAttribute("aria-describedby", problem.id);
  if (kind !== "boolean") row.append(label, input, problem); else row.append(label, problem);
  // A field marked wrong is checked again as it is corrected.
  const recheck = () => { if (row.classList.contains("invalid")) checkField(row); };
  input.addEventListener("input", recheck);
  input.addEventListener("change", recheck);
  return row;
}

// A field's value as its schema's type: `{value}`, `{}` when empty, or `{problem}`.
function readField(row) {
  const el = $(".input-field", row);
  const text = el.type === "checkbox" ? "" : el.value.trim();
  switch (row.dataset.kind) {
    case "boolean": return { value: el.checked };
    case "enum": return el.value === "" ? {} : { value: row.schema.enum[Number(el.value)] };
    case "integer": {
      if (!text) return {};
      if (!/^[-+]?\d+$/.test(text)) return { problem: `"${text}" is not a whole number` };
      const n = Number(text);
      return Number.isSafeInteger(n) ? { value: n } : { problem: `${text} is too large to send exactly` };
    }
    case "number": {
      if (!text) return {};
      if (!/^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$/.test(text))
        return { problem: `"${text}" is not a number (write it like 2.5)` };
      const n = Number(text);
      return Number.isFinite(n) ? { value: n } : { problem: `${text} is too large` };
    }
    case "string": return text ? { value: text } : {};
    default: {
      if (!text) return {};
      try { return { value: JSON.parse(text) }; }
      catch (e) { return { problem: "not valid JSON: " + e.message }; }
    }
  }
}

// Reads one field and shows what is wrong with it, next to it.
function checkField(row) {
  const name = row.dataset.name;
  const got = readField(row);
  let problems = [];
  if (got.problem) problems.push(got.problem);
  else if (got.value === undefined) { if (row.required) problems.push("required: fill this in"); }
  else if (name === undefined && typeOf(got.value) !== "object") problems.push("expected a JSON object");
  else problems = checkSchema(got.value, row.schema, name || "").map(p => p.startsWith(name + ": ") ? p.slice(name.length + 2) : p);
  const p = $(".field-problem", row);
  p.hidden = problems.length === 0;
  p.textContent = problems.join("; ");
  row.classList.toggle("invalid", problems.length > 0);
  $(".input-field", row).setAttribute("aria-invalid", String(problems.length > 0));
  return { value: got.value, ok: problems.length === 0 };
}

// The form's values, typed by the schema; null when a field is wrong (it says why, and
// the first one gets the focus).
function readInputForm(form) {
  const values = {};
  let first = null;
  for (const row of form.querySelectorAll(".field")) {
    const { value, ok } = checkField(row);
    if (!ok) { first = first || row; continue; }
    if (value === undefined) continue;
    if (row.dataset.name === undefined) Object.assign(values, value);
    else values[row.dataset.name] = value;
  }
  if (first) { $(".input-field", first).focus(); return null; }
  return values;
}

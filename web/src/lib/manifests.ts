// Multi-document YAML as the bundle editor sees it: documents with the kind, namespace and name
// of the object each holds, and the hub's validation problems attached to the document they
// name, at the line they are about. Each document is parsed as YAML (block or flow style alike)
// only to read its kind and metadata and to find lines; the hub does the validation.
import { parse } from "yaml";
import { problemLine, splitProblems } from "./problemLines";

export interface Doc {
  text: string;
  kind: string;
  name: string;
  namespace: string;
}

const separator = /^---(\s.*)?$/;

export function splitDocs(manifests: string): string[] {
  const docs: string[] = [];
  let cur: string[] = [];
  for (const line of manifests.split("\n")) {
    if (separator.test(line)) {
      docs.push(cur.join("\n"));
      cur = [];
    } else cur.push(line);
  }
  docs.push(cur.join("\n"));
  // Keep documents with content; a file starting with "---" yields an empty first one.
  const kept = docs.map((d) => d.replace(/^\n+|\s+$/g, "")).filter((d) => d.trim() !== "");
  return kept.length ? kept : [""];
}

export function joinDocs(docs: string[]): string {
  return docs.map((d) => d.replace(/\s+$/, "")).filter((d) => d.trim() !== "").join("\n---\n") + "\n";
}

function unquote(v: string): string {
  const t = v.replace(/\s+#.*$/, "").trim();
  if ((t.startsWith('"') && t.endsWith('"')) || (t.startsWith("'") && t.endsWith("'"))) return t.slice(1, -1);
  return t;
}

function str(v: unknown): string {
  return typeof v === "string" ? v : typeof v === "number" ? String(v) : "";
}

/**
 * describeDoc reads kind, metadata.name and metadata.namespace with a YAML parser, so that
 * `metadata: {name: web}` is read like its block form. A document that does not parse yet
 * (someone is typing) falls back to a line scan of block style.
 */
export function describeDoc(text: string): Doc {
  // A pasted text not split yet is named by its first document.
  const first = splitDocs(text)[0];
  let obj: unknown;
  try {
    obj = parse(first, { prettyErrors: false, strict: false });
  } catch {
    return { ...scanDoc(first), text };
  }
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) return { text, kind: "", name: "", namespace: "" };
  const o = obj as Record<string, unknown>;
  const meta = o.metadata !== null && typeof o.metadata === "object" ? (o.metadata as Record<string, unknown>) : {};
  return { text, kind: str(o.kind), name: str(meta.name), namespace: str(meta.namespace) };
}

function scanDoc(text: string): Doc {
  let kind = "";
  let name = "";
  let namespace = "";
  let inMetadata = false;
  let metaIndent = -1;
  for (const line of text.split("\n")) {
    if (/^\s*(#.*)?$/.test(line)) continue;
    const indent = line.length - line.trimStart().length;
    if (indent === 0) {
      inMetadata = /^metadata:\s*(#.*)?$/.test(line);
      metaIndent = -1;
      const k = line.match(/^kind:\s*(.+)$/);
      if (k) kind = unquote(k[1]);
      continue;
    }
    if (!inMetadata) continue;
    if (metaIndent < 0) metaIndent = indent;
    if (indent !== metaIndent) continue;
    const n = line.trim().match(/^name:\s*(.+)$/);
    if (n) name = unquote(n[1]);
    const ns = line.trim().match(/^namespace:\s*(.+)$/);
    if (ns) namespace = unquote(ns[1]);
  }
  return { text, kind, name, namespace };
}

export function docTitle(d: Doc, index: number): string {
  if (!d.kind && !d.name) return `document ${index + 1}`;
  return `${d.kind || "?"} ${d.namespace ? d.namespace + "/" : ""}${d.name || "?"}`;
}

export interface Problem {
  /** The object the hub named ("KollectProfile team-a/web"), or "" for a bundle-wide problem. */
  subject: string;
  message: string;
  /** Index of the document the problem belongs to, or -1 when none could be identified. */
  doc: number;
  /** The 1-based line of that document the problem is about, or 0 when it has no document. */
  line: number;
}

/**
 * attachProblems reads the hub's InvalidArgument message ("invalid bundle:" then one line per
 * offending object: "Kind namespace/name: ...", "Kind name: ..." or "document N: ...") and
 * finds the document each line is about. An object's line holds all its problems, joined
 * with "; "; each becomes a problem of its own, at the line of the document it is about.
 */
export function attachProblems(message: string, docs: Doc[]): Problem[] {
  // A problem can span lines: a CEL compile error ends with the expression and a caret under
  // the offending column (" | object.spec…", " | ….^"), and a second error of the same
  // expression starts "ERROR: <input>". Such lines continue the problem above them; they are
  // not problems of their own.
  const lines: string[] = [];
  for (const raw of message.split("\n")) {
    if (!raw.trim()) continue;
    if (lines.length && /^(\s|\||ERROR: <input>)/.test(raw) && !lines[lines.length - 1].startsWith("invalid bundle:")) {
      lines[lines.length - 1] += "\n" + raw.trimEnd();
    } else lines.push(raw.trim());
  }
  if (lines[0]?.startsWith("invalid bundle:")) {
    const rest = lines[0].slice("invalid bundle:".length).trim();
    lines.splice(0, 1, ...(rest ? [rest] : []));
  }
  return lines.flatMap((line) => {
    const { subject, message, doc } = placeLine(line, docs);
    if (doc < 0) return [{ subject, message, doc, line: 0 }];
    return splitProblems(message).map((m) => ({ subject, message: m, doc, line: problemLine(docs[doc].text, m) }));
  });
}

/** The object one line of the hub's message names, and the document that holds it. */
function placeLine(line: string, docs: Doc[]): { subject: string; message: string; doc: number } {
  // "document N" names a document without a kind: one that is not YAML or not an object
  // ("document N is not an object: …"), or an object without a kind ("document N name: …").
  const notObject = line.match(/^(document (\d+)) is not an object:\s*([\s\S]*)$/);
  const docNum = notObject ?? line.match(/^(document (\d+)(?: [^\s:]+)?):\s*([\s\S]*)$/);
  if (docNum) {
    const i = Number(docNum[2]) - 1;
    const message = (notObject ? "not an object: " : "") + docNum[3];
    return { subject: docNum[1], message, doc: i < docs.length ? i : -1 };
  }
  const obj = line.match(/^(\S+) (?:([^\s/:]+)\/)?([^\s/:]+): ([\s\S]*)$/);
  if (!obj) return { subject: "", message: line, doc: -1 };
  const [, kind, ns = "", name, msg] = obj;
  let doc = docs.findIndex((d) => d.kind === kind && d.name === name && d.namespace === ns);
  if (doc < 0) doc = docs.findIndex((d) => d.kind === kind && d.name === name);
  return { subject: `${kind} ${ns ? ns + "/" : ""}${name}`, message: msg, doc };
}

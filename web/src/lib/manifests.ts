// Multi-document YAML as the bundle editor sees it: documents with the kind, namespace and name
// of the object each holds, and the hub's validation problems attached to the document they
// name. Only what the editor needs is read (top-level kind, metadata.name/namespace); the hub
// does the real parsing and validation.

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

export function describeDoc(text: string): Doc {
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
}

/**
 * attachProblems reads the hub's InvalidArgument message ("invalid bundle:" then one line per
 * offending object: "Kind namespace/name: ...", "Kind name: ..." or "document N: ...") and
 * finds the document each line is about.
 */
export function attachProblems(message: string, docs: Doc[]): Problem[] {
  const lines = message.split("\n").map((l) => l.trim()).filter(Boolean);
  if (lines[0]?.startsWith("invalid bundle:")) {
    const rest = lines[0].slice("invalid bundle:".length).trim();
    lines.splice(0, 1, ...(rest ? [rest] : []));
  }
  return lines.map((line) => {
    const docNum = line.match(/^document (\d+)(?: is not an object)?:\s*(.*)$/);
    if (docNum) {
      const i = Number(docNum[1]) - 1;
      return { subject: `document ${docNum[1]}`, message: docNum[2] || line, doc: i < docs.length ? i : -1 };
    }
    const obj = line.match(/^(\S+) (?:([^\s/:]+)\/)?([^\s/:]+): (.*)$/);
    if (!obj) return { subject: "", message: line, doc: -1 };
    const [, kind, ns = "", name, msg] = obj;
    let doc = docs.findIndex((d) => d.kind === kind && d.name === name && d.namespace === ns);
    if (doc < 0) doc = docs.findIndex((d) => d.kind === kind && d.name === name);
    return { subject: `${kind} ${ns ? ns + "/" : ""}${name}`, message: msg, doc };
  });
}

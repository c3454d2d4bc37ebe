// Where in a document the hub's problems are: the hub names an object and a field path
// ("spec.attributes[1] (images).cel: …") or, for a document that is not valid YAML, a line
// ("yaml: line 6: …"); the editor shows each problem at its line. The line is found in the
// document's own text with a YAML parser, which keeps the position of every key.
import { isMap, isPair, isScalar, isSeq, parseDocument } from "yaml";

// A field path as the hub writes it: dotted names, [index] or [key] (a key with dots), and an
// attribute's name in parentheses after its index.
const pathPrefix = /^[A-Za-z_$][\w$-]*(?:\[[^\]]*\]| \([^)]*\)|\.[A-Za-z_$][\w$-]*)*/;
// What starts a problem of the hub: a field path and ":" (or the words the hub writes after
// metadata fields), or one of its sentences about the whole object.
const problemStart = new RegExp(
  `^(?:${pathPrefix.source.slice(1)}(?::| is required| must be empty)|appears more than once|unknown kind |\\S+ has no version )`,
);

/**
 * splitProblems splits the problems the hub joins with "; " on one object's line. A "; " that
 * is not followed by the start of a problem belongs to the message it is in.
 */
export function splitProblems(message: string): string[] {
  const out: string[] = [];
  for (const part of message.split("; ")) {
    if (out.length && !problemStart.test(part)) out[out.length - 1] += "; " + part;
    else out.push(part);
  }
  return out;
}

/** The path segments of a field path: names, and numbers for indexes. */
export function parsePath(path: string): (string | number)[] {
  const segs: (string | number)[] = [];
  for (const m of path.matchAll(/\[([^\]]*)\]|\(([^)]*)\)|([^.[\]\s()]+)/g)) {
    if (m[2] !== undefined) continue; // "(images)" names the item before it
    if (m[1] !== undefined) segs.push(/^\d+$/.test(m[1]) ? Number(m[1]) : m[1]);
    else segs.push(m[3]);
  }
  return segs;
}

/** The field path a problem is about, as segments; empty when it names none. */
function problemPath(problem: string): (string | number)[] {
  if (/^unknown kind /.test(problem)) return ["kind"];
  if (/^\S+ has no version /.test(problem)) return ["apiVersion"];
  if (/^appears more than once/.test(problem)) return ["metadata", "name"];
  const m = problem.match(pathPrefix);
  return m ? parsePath(m[0]) : [];
}

function lineAt(text: string, offset: number): number {
  let line = 1;
  for (let i = 0; i < offset && i < text.length; i++) if (text[i] === "\n") line++;
  return line;
}

/** The first line with content (not blank, not only a comment), or 1. */
function firstContentLine(text: string): number {
  const i = text.split("\n").findIndex((l) => !/^\s*(#.*)?$/.test(l));
  return i < 0 ? 1 : i + 1;
}

/**
 * problemLine returns the 1-based line of doc a problem is about: the line the hub gives for a
 * YAML error, else the line of the deepest key of the problem's field path that the document
 * has (a missing field is shown at its parent), else the document's first line with content.
 */
export function problemLine(doc: string, problem: string): number {
  const yamlLine = problem.match(/\byaml: line (\d+):/);
  if (yamlLine) return Math.min(Number(yamlLine[1]), Math.max(1, doc.split("\n").length));
  const path = problemPath(problem);
  let line = 0;
  if (path.length) {
    const parsed = parseDocument(doc, { prettyErrors: false, strict: false, uniqueKeys: false });
    let node: unknown = parsed.contents;
    for (const seg of path) {
      let next: unknown;
      let at: number | undefined;
      if (isMap(node)) {
        const pair = node.items.find((p) => isPair(p) && isScalar(p.key) && String(p.key.value) === String(seg));
        if (pair) {
          next = pair.value;
          at = isScalar(pair.key) ? pair.key.range?.[0] : undefined;
        }
      } else if (isSeq(node) && typeof seg === "number") {
        next = node.items[seg];
        at = (next as { range?: [number, number, number] } | undefined)?.range?.[0];
      }
      if (at === undefined) break;
      line = lineAt(doc, at);
      node = next;
    }
  }
  return line || firstContentLine(doc);
}

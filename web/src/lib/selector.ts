// Cluster label selectors as people type them ("env=prod, tier in (a,b), !legacy") and as the
// protocol carries them (matchLabels + matchExpressions, Kubernetes semantics).
import { create } from "@bufbuild/protobuf";
import {
  LabelSelectorRequirementSchema,
  LabelSelectorSchema,
  type LabelSelector,
  type LabelSelectorRequirement,
} from "../gen/kollect/fleet/v1/types_pb";

function req(key: string, operator: string, values: string[] = []): LabelSelectorRequirement {
  return create(LabelSelectorRequirementSchema, { key, operator, values });
}

/** Splits on commas that are not inside parentheses. */
function terms(text: string): string[] {
  const out: string[] = [];
  let depth = 0;
  let cur = "";
  for (const ch of text) {
    if (ch === "(") depth++;
    if (ch === ")") depth--;
    if (ch === "," && depth === 0) {
      out.push(cur);
      cur = "";
    } else cur += ch;
  }
  out.push(cur);
  return out.map((t) => t.trim()).filter(Boolean);
}

/** parseSelector throws an Error naming the term it cannot read. */
export function parseSelector(text: string): LabelSelector {
  const sel = create(LabelSelectorSchema);
  for (const term of terms(text)) {
    let m: RegExpMatchArray | null;
    if ((m = term.match(/^([^\s=!()]+)\s+(in|notin)\s+\(([^)]*)\)$/i))) {
      const values = m[3].split(",").map((v) => v.trim()).filter(Boolean);
      sel.matchExpressions.push(req(m[1], m[2].toLowerCase() === "in" ? "In" : "NotIn", values));
    } else if ((m = term.match(/^([^\s=!()]+)\s*!=\s*([^\s=!()]*)$/))) {
      sel.matchExpressions.push(req(m[1], "NotIn", [m[2]]));
    } else if ((m = term.match(/^([^\s=!()]+)\s*==?\s*([^\s=!()]*)$/))) {
      sel.matchLabels[m[1]] = m[2];
    } else if ((m = term.match(/^!\s*([^\s=!()]+)$/))) {
      sel.matchExpressions.push(req(m[1], "DoesNotExist"));
    } else if ((m = term.match(/^([^\s=!()]+)$/))) {
      sel.matchExpressions.push(req(m[1], "Exists"));
    } else {
      throw new Error(`cannot read selector term "${term}" (use key=value, key!=value, key in (a,b), key notin (a,b), key or !key)`);
    }
  }
  return sel;
}

export function formatSelector(sel: LabelSelector | undefined): string {
  if (!sel) return "";
  const parts = Object.entries(sel.matchLabels)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${v}`);
  for (const e of sel.matchExpressions) {
    switch (e.operator) {
      case "In":
        parts.push(`${e.key} in (${e.values.join(",")})`);
        break;
      case "NotIn":
        parts.push(e.values.length === 1 ? `${e.key}!=${e.values[0]}` : `${e.key} notin (${e.values.join(",")})`);
        break;
      case "Exists":
        parts.push(e.key);
        break;
      case "DoesNotExist":
        parts.push(`!${e.key}`);
        break;
      default:
        parts.push(`${e.key} ${e.operator} (${e.values.join(",")})`);
    }
  }
  return parts.join(", ");
}

/** Whether labels satisfy a selector (used only for previews; the hub decides). */
export function selects(sel: LabelSelector | undefined, labels: Record<string, string>): boolean {
  if (!sel) return true;
  for (const [k, v] of Object.entries(sel.matchLabels)) if (labels[k] !== v) return false;
  for (const e of sel.matchExpressions) {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    switch (e.operator) {
      case "In":
        if (!has || !e.values.includes(labels[e.key])) return false;
        break;
      case "NotIn":
        if (has && e.values.includes(labels[e.key])) return false;
        break;
      case "Exists":
        if (!has) return false;
        break;
      case "DoesNotExist":
        if (has) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}

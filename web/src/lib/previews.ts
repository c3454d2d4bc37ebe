// Bundle previews as the dashboard shows them: kind states, byte sizes and what makes a
// cluster's answer worth a second look (the CLI's exit code 1 rules, docs/cli.md).
import { PreviewKindState, type PreviewBundleResponse, type PreviewResult } from "../gen/kollect/fleet/v1/preview_pb";

export const kindStateName: Record<PreviewKindState, string> = {
  [PreviewKindState.UNSPECIFIED]: "unknown",
  [PreviewKindState.SERVED]: "served",
  [PreviewKindState.NOT_SERVED]: "not served",
  [PreviewKindState.FORBIDDEN]: "forbidden",
  [PreviewKindState.FAILED]: "failed",
};

/** "0 B", "1023 B", "1.5 KiB", "3.2 MiB" — binary units, as the CLI prints them. */
export function humanBytes(n: bigint | number): string {
  let v = Number(n);
  if (v < 1024) return `${v} B`;
  const units = ["KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = -1;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(1)} ${units[i]}`;
}

/** The problems of one cluster's answer: a failed evaluation, kinds not read, extraction errors. */
export function resultProblems(r: PreviewResult): string[] {
  if (r.error) return ["could not evaluate the bundle"];
  const out: string[] = [];
  let errors = 0n;
  for (const t of r.targets) {
    if (t.kindState !== PreviewKindState.SERVED) out.push(`${t.target}: ${kindStateName[t.kindState]}`);
    errors += t.failed;
    for (const a of t.attributes) errors += a.errors;
  }
  if (errors > 0n) out.push("extraction errors");
  return out;
}

/** Whether every asked cluster answered without problems. */
export function previewClean(p: PreviewBundleResponse): boolean {
  return p.pending.length === 0 && p.results.every((r) => resultProblems(r).length === 0);
}

// The ready-to-paste commands that connect a new cluster to this hub with the agent chart
// (charts/agent/values.yaml: clusterName, clusterLabels, hub.url, hub.caFingerprint,
// hub.bootstrapToken.existingSecret, hub.replaceExisting).

/** Quotes a word for a POSIX shell when it needs it. */
export function shellQuote(s: string): string {
  return /^[A-Za-z0-9_./:=@%+,-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** Helm --set keys treat "." as nesting: escape the dots of a label key (example.com/team). */
function helmKey(k: string): string {
  return k.replace(/\\/g, "\\\\").replace(/\./g, "\\.").replace(/,/g, "\\,");
}

function helmValue(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/,/g, "\\,");
}

export interface HelmInput {
  clusterName: string;
  labels: Record<string, string>;
  hubURL: string;
  caFingerprint: string;
  token: string;
  replaceExisting: boolean;
  namespace?: string;
}

export function helmCommand(i: HelmInput): string {
  const ns = i.namespace || "kollect-system";
  const sets = [
    `clusterName=${i.clusterName || "CLUSTER-NAME"}`,
    ...Object.entries(i.labels)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, v]) => `clusterLabels.${helmKey(k)}=${helmValue(v)}`),
    `hub.url=${i.hubURL}`,
    `hub.caFingerprint=${i.caFingerprint}`,
    "hub.bootstrapToken.existingSecret=kollect-hub-bootstrap",
    ...(i.replaceExisting ? ["hub.replaceExisting=true"] : []),
  ];
  return [
    `kubectl create namespace ${shellQuote(ns)}`,
    `kubectl -n ${shellQuote(ns)} create secret generic kollect-hub-bootstrap --from-literal=token=${shellQuote(i.token)}`,
    `helm install kollect-agent charts/agent -n ${shellQuote(ns)} \\\n` + sets.map((s) => `  --set ${shellQuote(s)}`).join(" \\\n"),
  ].join("\n");
}

/** sha256:<hex> of the DER inside a PEM certificate: the pin agents compare. */
export async function pemFingerprint(pem: string): Promise<string> {
  const blocks = [...pem.matchAll(/-----BEGIN CERTIFICATE-----([\s\S]*?)-----END CERTIFICATE-----/g)];
  if (!blocks.length) throw new Error("no certificate in the hub's /ca.crt");
  const b64 = blocks[blocks.length - 1][1].replace(/\s+/g, "");
  const der = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const sum = new Uint8Array(await crypto.subtle.digest("SHA-256", der));
  return "sha256:" + [...sum].map((b) => b.toString(16).padStart(2, "0")).join("");
}

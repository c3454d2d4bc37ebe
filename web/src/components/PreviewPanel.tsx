// "Preview on clusters" in the bundle editor: the manifests as edited, evaluated by the agents
// of the clusters a selector picks, without applying anything (PreviewBundle, operator role).
import { useState } from "react";
import { useSession } from "../api/context";
import type { PreviewBundleResponse } from "../gen/kollect/fleet/v1/preview_pb";
import { parseSelector } from "../lib/selector";
import { ErrorBox } from "./ErrorBox";
import { PreviewResults } from "./PreviewResults";

export function PreviewPanel({ manifests, bundle, initialSelector = "" }: { manifests: string; bundle: string; initialSelector?: string }) {
  const { fleet } = useSession();
  const [selector, setSelector] = useState(initialSelector);
  const [samples, setSamples] = useState(0);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const [preview, setPreview] = useState<PreviewBundleResponse | null>(null);

  const run = async () => {
    setBusy(true);
    setError(null);
    setPreview(null);
    try {
      const clusterSelector = parseSelector(selector);
      setPreview(await fleet.previewBundle({ manifests, clusterSelector, maxSamples: samples, bundle: bundle.trim() }));
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <div className="panel" style={{ marginTop: ".75rem" }}>
      <h2>Preview on clusters</h2>
      <p className="muted">
        The selected clusters' agents evaluate these manifests against what their clusters hold and answer with figures; nothing is
        applied or exported.
      </p>
      <div className="row">
        <div className="field">
          <label htmlFor="pvsel">
            <span>Preview selector</span> <small>e.g. ring=canary (required)</small>
          </label>
          <input id="pvsel" value={selector} onChange={(e) => setSelector(e.target.value)} />
        </div>
        <div className="field">
          <label htmlFor="pvsamples">
            <span>Sample rows per target</span> <small>0–5, only from agents started with --preview-samples</small>
          </label>
          <input id="pvsamples" type="number" min={0} max={5} value={samples} onChange={(e) => setSamples(Number(e.target.value) || 0)} />
        </div>
        <button type="button" onClick={run} disabled={busy || !selector.trim()}>
          {busy ? "Waiting for the agents…" : "Preview on clusters"}
        </button>
      </div>
      {error ? <ErrorBox error={error} /> : null}
      {preview ? <PreviewResults preview={preview} /> : null}
    </div>
  );
}

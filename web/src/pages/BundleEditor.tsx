// Upload a bundle revision: always a dry run first (the hub validates and says where it would
// go), then the real apply of exactly what was validated. The hub's problems appear at their
// lines, under the objects they name.
import { useEffect, useMemo, useState } from "react";
import { Code, ConnectError } from "@connectrpc/connect";
import { useCan, useFleetSnapshot, useSession } from "../api/context";
import { ErrorBox } from "../components/ErrorBox";
import { ManifestEditor } from "../components/ManifestEditor";
import { PreviewPanel } from "../components/PreviewPanel";
import type { ApplyBundleResponse } from "../gen/kollect/fleet/v1/fleet_pb";
import { Role } from "../gen/kollect/fleet/v1/types_pb";
import { attachProblems, describeDoc, joinDocs, splitDocs, type Problem } from "../lib/manifests";
import { Link, navigate } from "../lib/router";
import { formatSelector, parseSelector } from "../lib/selector";

interface Validated {
  key: string;
  result: ApplyBundleResponse;
}

export function BundleEditor({ name: existing }: { name?: string }) {
  const { fleet } = useSession();
  const snap = useFleetSnapshot();
  const canWrite = useCan(Role.OPERATOR);
  const [name, setName] = useState(existing ?? "");
  const [description, setDescription] = useState("");
  const [selector, setSelector] = useState("");
  const [message, setMessage] = useState("");
  const [hold, setHold] = useState(Boolean(existing));
  const [docs, setDocs] = useState<string[]>([""]);
  const [loadError, setLoadError] = useState<unknown>(null);
  const [loaded, setLoaded] = useState(!existing);
  const [problems, setProblems] = useState<Problem[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [validated, setValidated] = useState<Validated | null>(null);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    if (!existing) return;
    fleet.getBundle({ name: existing }).then(
      (r) => {
        setDescription(r.bundle?.description ?? "");
        setSelector(formatSelector(r.revision?.clusterSelector));
        setDocs(splitDocs(r.revision?.manifests ?? ""));
        setLoaded(true);
      },
      (err) => {
        setLoadError(err);
        setLoaded(true);
      },
    );
  }, [existing, fleet]);

  // Normalised as if every document were split at its "---" lines: the editor splits a pasted
  // text only when its area loses focus, possibly after a dry run, and what was validated must
  // stay validated across that split.
  const manifests = joinDocs(docs.flatMap(splitDocs));
  const key = JSON.stringify([name, description, selector, manifests, message, hold]);
  const upToDate = validated?.key === key;
  const activeRollout = snap.bundles.get(name)?.activeRolloutId;

  const request = (dryRun: boolean) => ({
    name: name.trim(),
    description,
    manifests,
    clusterSelector: parseSelector(selector),
    message,
    hold,
    dryRun,
  });

  const fail = (err: unknown) => {
    if (err instanceof ConnectError && err.code === Code.InvalidArgument) {
      // Each problem is shown once: under the object it names, or, when it names no object of
      // the editor (the bundle name, the selector), in the box on top. The whole message is
      // not shown again beside them.
      // Against the documents as split: a pasted text is split by then (see manifests).
      setProblems(attachProblems(err.rawMessage, docs.flatMap(splitDocs).map(describeDoc)));
      return;
    }
    setError(err);
  };

  const validate = async () => {
    setBusy(true);
    setProblems([]);
    setError(null);
    setValidated(null);
    try {
      const result = await fleet.applyBundle(request(true));
      setValidated({ key, result });
    } catch (err) {
      fail(err);
    } finally {
      setBusy(false);
    }
  };

  const apply = async () => {
    setBusy(true);
    setError(null);
    try {
      await fleet.applyBundle(request(false));
      navigate(`/bundles/${encodeURIComponent(name.trim())}`);
    } catch (err) {
      fail(err);
      setValidated(null);
    } finally {
      setBusy(false);
    }
  };

  const unplaced = useMemo(() => problems.filter((p) => p.doc < 0), [problems]);
  // A removed document takes its problems along; those of the documents after it move up.
  const dropProblemsOf = (i: number) =>
    setProblems((ps) => ps.filter((p) => p.doc !== i).map((p) => (p.doc > i ? { ...p, doc: p.doc - 1 } : p)));

  if (!canWrite) {
    return (
      <div className="panel">
        <h1>Upload a bundle</h1>
        <p>Your token's role (viewer) cannot change bundles; an operator or admin can.</p>
        <Link to="/bundles">Back to the bundles</Link>
      </div>
    );
  }
  if (!loaded) return <p className="muted">Loading {existing}…</p>;
  return (
    <>
      <div className="topline">
        <h1>{existing ? `New revision of ${existing}` : "New bundle"}</h1>
      </div>
      {loadError ? <ErrorBox error={loadError} /> : null}
      <div className="grid2">
        <div>
          <div className="field">
            <label htmlFor="bname">
              <span>Name</span> <small>a DNS label</small>
            </label>
            <input id="bname" value={name} onChange={(e) => setName(e.target.value)} readOnly={Boolean(existing)} required />
          </div>
          <div className="field">
            <label htmlFor="bdesc">
              <span>Description</span>
            </label>
            <input id="bdesc" value={description} onChange={(e) => setDescription(e.target.value)} />
          </div>
        </div>
        <div>
          <div className="field">
            <label htmlFor="bsel">
              <span>Cluster selector</span> <small>e.g. env=prod, region in (eu,us), !legacy — empty selects every cluster</small>
            </label>
            <input id="bsel" value={selector} onChange={(e) => setSelector(e.target.value)} />
          </div>
          <div className="field">
            <label htmlFor="bmsg">
              <span>Change note</span>
            </label>
            <input id="bmsg" value={message} onChange={(e) => setMessage(e.target.value)} />
          </div>
        </div>
      </div>
      <div className="row" style={{ marginBottom: ".75rem" }}>
        <label>
          <input type="checkbox" checked={hold} onChange={(e) => setHold(e.target.checked)} /> Hold: store the revision without sending it
          anywhere, then release it with a staged rollout
        </label>
        {activeRollout && !hold ? (
          <span className="skewmark">
            Rollout #{activeRollout.toString()} is active: the hub refuses a revision that is not held.
          </span>
        ) : null}
        <label className="buttonlike secondary">
          Load from file
          <input
            type="file"
            accept=".yaml,.yml,.json,text/yaml"
            style={{ display: "none" }}
            onChange={async (e) => {
              const f = e.target.files?.[0];
              if (f) setDocs(splitDocs(await f.text()));
              e.target.value = "";
            }}
          />
        </label>
      </div>
      {unplaced.length ? (
        <div className="error" role="alert">
          <strong>The hub refused the bundle</strong>
          {unplaced.map((p, i) => (
            <pre key={i} className="error-detail">
              {p.subject ? `${p.subject}: ` : ""}
              {p.message}
            </pre>
          ))}
        </div>
      ) : null}
      {problems.length && !unplaced.length ? (
        <div className="error" role="status">
          <strong>
            The hub refused the bundle: {problems.length} problem{problems.length === 1 ? "" : "s"}, shown at {problems.length === 1 ? "its line" : "their lines"} under the object{problems.length === 1 ? "" : "s"}.
          </strong>
        </div>
      ) : null}
      {error ? <ErrorBox error={error} /> : null}
      <ManifestEditor docs={docs} onChange={setDocs} problems={problems} onRemove={dropProblemsOf} />
      <div className="actions" style={{ marginTop: ".75rem" }}>
        <button type="button" onClick={validate} disabled={busy || !name.trim()}>
          Validate (dry run)
        </button>
        <button type="button" className="primary" onClick={apply} disabled={busy || !upToDate}>
          {hold ? "Store revision (held)" : "Apply to clusters"}
        </button>
        {!upToDate ? <span className="muted">Validate first: the apply button stores exactly what the dry run checked.</span> : null}
      </div>
      {upToDate && validated ? (
        <div className="success" role="status">
          <strong>Valid.</strong>{" "}
          {validated.result.created
            ? `This would create revision ${validated.result.revision?.revision.toString()}`
            : "The content equals the latest revision: applying stores nothing"}
          {"; "}
          {hold
            ? `held, so it goes nowhere until a rollout (${validated.result.selectedClusters.length} clusters selected).`
            : `it would go at once to ${validated.result.selectedClusters.length} cluster${validated.result.selectedClusters.length === 1 ? "" : "s"}`}
          {!hold && validated.result.selectedClusters.length ? `: ${validated.result.selectedClusters.join(", ")}.` : ""}
        </div>
      ) : null}
      <PreviewPanel manifests={manifests} bundle={name} />
    </>
  );
}

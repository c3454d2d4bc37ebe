// Admin: connect new clusters (a bootstrap token and the helm command that uses it), the new
// registrations to approve or reject, the bootstrap tokens, and every cluster's agent with a
// revoke button.
import { useEffect, useMemo, useState } from "react";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { useCan, useFleetSnapshot, useSession } from "../api/context";
import { StateBadge } from "../components/Badges";
import { ConfirmButton } from "../components/ConfirmButton";
import { CopyBlock } from "../components/CopyBlock";
import { ErrorBox } from "../components/ErrorBox";
import { ApprovalActions, ApprovalBadge, NewRegistrations } from "../components/Registrations";
import { Table, type Column } from "../components/Table";
import { ClusterState, Role, type BootstrapToken, type Cluster } from "../gen/kollect/fleet/v1/types_pb";
import { absolute, ago, ms } from "../lib/format";
import { helmCommand, pemFingerprint } from "../lib/helm";
import { pendingApproval } from "../lib/registrations";
import { Link } from "../lib/router";
import { useNow } from "../lib/useNow";
import { useQuery } from "../lib/useQuery";

function useCAFingerprint(): { fingerprint?: string; error?: unknown } {
  const [state, setState] = useState<{ fingerprint?: string; error?: unknown }>({});
  useEffect(() => {
    fetch("/ca.crt")
      .then((r) => (r.ok ? r.text() : Promise.reject(new Error(`GET /ca.crt: ${r.status} ${r.statusText}`))))
      .then(pemFingerprint)
      .then((fingerprint) => setState({ fingerprint }), (error) => setState({ error }));
  }, []);
  return state;
}

function parseLabels(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of text.split(",").map((p) => p.trim()).filter(Boolean)) {
    const eq = part.indexOf("=");
    if (eq <= 0) throw new Error(`label "${part}" is not key=value`);
    out[part.slice(0, eq).trim()] = part.slice(eq + 1).trim();
  }
  return out;
}

function NewCluster({ onCreated }: { onCreated: () => void }) {
  const { fleet } = useSession();
  const ca = useCAFingerprint();
  const [description, setDescription] = useState("");
  const [ttlHours, setTtlHours] = useState("24");
  const [maxUses, setMaxUses] = useState("1");
  const [allowReplace, setAllowReplace] = useState(false);
  const [requireApproval, setRequireApproval] = useState(false);
  const [clusterName, setClusterName] = useState("");
  const [labels, setLabels] = useState("");
  const [hubURL, setHubURL] = useState(window.location.origin);
  const [secret, setSecret] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);

  const create = async () => {
    setError(null);
    try {
      const hours = Number(ttlHours);
      const uses = Number(maxUses || "0");
      if (!(hours > 0)) throw new Error("Time to live: give a number of hours above 0");
      if (!(uses >= 0)) throw new Error("Maximum uses: give 0 (unlimited) or more");
      parseLabels(labels);
      const res = await fleet.createBootstrapToken({
        description: description || (clusterName ? `for ${clusterName}` : ""),
        ttl: durationFromMs(hours * 3600_000),
        maxUses: BigInt(Math.floor(uses)),
        allowReplace,
        requireApproval,
      });
      setSecret(res.secret);
      onCreated();
    } catch (err) {
      setError(err);
    }
  };

  let command = "";
  let labelError: unknown = null;
  if (secret) {
    try {
      command = helmCommand({
        clusterName,
        labels: parseLabels(labels),
        hubURL,
        caFingerprint: ca.fingerprint ?? "sha256:…",
        token: secret,
        replaceExisting: allowReplace,
      });
    } catch (err) {
      labelError = err;
    }
  }

  return (
    <section className="panel" aria-label="Connect a new cluster">
      <h2>Connect a new cluster</h2>
      <div className="grid2">
        <div>
          <div className="field">
            <label htmlFor="bt-cluster">
              <span>Cluster name</span> <small>a DNS label, unique in the fleet</small>
            </label>
            <input id="bt-cluster" value={clusterName} onChange={(e) => setClusterName(e.target.value)} />
          </div>
          <div className="field">
            <label htmlFor="bt-labels">
              <span>Cluster labels</span> <small>key=value, comma-separated</small>
            </label>
            <input id="bt-labels" value={labels} onChange={(e) => setLabels(e.target.value)} placeholder="env=prod, region=eu" />
          </div>
          <div className="field">
            <label htmlFor="bt-url">
              <span>Hub URL</span> <small>as the agents will dial it</small>
            </label>
            <input id="bt-url" value={hubURL} onChange={(e) => setHubURL(e.target.value)} />
          </div>
        </div>
        <div>
          <div className="field">
            <label htmlFor="bt-desc">
              <span>Token description</span>
            </label>
            <input id="bt-desc" value={description} onChange={(e) => setDescription(e.target.value)} />
          </div>
          <div className="row">
            <div className="field">
              <label htmlFor="bt-ttl">
                <span>Time to live (hours)</span>
              </label>
              <input id="bt-ttl" type="number" min={1} value={ttlHours} onChange={(e) => setTtlHours(e.target.value)} />
            </div>
            <div className="field">
              <label htmlFor="bt-uses">
                <span>Maximum uses</span> <small>0: unlimited</small>
              </label>
              <input id="bt-uses" type="number" min={0} value={maxUses} onChange={(e) => setMaxUses(e.target.value)} />
            </div>
          </div>
          <label>
            <input type="checkbox" checked={allowReplace} onChange={(e) => setAllowReplace(e.target.checked)} /> Allow replacing an existing
            cluster of the same name (a rebuilt cluster)
          </label>
          <label>
            <input type="checkbox" checked={requireApproval} onChange={(e) => setRequireApproval(e.target.checked)} /> Require approval: a
            cluster registered with this token receives nothing until an admin approves it (for a token handed to many people)
          </label>
        </div>
      </div>
      <button type="button" className="primary" onClick={create}>
        Create bootstrap token
      </button>
      {error ? <ErrorBox error={error} /> : null}
      {ca.error ? <ErrorBox error={ca.error} compact /> : null}
      {secret ? (
        <div className="success" role="status">
          <p>
            <strong>Bootstrap token created.</strong> It is shown only now. Run this against the new cluster (the agent uses the token once,
            then keeps its own credential):
          </p>
          {requireApproval ? <p>The cluster then appears under New registrations, waiting for an admin to approve it.</p> : null}
          {labelError ? <ErrorBox error={labelError} /> : <CopyBlock label="Install command" text={command} />}
        </div>
      ) : null}
    </section>
  );
}

export function Agents() {
  const { fleet } = useSession();
  const isAdmin = useCan(Role.ADMIN);
  const snap = useFleetSnapshot();
  const tokens = useQuery((signal) => (isAdmin ? fleet.listBootstrapTokens({}, { signal }) : Promise.resolve(undefined)), [isAdmin]);
  const [error, setError] = useState<unknown>(null);
  const clusters = useMemo(() => [...snap.clusters.values()], [snap.clusters]);
  const now = useNow(30000);

  if (!isAdmin) {
    return (
      <div className="panel">
        <h1>Agents and bootstrap tokens</h1>
        <p>Only an admin token can create bootstrap tokens and revoke agents.</p>
      </div>
    );
  }

  const revokeAgent = async (name: string) => {
    setError(null);
    try {
      await fleet.revokeAgent({ clusterName: name });
    } catch (err) {
      setError(err);
    }
  };

  const agentColumns: Column<Cluster>[] = [
    { key: "name", header: "Cluster", sortValue: (c) => c.name, render: (c) => <Link to={`/clusters/${encodeURIComponent(c.name)}`}>{c.name}</Link> },
    {
      key: "state",
      header: "State",
      sortValue: (c) => c.state,
      render: (c) => (
        <span className="labels">
          <StateBadge state={c.state} />
          <ApprovalBadge c={c} now={now} />
        </span>
      ),
    },
    { key: "version", header: "Agent", sortValue: (c) => c.agentVersion, render: (c) => c.agentVersion || "–" },
    { key: "registered", header: "Registered", sortValue: (c) => ms(c.registeredAt) ?? 0, render: (c) => <span title={absolute(c.registeredAt)}>{ago(c.registeredAt)}</span> },
    { key: "beat", header: "Heartbeat", sortValue: (c) => ms(c.lastHeartbeat) ?? 0, render: (c) => ago(c.lastHeartbeat) },
    {
      key: "act",
      header: "",
      render: (c) =>
        c.state === ClusterState.REVOKED ? (
          <span className="muted">revoked</span>
        ) : pendingApproval(c) ? (
          <ApprovalActions c={c} />
        ) : (
          <ConfirmButton confirm={`Revoke ${c.name}?`} onConfirm={() => revokeAgent(c.name)}>
            Revoke agent
          </ConfirmButton>
        ),
    },
  ];

  const tokenColumns: Column<BootstrapToken>[] = [
    { key: "id", header: "Token", render: (t) => <span className="mono">{t.id}</span> },
    { key: "desc", header: "Description", render: (t) => t.description || <span className="muted">–</span> },
    { key: "expires", header: "Expires", sortValue: (t) => ms(t.expiresAt) ?? 0, render: (t) => absolute(t.expiresAt) },
    { key: "uses", header: "Uses", render: (t) => `${t.uses}${t.maxUses ? ` of ${t.maxUses}` : " (unlimited)"}` },
    { key: "replace", header: "Replace", render: (t) => (t.allowReplace ? "allowed" : "no") },
    { key: "approval", header: "Approval", render: (t) => (t.requireApproval ? "required" : "no") },
    { key: "by", header: "By", render: (t) => t.createdBy },
    {
      key: "state",
      header: "",
      render: (t) => {
        const expired = (ms(t.expiresAt) ?? 0) < Date.now();
        const used = t.maxUses > 0n && t.uses >= t.maxUses;
        if (t.revoked) return <span className="badge state-revoked">revoked</span>;
        return (
          <span className="actions">
            {expired ? <span className="badge">expired</span> : used ? <span className="badge">used up</span> : null}
            <ConfirmButton
              confirm="Revoke this token? Agents already registered keep working."
              onConfirm={async () => {
                setError(null);
                try {
                  await fleet.revokeBootstrapToken({ id: t.id });
                  tokens.reload();
                } catch (err) {
                  setError(err);
                }
              }}
            >
              Revoke
            </ConfirmButton>
          </span>
        );
      },
    },
  ];

  return (
    <>
      <h1>Agents and bootstrap tokens</h1>
      <NewCluster onCreated={tokens.reload} />
      {error ? <ErrorBox error={error} /> : null}
      <NewRegistrations clusters={clusters} now={now} more="every agent is in the table below" />
      <h2>Agents</h2>
      <Table label="Agents" rows={clusters} columns={agentColumns} rowKey={(c) => c.name} initialSort={{ key: "name" }} empty="No agent has registered yet." />
      <h2>Bootstrap tokens</h2>
      {tokens.error ? <ErrorBox error={tokens.error} onRetry={tokens.reload} /> : null}
      <Table
        label="Bootstrap tokens"
        rows={tokens.data?.tokens ?? []}
        columns={tokenColumns}
        rowKey={(t) => t.id}
        empty={tokens.loading ? "Loading…" : "No bootstrap token."}
      />
    </>
  );
}

// Admin: API tokens and their roles.
import { useState } from "react";
import { useCan, useSession } from "../api/context";
import { roleName } from "../api/role";
import { ConfirmButton } from "../components/ConfirmButton";
import { CopyBlock } from "../components/CopyBlock";
import { ErrorBox } from "../components/ErrorBox";
import { Table, type Column } from "../components/Table";
import { Role, type APIToken } from "../gen/kollect/fleet/v1/types_pb";
import { absolute, ago, ms } from "../lib/format";
import { useQuery } from "../lib/useQuery";

export function Tokens() {
  const { fleet } = useSession();
  const isAdmin = useCan(Role.ADMIN);
  const list = useQuery((signal) => (isAdmin ? fleet.listAPITokens({}, { signal }) : Promise.resolve(undefined)), [isAdmin]);
  const [name, setName] = useState("");
  const [role, setRole] = useState<Role>(Role.VIEWER);
  const [created, setCreated] = useState<{ name: string; secret: string } | null>(null);
  const [error, setError] = useState<unknown>(null);

  if (!isAdmin) {
    return (
      <div className="panel">
        <h1>API tokens</h1>
        <p>Only an admin token can list and create API tokens.</p>
      </div>
    );
  }

  const columns: Column<APIToken>[] = [
    { key: "name", header: "Name", sortValue: (t) => t.name, render: (t) => t.name },
    { key: "role", header: "Role", sortValue: (t) => t.role, render: (t) => roleName(t.role) },
    { key: "by", header: "Created by", render: (t) => t.createdBy },
    { key: "at", header: "Created", sortValue: (t) => ms(t.createdAt) ?? 0, render: (t) => <span title={absolute(t.createdAt)}>{ago(t.createdAt)}</span> },
    {
      key: "act",
      header: "",
      render: (t) =>
        t.revoked ? (
          <span className="badge state-revoked">revoked</span>
        ) : (
          <ConfirmButton
            confirm={`Revoke ${t.name}? Its next call is refused.`}
            onConfirm={async () => {
              setError(null);
              try {
                await fleet.revokeAPIToken({ id: t.id });
                list.reload();
              } catch (err) {
                setError(err);
              }
            }}
          >
            Revoke
          </ConfirmButton>
        ),
    },
  ];

  return (
    <>
      <h1>API tokens</h1>
      <section className="panel" aria-label="New API token">
        <div className="row">
          <div className="field">
            <label htmlFor="t-name">
              <span>Name</span> <small>unique; appears in the audit log</small>
            </label>
            <input id="t-name" value={name} onChange={(e) => setName(e.target.value)} />
          </div>
          <div className="field">
            <label htmlFor="t-role">
              <span>Role</span>
            </label>
            <select id="t-role" value={role} onChange={(e) => setRole(Number(e.target.value) as Role)}>
              <option value={Role.VIEWER}>viewer: reads everything</option>
              <option value={Role.OPERATOR}>operator: also bundles, rollouts, labels</option>
              <option value={Role.ADMIN}>admin: also tokens, agents, deleting clusters</option>
            </select>
          </div>
          <div className="field">
            <button
              type="button"
              className="primary"
              disabled={!name.trim()}
              onClick={async () => {
                setError(null);
                try {
                  const res = await fleet.createAPIToken({ name: name.trim(), role });
                  setCreated({ name: name.trim(), secret: res.secret });
                  setName("");
                  list.reload();
                } catch (err) {
                  setError(err);
                }
              }}
            >
              Create API token
            </button>
          </div>
        </div>
        {created ? (
          <div className="success" role="status">
            <p>
              <strong>Token {created.name} created.</strong> Copy it now: it is never shown again.
            </p>
            <CopyBlock label="API token secret" text={created.secret} />
          </div>
        ) : null}
      </section>
      {error ? <ErrorBox error={error} /> : null}
      {list.error ? <ErrorBox error={list.error} onRetry={list.reload} /> : null}
      <Table label="API tokens" rows={list.data?.tokens ?? []} columns={columns} rowKey={(t) => t.id} empty={list.loading ? "Loading…" : "No token."} />
    </>
  );
}

import { useEffect, useState, type ReactNode } from "react";
import { useFleetSnapshot, useSession } from "../api/context";
import { roleName } from "../api/role";
import { ErrorBoundary } from "../components/ErrorBoundary";
import { ErrorBox } from "../components/ErrorBox";
import { Role } from "../gen/kollect/fleet/v1/types_pb";
import { Link, match, useLocation } from "../lib/router";
import { Agents } from "./Agents";
import { Audit } from "./Audit";
import { BundleDetail } from "./BundleDetail";
import { BundleEditor } from "./BundleEditor";
import { Bundles } from "./Bundles";
import { ClusterDetail } from "./ClusterDetail";
import { Freshness } from "./Freshness";
import { Overview } from "./Overview";
import { RolloutDetail } from "./RolloutDetail";
import { Rollouts } from "./Rollouts";
import { StartRollout } from "./StartRollout";
import { Tokens } from "./Tokens";

function LiveIndicator() {
  const snap = useFleetSnapshot();
  const { feed } = useSession();
  const [, tick] = useState(0);
  useEffect(() => {
    if (snap.status !== "reconnecting") return;
    const t = setInterval(() => tick((n) => n + 1), 1000);
    return () => clearInterval(t);
  }, [snap.status]);
  if (snap.status === "live") return <span className="live live-on">Live</span>;
  if (snap.status === "connecting") return <span className="live">Connecting…</span>;
  if (snap.status === "reconnecting") {
    const secs = Math.max(0, Math.ceil(((snap.retryAt ?? Date.now()) - Date.now()) / 1000));
    return (
      <span className="live live-retry">
        Reconnecting in {secs} s{" "}
        <button type="button" className="link" onClick={() => feed.retryNow()}>
          now
        </button>
      </span>
    );
  }
  return <span className="live live-off">Not live</span>;
}

function route(path: string): { page: ReactNode; section: string } {
  let m: Record<string, string> | null;
  if (path === "/" || path === "") return { page: <Overview />, section: "/" };
  if (path === "/freshness") return { page: <Freshness />, section: "/freshness" };
  if ((m = match("/clusters/:name", path))) return { page: <ClusterDetail name={m.name} />, section: "/" };
  if (path === "/bundles") return { page: <Bundles />, section: "/bundles" };
  if (path === "/bundles/new") return { page: <BundleEditor />, section: "/bundles" };
  if ((m = match("/bundles/:name/edit", path))) return { page: <BundleEditor name={m.name} />, section: "/bundles" };
  if ((m = match("/bundles/:name", path))) return { page: <BundleDetail name={m.name} />, section: "/bundles" };
  if (path === "/rollouts") return { page: <Rollouts />, section: "/rollouts" };
  if (path === "/rollouts/new") return { page: <StartRollout />, section: "/rollouts" };
  if ((m = match("/rollouts/:id", path)) && /^\d+$/.test(m.id)) return { page: <RolloutDetail id={BigInt(m.id)} />, section: "/rollouts" };
  if (path === "/agents") return { page: <Agents />, section: "/agents" };
  if (path === "/tokens") return { page: <Tokens />, section: "/tokens" };
  if (path === "/audit") return { page: <Audit />, section: "/audit" };
  return {
    page: (
      <div className="panel">
        <h1>Page not found</h1>
        <p>
          Nothing lives at <code>{path}</code>. <Link to="/">Go to the fleet overview</Link>.
        </p>
      </div>
    ),
    section: "",
  };
}

export function Layout({ themeButton }: { themeButton: ReactNode }) {
  const { name, role, signOut } = useSession();
  const snap = useFleetSnapshot();
  const { path } = useLocation();
  const { page, section } = route(path);
  const nav: [string, string, boolean][] = [
    ["/", "Fleet", true],
    ["/freshness", "Freshness", true],
    ["/bundles", "Bundles", true],
    ["/rollouts", "Rollouts", true],
    ["/agents", "Agents & bootstrap", role >= Role.ADMIN],
    ["/tokens", "API tokens", role >= Role.ADMIN],
    ["/audit", "Audit log", true],
  ];
  return (
    <div className="shell">
      <a className="skip" href="#main">
        Skip to content
      </a>
      <aside className="sidebar">
        <Link to="/" className="brand">
          <img src="/favicon.svg" alt="" width={22} height={22} /> Kollect
        </Link>
        <nav aria-label="Main">
          {nav
            .filter(([, , show]) => show)
            .map(([to, label]) => (
              <Link key={to} to={to} aria-current={section === to ? "page" : undefined}>
                {label}
              </Link>
            ))}
        </nav>
        <div className="who">
          <LiveIndicator />
          <span>
            Signed in as <strong data-testid="token-name">{name}</strong> (<span data-testid="role">{roleName(role)}</span>)
          </span>
          {themeButton}
          <button type="button" onClick={signOut}>
            Sign out
          </button>
        </div>
      </aside>
      <main id="main" tabIndex={-1}>
        {snap.error && snap.status === "stopped" ? (
          <div>
            <ErrorBox error={snap.error} />
            <p>
              Live updates stopped. <button type="button" onClick={signOut}>Sign in again</button>
            </p>
          </div>
        ) : null}
        <ErrorBoundary key={path} what="this page">
          {page}
        </ErrorBoundary>
      </main>
    </div>
  );
}

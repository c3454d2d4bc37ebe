// The dashboard shell: sign-in, the role the token has, navigation and the page for the URL.
import { useEffect, useMemo, useState } from "react";
import { fleetClient, type Fleet } from "./api/client";
import { SessionContext, type Session } from "./api/context";
import { whoAmI } from "./api/role";
import { clearToken, loadToken, saveToken } from "./api/session";
import { ErrorBoundary } from "./components/ErrorBoundary";
import { ErrorBox } from "./components/ErrorBox";
import { Role } from "./gen/kollect/fleet/v1/types_pb";
import { FleetFeed } from "./lib/feed";
import { applyTheme, loadTheme, nextTheme, type Theme } from "./lib/theme";
import { Layout } from "./pages/Layout";
import { SignIn } from "./pages/SignIn";

interface Signed {
  token: string;
  fleet: Fleet;
  name: string;
  role: Role;
}

export function App({ makeClient = fleetClient }: { makeClient?: (token: string) => Fleet }) {
  const [theme, setTheme] = useState<Theme>(loadTheme);
  const [signed, setSigned] = useState<Signed | null>(null);
  const [restoring, setRestoring] = useState(() => loadToken() !== null);
  const [restoreError, setRestoreError] = useState<unknown>(null);

  useEffect(() => applyTheme(theme), [theme]);

  const signIn = async (token: string) => {
    const fleet = makeClient(token);
    const { name, role } = await whoAmI(fleet); // throws a readable ConnectError for a bad token
    saveToken(token);
    setSigned({ token, fleet, name, role });
  };

  // A reload keeps the session: the token is in sessionStorage.
  useEffect(() => {
    const token = loadToken();
    if (!token) return;
    signIn(token)
      .catch((err) => {
        clearToken();
        setRestoreError(err);
      })
      .finally(() => setRestoring(false));
  }, []);

  const feed = useMemo(() => (signed ? new FleetFeed(signed.fleet) : null), [signed]);
  useEffect(() => {
    feed?.start();
    return () => feed?.stop();
  }, [feed]);

  const session: Session | null = useMemo(
    () =>
      signed && feed
        ? {
            fleet: signed.fleet,
            name: signed.name,
            role: signed.role,
            feed,
            signOut: () => {
              clearToken();
              setSigned(null);
            },
          }
        : null,
    [signed, feed],
  );

  const themeButton = (
    <button type="button" onClick={() => setTheme(nextTheme(theme))} title="Colour theme">
      Theme: {theme}
    </button>
  );

  if (restoring) return <p className="muted" style={{ padding: "2rem" }}>Signing in…</p>;
  if (!session) {
    return (
      <ErrorBoundary what="the sign-in page">
        <SignIn onSignIn={signIn} themeButton={themeButton}>
          {restoreError ? <ErrorBox error={restoreError} /> : null}
        </SignIn>
      </ErrorBoundary>
    );
  }
  return (
    <SessionContext.Provider value={session}>
      <Layout themeButton={themeButton} />
    </SessionContext.Provider>
  );
}

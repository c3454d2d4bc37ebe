import { useState, type FormEvent, type ReactNode } from "react";
import { ErrorBox } from "../components/ErrorBox";

export function SignIn({ onSignIn, themeButton, children }: { onSignIn: (token: string) => Promise<void>; themeButton: ReactNode; children?: ReactNode }) {
  const [token, setToken] = useState("");
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await onSignIn(token.trim());
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };

  return (
    <main className="signin">
      <div className="panel">
        <h1>Kollect fleet</h1>
        <p>
          Sign in with an API token (<code>kat_…</code>). The hub printed the first admin token on its first start and
          wrote it to <code>&lt;data-dir&gt;/admin-token</code>; an admin can create more with <code>kollect hub token create</code>{" "}
          or on the Tokens page.
        </p>
        <form onSubmit={submit}>
          <div className="field">
            <label htmlFor="token">
              <span>API token</span>
            </label>
            <input
              id="token"
              name="token"
              type="password"
              autoComplete="off"
              spellCheck={false}
              required
              value={token}
              onChange={(e) => setToken(e.target.value)}
              autoFocus
            />
            <small>Kept in this tab only (sessionStorage), until you sign out or close it.</small>
          </div>
          <div className="row">
            <button type="submit" className="primary" disabled={busy || !token.trim()}>
              {busy ? "Signing in…" : "Sign in"}
            </button>
            {themeButton}
          </div>
        </form>
        {children}
        {error ? <ErrorBox error={error} /> : null}
      </div>
    </main>
  );
}

import { describe } from "../api/errors";

/** A readable error with the hub's message kept verbatim (it may have several lines). */
export function ErrorBox({ error, onRetry, compact }: { error: unknown; onRetry?: () => void; compact?: boolean }) {
  const d = describe(error);
  return (
    <div className={compact ? "error compact" : "error"} role="alert">
      <strong>{d.title}</strong>
      {d.detail && <pre className="error-detail">{d.detail}</pre>}
      {onRetry && (
        <button type="button" onClick={onRetry}>
          Try again
        </button>
      )}
    </div>
  );
}

import { useState, type ReactNode } from "react";

/**
 * A button for a destructive action that asks once more in place ("Revoke agent" → "Really
 * revoke? Yes / Cancel"), so a stray click or key press changes nothing.
 */
export function ConfirmButton({
  children,
  confirm,
  onConfirm,
  disabled,
  danger = true,
}: {
  children: ReactNode;
  confirm: ReactNode;
  onConfirm: () => void | Promise<void>;
  disabled?: boolean;
  danger?: boolean;
}) {
  const [asking, setAsking] = useState(false);
  const [busy, setBusy] = useState(false);
  if (!asking) {
    return (
      <button type="button" className={danger ? "danger" : undefined} disabled={disabled} onClick={() => setAsking(true)}>
        {children}
      </button>
    );
  }
  return (
    <span className="confirm" role="group">
      <span>{confirm}</span>
      <button
        type="button"
        className={danger ? "danger" : "primary"}
        disabled={busy}
        autoFocus
        onClick={async () => {
          setBusy(true);
          try {
            await onConfirm();
          } finally {
            setBusy(false);
            setAsking(false);
          }
        }}
      >
        Yes
      </button>
      <button type="button" onClick={() => setAsking(false)}>
        Cancel
      </button>
    </span>
  );
}

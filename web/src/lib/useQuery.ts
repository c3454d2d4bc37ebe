// useQuery runs one read call, again whenever deps change (a different object: the old data is
// dropped), whenever opts.refresh changes (the same object changed: the old data stays on screen
// until the new arrives, so live updates never flash a loading state or unmount what the user is
// typing into), and optionally every intervalMs. It keeps the last good data when a later call
// fails, so one failed refresh never blanks a view.
import { useCallback, useEffect, useRef, useState } from "react";

export interface Query<T> {
  data?: T;
  error?: unknown;
  loading: boolean;
  reload: () => void;
}

export function useQuery<T>(
  fn: (signal: AbortSignal) => Promise<T>,
  deps: unknown[],
  opts: { intervalMs?: number; refresh?: unknown } = {},
): Query<T> {
  const [state, setState] = useState<{ data?: T; error?: unknown; loading: boolean }>({ loading: true });
  const [tick, setTick] = useState(0);
  const fnRef = useRef(fn);
  fnRef.current = fn;
  const reload = useCallback(() => setTick((t) => t + 1), []);

  // Deps change → start over without stale data from another object.
  const depsKey = JSON.stringify(deps, bigintAsString);
  const refreshKey = JSON.stringify(opts.refresh ?? null, bigintAsString);
  const lastKey = useRef(depsKey);
  useEffect(() => {
    const ctl = new AbortController();
    if (lastKey.current !== depsKey) {
      lastKey.current = depsKey;
      setState({ loading: true });
    } else setState((s) => ({ ...s, loading: true }));
    fnRef.current(ctl.signal).then(
      (data) => !ctl.signal.aborted && setState({ data, loading: false }),
      (error) => !ctl.signal.aborted && setState((s) => ({ data: s.data, error, loading: false })),
    );
    return () => ctl.abort();
  }, [depsKey, refreshKey, tick]);

  useEffect(() => {
    if (!opts.intervalMs) return;
    const t = setInterval(reload, opts.intervalMs);
    return () => clearInterval(t);
  }, [opts.intervalMs, reload]);

  return { ...state, reload };
}

function bigintAsString(_: string, v: unknown): unknown {
  return typeof v === "bigint" ? v.toString() : v;
}

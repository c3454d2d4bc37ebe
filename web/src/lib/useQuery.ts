// useQuery runs one read call, optionally again every intervalMs and whenever `refresh` changes.
// It keeps the last good data when a later call fails, so one failed refresh never blanks a view.
import { useCallback, useEffect, useRef, useState } from "react";

export interface Query<T> {
  data?: T;
  error?: unknown;
  loading: boolean;
  reload: () => void;
}

export function useQuery<T>(fn: (signal: AbortSignal) => Promise<T>, deps: unknown[], opts: { intervalMs?: number } = {}): Query<T> {
  const [state, setState] = useState<{ data?: T; error?: unknown; loading: boolean }>({ loading: true });
  const [tick, setTick] = useState(0);
  const fnRef = useRef(fn);
  fnRef.current = fn;
  const reload = useCallback(() => setTick((t) => t + 1), []);

  // Deps change → start over without stale data from another object.
  const depsKey = JSON.stringify(deps, (_, v) => (typeof v === "bigint" ? v.toString() : v));
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
  }, [depsKey, tick]);

  useEffect(() => {
    if (!opts.intervalMs) return;
    const t = setInterval(reload, opts.intervalMs);
    return () => clearInterval(t);
  }, [opts.intervalMs, reload]);

  return { ...state, reload };
}

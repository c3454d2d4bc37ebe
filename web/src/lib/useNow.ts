import { useEffect, useState } from "react";

/** The current time, refreshed every intervalMs, for "5 s ago" texts that must keep moving. */
export function useNow(intervalMs = 5000): number {
  const [now, setNow] = useState(Date.now);
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), intervalMs);
    return () => clearInterval(t);
  }, [intervalMs]);
  return now;
}

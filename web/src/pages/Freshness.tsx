// TEMPORARY: replaced by the real page in the next commits.
export function Freshness(_props: Record<string, unknown>) {
  return <p>Freshness</p>;
}

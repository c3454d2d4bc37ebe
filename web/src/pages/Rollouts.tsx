// TEMPORARY: replaced by the real page in the next commits.
export function Rollouts(_props: Record<string, unknown>) {
  return <p>Rollouts</p>;
}

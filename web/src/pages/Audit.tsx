// TEMPORARY: replaced by the real page in the next commits.
export function Audit(_props: Record<string, unknown>) {
  return <p>Audit</p>;
}

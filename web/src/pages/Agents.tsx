// TEMPORARY: replaced by the real page in the next commits.
export function Agents(_props: Record<string, unknown>) {
  return <p>Agents</p>;
}

// TEMPORARY: replaced by the real page in the next commits.
export function Tokens(_props: Record<string, unknown>) {
  return <p>Tokens</p>;
}

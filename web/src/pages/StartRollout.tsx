// TEMPORARY: replaced by the real page in the next commits.
export function StartRollout(_props: Record<string, unknown>) {
  return <p>StartRollout</p>;
}

// TEMPORARY: replaced by the real page in the next commits.
export function RolloutDetail(_props: Record<string, unknown>) {
  return <p>RolloutDetail</p>;
}

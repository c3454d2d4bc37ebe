// TEMPORARY: replaced by the real page in the next commits.
export function ClusterDetail(_props: Record<string, unknown>) {
  return <p>ClusterDetail</p>;
}

// TEMPORARY: replaced by the real page in the next commits.
export function Bundles(_props: Record<string, unknown>) {
  return <p>Bundles</p>;
}

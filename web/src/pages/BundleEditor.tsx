// TEMPORARY: replaced by the real page in the next commits.
export function BundleEditor(_props: Record<string, unknown>) {
  return <p>BundleEditor</p>;
}

// TEMPORARY: replaced by the real page in the next commits.
export function BundleDetail(_props: Record<string, unknown>) {
  return <p>BundleDetail</p>;
}

/** A unified diff with added, removed and hunk lines coloured. */
export function Diff({ text }: { text: string }) {
  if (!text) return <p className="muted">The manifests are identical.</p>;
  return (
    <pre className="code diff" aria-label="Diff">
      {text.split("\n").map((line, i) => {
        const cls = line.startsWith("+++") || line.startsWith("---") ? "" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "";
        return (
          <span key={i} className={cls || undefined}>
            {line}
            {"\n"}
          </span>
        );
      })}
    </pre>
  );
}

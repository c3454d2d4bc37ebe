// The bundle editor: one text area per YAML document, stacked like one file, so that the hub's
// validation problems can be shown right under the object they name. Typing or pasting a
// "---" line splits a document when the area loses focus.
import { useEffect, useRef, type ChangeEvent } from "react";
import { describeDoc, docTitle, splitDocs, type Problem } from "../lib/manifests";

export interface ManifestEditorProps {
  docs: string[];
  onChange: (docs: string[]) => void;
  problems: Problem[];
  readOnly?: boolean;
}

export function ManifestEditor({ docs, onChange, problems, readOnly }: ManifestEditorProps) {
  const root = useRef<HTMLDivElement>(null);
  // Bring the first problem into view: the button that asked for validation is below the editor.
  useEffect(() => {
    const first = root.current?.querySelector(".problem");
    first?.closest(".doc")?.scrollIntoView?.({ block: "start" });
  }, [problems]);
  const set = (i: number, text: string) => onChange(docs.map((d, j) => (j === i ? text : d)));
  const resplit = (i: number) => {
    const parts = splitDocs(docs[i]);
    if (parts.length > 1) onChange([...docs.slice(0, i), ...parts, ...docs.slice(i + 1)]);
  };
  const remove = (i: number) => onChange(docs.length > 1 ? docs.filter((_, j) => j !== i) : [""]);
  return (
    <div className="editor" role="group" aria-label="Manifests" ref={root}>
      {docs.map((text, i) => {
        const d = describeDoc(text);
        const title = docTitle(d, i);
        const mine = problems.filter((p) => p.doc === i);
        return (
          <div key={i} className={mine.length ? "doc has-problem" : "doc"} data-object={title}>
            <div className="doc-head">
              <span>{title}</span>
              {!readOnly && docs.length > 1 ? (
                <button type="button" className="link" onClick={() => remove(i)} aria-label={`Remove ${title}`}>
                  remove
                </button>
              ) : null}
            </div>
            <textarea
              className="code"
              aria-label={`YAML of ${title}`}
              spellCheck={false}
              readOnly={readOnly}
              rows={Math.max(4, text.split("\n").length + 1)}
              value={text}
              onChange={(e: ChangeEvent<HTMLTextAreaElement>) => set(i, e.target.value)}
              onBlur={() => resplit(i)}
            />
            {mine.map((p, k) => (
              <p key={k} className="problem" role="alert">
                <strong>{p.subject || title}</strong>
                {p.message}
              </p>
            ))}
          </div>
        );
      })}
      {!readOnly ? (
        <div className="doc-head">
          <button type="button" className="link" onClick={() => onChange([...docs, "apiVersion: kollect.dev/v1alpha1\nkind: \nmetadata:\n  name: \nspec:\n"])}>
            Add an object
          </button>
        </div>
      ) : null}
    </div>
  );
}

// The bundle editor: one code editor per YAML document, stacked like one file, so that the
// hub's validation problems can be shown at their lines and listed right under the object
// they name. Typing or pasting a "---" line splits a document when its editor loses focus; when
// focus leaves because a button is being pressed, the split waits until the press is over, so
// that the new layout does not move the button from under the pointer and swallow the click.
import { lazy, Suspense, useEffect, useRef, type ChangeEvent } from "react";
import { describeDoc, docTitle, splitDocs, type Problem } from "../lib/manifests";

// CodeMirror is loaded when an editor is first shown, not with the dashboard: it would take more
// than a third of the first paint's JavaScript budget (about 117 of 300 KB gzipped). Until it is
// there, a plain text area edits the same text.
const ManifestEditorCode = lazy(() => import("./ManifestEditorCode"));

export interface ManifestEditorProps {
  docs: string[];
  onChange: (docs: string[]) => void;
  problems: Problem[];
  /** Called after a document was removed, so that problems of the later ones can follow them. */
  onRemove?: (index: number) => void;
  readOnly?: boolean;
}

export function ManifestEditor({ docs, onChange, problems, onRemove, readOnly }: ManifestEditorProps) {
  const root = useRef<HTMLDivElement>(null);
  // Bring the first problem into view: the button that asked for validation is below the editor.
  useEffect(() => {
    const first = root.current?.querySelector(".problem");
    first?.closest(".doc")?.scrollIntoView?.({ block: "start" });
  }, [problems]);
  // The latest documents and callback, for a split that runs after a press.
  const latest = useRef({ docs, onChange });
  latest.current = { docs, onChange };
  const pressing = usePointerPressed();
  const set = (i: number, text: string) => onChange(docs.map((d, j) => (j === i ? text : d)));
  const split = (i: number, parts: string[]) => {
    const now = latest.current.docs;
    latest.current.onChange([...now.slice(0, i), ...parts, ...now.slice(i + 1)]);
  };
  // The code editor passes its own text: its last change may not have been rendered yet.
  const onBlur = (i: number, text = docs[i]) => {
    const parts = splitDocs(text);
    if (parts.length < 2) return;
    if (!pressing.current) return split(i, parts);
    // The click that moved focus fires on pointerup; split after it, unless the document was
    // edited or moved since: that edit's own blur splits it.
    const after = () => setTimeout(() => latest.current.docs[i] === text && split(i, parts), 0);
    window.addEventListener("pointerup", after, { once: true, capture: true });
  };
  const remove = (i: number) => {
    onChange(docs.length > 1 ? docs.filter((_, j) => j !== i) : [""]);
    onRemove?.(i);
  };
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
            <Suspense
              fallback={
                <textarea
                  className="code"
                  aria-label={`YAML of ${title}`}
                  spellCheck={false}
                  readOnly={readOnly}
                  rows={Math.max(4, text.split("\n").length + 1)}
                  value={text}
                  onChange={(e: ChangeEvent<HTMLTextAreaElement>) => set(i, e.target.value)}
                  onBlur={() => onBlur(i)}
                />
              }
            >
              <ManifestEditorCode
                value={text}
                label={`YAML of ${title}`}
                readOnly={readOnly}
                problems={mine}
                onChange={(t) => set(i, t)}
                onBlur={(t) => onBlur(i, t)}
              />
            </Suspense>
            {mine.map((p, k) => (
              <p key={k} className="problem" role="alert">
                {/* "document N" is all the hub can say of a document it could not read; the editor
                    names it from its text, and says where it is beside. */}
                <strong>{!p.subject || /^document \d+$/.test(p.subject) ? title : p.subject}</strong>
                <span className="problem-where">
                  document {i + 1}, line {p.line}
                </span>
                <span className={p.message.includes("\n") ? "problem-msg multiline" : "problem-msg"}>{p.message}</span>
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

/** Whether a pointer button is down anywhere in the page (set before the blur it causes). */
function usePointerPressed() {
  const pressed = useRef(false);
  useEffect(() => {
    const down = () => (pressed.current = true);
    const up = () => setTimeout(() => (pressed.current = false), 0);
    window.addEventListener("pointerdown", down, true);
    window.addEventListener("pointerup", up, true);
    window.addEventListener("pointercancel", up, true);
    return () => {
      window.removeEventListener("pointerdown", down, true);
      window.removeEventListener("pointerup", up, true);
      window.removeEventListener("pointercancel", up, true);
    };
  }, []);
  return pressed;
}

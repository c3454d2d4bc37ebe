// The code editor of one bundle document: CodeMirror with YAML highlighting, line numbers, and
// the hub's problems as diagnostics at their lines (an underline, a gutter marker, the message
// on hover; F8 goes to the next one). It is its own module because ManifestEditor imports
// it lazily: CodeMirror is loaded on the bundle editor's page only, not before the dashboard's
// first paint. Tab is left to the browser, so the keyboard moves on to the next field.
import { useEffect, useRef } from "react";
import { defaultKeymap, history, historyKeymap } from "@codemirror/commands";
import { yaml } from "@codemirror/lang-yaml";
import { indentUnit, syntaxHighlighting } from "@codemirror/language";
import { lintGutter, lintKeymap, setDiagnostics, type Diagnostic } from "@codemirror/lint";
import { Annotation, Compartment, EditorState } from "@codemirror/state";
import { drawSelection, EditorView, highlightActiveLineGutter, keymap, lineNumbers } from "@codemirror/view";
import { classHighlighter } from "@lezer/highlight";

export interface CodeProblem {
  /** 1-based line of the document. */
  line: number;
  message: string;
}

export interface ManifestEditorCodeProps {
  value: string;
  /** The accessible name of the editing area. */
  label: string;
  readOnly?: boolean;
  problems: CodeProblem[];
  onChange: (text: string) => void;
  /** Called with the editor's text when it loses focus. */
  onBlur: (text: string) => void;
}

// Marks a change that came from the props (a split, a file loaded), not from the person typing:
// it is not reported back through onChange.
const fromProps = Annotation.define<boolean>();

// Colours from the dashboard's variables, so the light and dark themes both apply. The token
// classes are classHighlighter's (tok-*), stable names the Chromium test can look for.
const theme = EditorView.theme({
  "&": { backgroundColor: "var(--code-bg)", color: "var(--text)", fontSize: "13px" },
  "&.cm-focused": { outline: "3px solid var(--focus)", outlineOffset: "-3px" },
  ".cm-content": { padding: ".5rem 0", caretColor: "var(--text)" },
  ".cm-content:focus-visible": { outline: "none" }, // the editor's own outline shows the focus
  ".cm-scroller": { fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace', lineHeight: "1.45" },
  ".cm-gutters": { backgroundColor: "var(--panel)", color: "var(--muted)", borderRight: "1px solid var(--border)" },
  // Every document has an editor: mark the cursor's line only in the one being edited.
  ".cm-activeLineGutter": { backgroundColor: "transparent" },
  "&.cm-focused .cm-activeLineGutter": { backgroundColor: "var(--neutral-bg)" },
  ".cm-cursor": { borderLeftColor: "var(--text)" },
  "&.cm-focused .cm-selectionBackground, .cm-selectionBackground": { backgroundColor: "var(--info-bg)" },
  ".tok-propertyName": { color: "var(--accent)" },
  ".tok-string, .tok-string2": { color: "var(--ok)" },
  ".tok-comment": { color: "var(--muted)", fontStyle: "italic" },
  ".tok-punctuation, .tok-meta": { color: "var(--muted)" },
  ".tok-labelName, .tok-typeName, .tok-keyword": { color: "var(--warn)" },
});

function diagnostics(state: EditorState, problems: CodeProblem[]): Diagnostic[] {
  return problems.map((p) => {
    const line = state.doc.line(Math.min(Math.max(1, p.line), state.doc.lines));
    // Underline from the first character, not the indentation.
    const from = line.from + (line.text.length - line.text.trimStart().length);
    return { from, to: line.to, severity: "error", message: p.message, source: "hub" };
  });
}

export default function ManifestEditorCode({ value, label, readOnly, problems, onChange, onBlur }: ManifestEditorCodeProps) {
  const host = useRef<HTMLDivElement>(null);
  const view = useRef<EditorView | null>(null);
  // The latest props, for the editor's listeners, which are installed once.
  const latest = useRef({ onChange, onBlur, problems });
  latest.current = { onChange, onBlur, problems };
  const labelled = useRef(new Compartment());
  const editable = useRef(new Compartment());

  useEffect(() => {
    const v = new EditorView({
      parent: host.current!,
      state: EditorState.create({
        doc: value,
        extensions: [
          lineNumbers(),
          highlightActiveLineGutter(),
          lintGutter(),
          history(),
          drawSelection(),
          indentUnit.of("  "),
          EditorState.tabSize.of(2),
          yaml(),
          syntaxHighlighting(classHighlighter),
          keymap.of([...defaultKeymap, ...historyKeymap, ...lintKeymap]),
          theme,
          labelled.current.of(EditorView.contentAttributes.of({ "aria-label": label })),
          editable.current.of(EditorState.readOnly.of(Boolean(readOnly))),
          EditorView.updateListener.of((u) => {
            if (u.docChanged && !u.transactions.some((t) => t.annotation(fromProps))) latest.current.onChange(u.state.doc.toString());
          }),
          // The DOM's blur, at once: ManifestEditor splits a pasted text then, or after the
          // press that moved the focus.
          EditorView.domEventHandlers({ blur: (_, v) => void latest.current.onBlur(v.state.doc.toString()) }),
        ],
      }),
    });
    v.dispatch(setDiagnostics(v.state, diagnostics(v.state, latest.current.problems)));
    view.current = v;
    return () => {
      v.destroy();
      view.current = null;
    };
    // Created once, from the first props; the effects below follow them.
  }, []);

  useEffect(() => {
    const v = view.current;
    if (!v || v.state.doc.toString() === value) return;
    v.dispatch({ changes: { from: 0, to: v.state.doc.length, insert: value }, annotations: fromProps.of(true) });
    // The old diagnostics' positions mean nothing in the new text.
    v.dispatch(setDiagnostics(v.state, diagnostics(v.state, latest.current.problems)));
  }, [value]);

  // Problems arrive as a new array on every render; compare what they say.
  const problemKey = JSON.stringify(problems.map((p) => [p.line, p.message]));
  useEffect(() => {
    const v = view.current;
    if (v) v.dispatch(setDiagnostics(v.state, diagnostics(v.state, latest.current.problems)));
  }, [problemKey]);

  useEffect(() => {
    view.current?.dispatch({ effects: labelled.current.reconfigure(EditorView.contentAttributes.of({ "aria-label": label })) });
  }, [label]);
  useEffect(() => {
    view.current?.dispatch({ effects: editable.current.reconfigure(EditorState.readOnly.of(Boolean(readOnly))) });
  }, [readOnly]);

  return <div className="code-editor" ref={host} />;
}

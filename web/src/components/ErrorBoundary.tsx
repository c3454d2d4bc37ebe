import { Component, type ErrorInfo, type ReactNode } from "react";
import { ErrorBox } from "./ErrorBox";

interface Props {
  children: ReactNode;
  /** What the boundary guards ("this page", "this row"); shown in the message. */
  what?: string;
}

/**
 * Catches a render failure so it replaces only the part that failed — a page or a panel — and
 * never blanks the whole dashboard. Give it a key (the path) to reset on navigation.
 */
export class ErrorBoundary extends Component<Props, { error: unknown }> {
  state: { error: unknown } = { error: null };

  static getDerivedStateFromError(error: unknown) {
    return { error };
  }

  componentDidCatch(error: unknown, info: ErrorInfo) {
    console.error("dashboard render failure", error, info.componentStack);
  }

  render() {
    if (this.state.error) {
      return (
        <div className="panel">
          <p>
            Something in {this.props.what ?? "this view"} failed to display. The rest of the dashboard still works.
          </p>
          <ErrorBox error={this.state.error} onRetry={() => this.setState({ error: null })} />
        </div>
      );
    }
    return this.props.children;
  }
}

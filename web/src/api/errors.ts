// Every error the dashboard shows goes through describe(): a ConnectError becomes a sentence a
// person can act on, with the hub's own message (which may span several lines) kept verbatim.
import { Code, ConnectError } from "@connectrpc/connect";

export interface Described {
  title: string;
  detail: string;
  code?: Code;
}

const titles: Partial<Record<Code, string>> = {
  [Code.Unauthenticated]: "The hub did not accept your API token",
  [Code.PermissionDenied]: "Your token's role does not allow this",
  [Code.InvalidArgument]: "The hub refused the request",
  [Code.NotFound]: "Not found",
  [Code.AlreadyExists]: "Already exists",
  [Code.FailedPrecondition]: "Not possible right now",
  [Code.Unavailable]: "The hub is unreachable",
  [Code.DeadlineExceeded]: "The hub took too long to answer",
  [Code.Unimplemented]: "This hub does not offer that yet",
  [Code.Internal]: "The hub failed",
  [Code.Canceled]: "Cancelled",
  [Code.ResourceExhausted]: "The hub is overloaded",
};

export function describe(err: unknown): Described {
  if (isDescribed(err)) return err;
  if (err instanceof ConnectError) {
    const title = titles[err.code] ?? `Error (${Code[err.code] ?? err.code})`;
    let detail = err.rawMessage;
    if (err.code === Code.Unavailable && /fetch|network/i.test(detail)) {
      detail = `${detail} — check that the hub is running and reachable from this browser.`;
    }
    return { title, detail, code: err.code };
  }
  if (err instanceof Error) return { title: "Something went wrong", detail: err.message };
  return { title: "Something went wrong", detail: String(err) };
}

export function isCode(err: unknown, code: Code): boolean {
  return err instanceof ConnectError && err.code === code;
}

function isDescribed(v: unknown): v is Described {
  return typeof v === "object" && v !== null && !(v instanceof Error) && typeof (v as Described).title === "string" && typeof (v as Described).detail === "string";
}

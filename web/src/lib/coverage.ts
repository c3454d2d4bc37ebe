// Coverage: how much of a target's objects an inventory's rows describe (kollect.dev/v1alpha1
// CoverageState). Only "complete" means the rows are all of the objects; syncing and retired
// are expected to be temporary or deliberate; the rest mean the rows are the last known ones
// (or, for deniedByScope, gone) because the agent cannot or may not see the objects.

export type CoverageHealth = "good" | "bad" | "unknown";

const waiting: ReadonlySet<string> = new Set(["syncing", "retired"]);

/** How a coverage state is coloured: good (complete), unknown (syncing, retired), or bad. */
export function coverageHealth(state: string): CoverageHealth {
  if (state === "complete") return "good";
  return waiting.has(state) ? "unknown" : "bad";
}

// Condition polarity: for most condition types True is good (Ready, Synced, Available), but for
// some True is the problem (Degraded, Stalled). The dashboard colours a condition by whether
// its status is good, never by the status alone.

/**
 * Condition types whose True status means something is wrong: Kollect's Degraded, and the
 * usual negative-polarity types of Kubernetes controllers (kstatus' Stalled, and the like).
 */
export const negativeConditionTypes: ReadonlySet<string> = new Set(["Degraded", "Stalled", "Failed", "Failing", "Error"]);

export type ConditionHealth = "good" | "bad" | "unknown";

/** Whether a condition of this type and status is good, bad, or unknown (status Unknown, or not True/False). */
export function conditionHealth(type: string, status: string): ConditionHealth {
  if (status !== "True" && status !== "False") return "unknown";
  const trueIsGood = !negativeConditionTypes.has(type);
  return (status === "True") === trueIsGood ? "good" : "bad";
}

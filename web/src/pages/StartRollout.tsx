// Start a staged rollout: choose the revision and the strategy, preview the waves (a dry run:
// the hub says which cluster lands in which wave), then start exactly what was previewed.
import { useMemo, useState } from "react";
import { create } from "@bufbuild/protobuf";
import { durationFromMs } from "@bufbuild/protobuf/wkt";
import { useCan, useFleetSnapshot, useSession } from "../api/context";
import { ErrorBox } from "../components/ErrorBox";
import { Waves, strategyText } from "../components/RolloutParts";
import { RolloutStrategySchema, type Rollout, type RolloutStrategy } from "../gen/kollect/fleet/v1/rollout_pb";
import { Role } from "../gen/kollect/fleet/v1/types_pb";
import { navigate, useLocation } from "../lib/router";
import { parseSelector } from "../lib/selector";
import { useQuery } from "../lib/useQuery";

export interface StrategyForm {
  canary: string;
  waveKind: "all" | "count" | "percent";
  waveValue: string;
  maxConcurrency: string;
  minHealthySeconds: string;
  deadlineMinutes: string;
  maxFailures: string;
  requireApproval: boolean;
  skipInventoriesReady: boolean;
  skipSinkErrors: boolean;
  skipCoverage: boolean;
  maxItemChange: string;
}

export const defaultForm: StrategyForm = {
  canary: "",
  waveKind: "all",
  waveValue: "",
  maxConcurrency: "0",
  minHealthySeconds: "0",
  deadlineMinutes: "10",
  maxFailures: "0",
  requireApproval: false,
  skipInventoriesReady: false,
  skipSinkErrors: false,
  skipCoverage: false,
  maxItemChange: "0",
};

function num(v: string, what: string, min = 0): number {
  const n = Number(v.trim() || "0");
  if (!Number.isFinite(n) || n < min) throw new Error(`${what}: "${v}" is not a number ≥ ${min}`);
  return n;
}

/** toStrategy turns the form into the protocol's RolloutStrategy, naming the field at fault. */
export function toStrategy(f: StrategyForm): RolloutStrategy {
  const s = create(RolloutStrategySchema, {
    maxConcurrency: Math.floor(num(f.maxConcurrency, "Max concurrency")),
    maxFailures: Math.floor(num(f.maxFailures, "Max failures")),
    requireApproval: f.requireApproval,
    minHealthy: durationFromMs(num(f.minHealthySeconds, "Healthy for") * 1000),
    progressDeadline: durationFromMs(num(f.deadlineMinutes, "Deadline", 1) * 60_000),
    gates: {
      skipInventoriesReady: f.skipInventoriesReady,
      skipSinkErrors: f.skipSinkErrors,
      skipCoverage: f.skipCoverage,
      maxItemCountChangePercent: num(f.maxItemChange, "Item count change"),
    },
  });
  if (f.canary.trim()) s.canarySelector = parseSelector(f.canary);
  if (f.waveKind !== "all") {
    const value = Math.floor(num(f.waveValue, "Wave size", 1));
    if (f.waveKind === "percent" && value > 100) throw new Error("Wave size: a percentage is at most 100");
    s.waveSize = { $typeName: "kollect.fleet.v1.WaveSize", size: { case: f.waveKind, value } };
  }
  return s;
}

export function StartRollout() {
  const { fleet } = useSession();
  const snap = useFleetSnapshot();
  const canStart = useCan(Role.OPERATOR);
  const { query } = useLocation();
  const bundles = useMemo(() => [...snap.bundles.values()].sort((a, b) => a.name.localeCompare(b.name)), [snap.bundles]);
  const [bundle, setBundle] = useState(query.get("bundle") ?? "");
  const chosen = bundle || bundles[0]?.name || "";
  const revs = useQuery((signal) => (chosen ? fleet.listBundleRevisions({ name: chosen }, { signal }) : Promise.resolve(undefined)), [chosen]);
  const [revision, setRevision] = useState("0");
  const [form, setForm] = useState<StrategyForm>(defaultForm);
  const [plan, setPlan] = useState<{ key: string; rollout: Rollout } | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const key = JSON.stringify([chosen, revision, form]);
  const set = <K extends keyof StrategyForm>(k: K, v: StrategyForm[K]) => setForm((f) => ({ ...f, [k]: v }));

  const call = async (dryRun: boolean) => {
    setBusy(true);
    setError(null);
    try {
      const res = await fleet.startRollout({ bundle: chosen, revision: BigInt(revision), strategy: toStrategy(form), dryRun });
      if (!res.rollout) throw new Error("the hub answered without a rollout");
      if (dryRun) setPlan({ key, rollout: res.rollout });
      else navigate(`/rollouts/${res.rollout.id}`);
    } catch (err) {
      setError(err);
      if (dryRun) setPlan(null);
    } finally {
      setBusy(false);
    }
  };

  const input = (k: keyof StrategyForm, label: string, hint?: string, type = "number") => (
    <div className="field">
      <label htmlFor={`f-${k}`}>
        <span>{label}</span> {hint ? <small>{hint}</small> : null}
      </label>
      <input id={`f-${k}`} type={type} min={0} value={form[k] as string} onChange={(e) => set(k, e.target.value as never)} />
    </div>
  );

  const b = snap.bundles.get(chosen);
  return (
    <>
      <h1>Start a rollout</h1>
      <div className="grid2">
        <section className="panel">
          <div className="field">
            <label htmlFor="r-bundle">
              <span>Bundle</span>
            </label>
            <select id="r-bundle" value={chosen} onChange={(e) => { setBundle(e.target.value); setRevision("0"); }}>
              {bundles.map((x) => (
                <option key={x.name} value={x.name}>
                  {x.name}
                </option>
              ))}
            </select>
            {b ? (
              <small>
                stable revision {b.stableRevision ? b.stableRevision.toString() : "none"}, latest {b.latestRevision.toString()}
                {b.activeRolloutId ? `; rollout #${b.activeRolloutId} is active` : ""}
              </small>
            ) : null}
          </div>
          <div className="field">
            <label htmlFor="r-rev">
              <span>Revision</span>
            </label>
            <select id="r-rev" value={revision} onChange={(e) => setRevision(e.target.value)}>
              <option value="0">latest</option>
              {(revs.data?.revisions ?? []).map((r) => (
                <option key={r.revision.toString()} value={r.revision.toString()}>
                  {r.revision.toString()} {r.message ? `— ${r.message}` : ""}
                </option>
              ))}
            </select>
          </div>
          {input("canary", "Canary selector", "the first wave, e.g. tier=canary; empty: no canary", "text")}
          <div className="field">
            <span>
              <strong>Wave size</strong> <small className="hint">after the canary</small>
            </span>
            <div className="row">
              <select aria-label="Wave size kind" value={form.waveKind} onChange={(e) => set("waveKind", e.target.value as StrategyForm["waveKind"])}>
                <option value="all">all remaining clusters in one wave</option>
                <option value="count">clusters per wave</option>
                <option value="percent">percent of the clusters per wave</option>
              </select>
              {form.waveKind !== "all" ? (
                <input aria-label="Wave size" type="number" min={1} value={form.waveValue} onChange={(e) => set("waveValue", e.target.value)} />
              ) : null}
            </div>
          </div>
          {input("maxConcurrency", "Max concurrency", "clusters of a wave moving at once; 0: the whole wave")}
        </section>
        <section className="panel">
          {input("minHealthySeconds", "Healthy for (seconds)", "gates must pass this long without a break; 0: the first passing heartbeat")}
          {input("deadlineMinutes", "Wave deadline (minutes)", "clusters not healthy by then fail")}
          {input("maxFailures", "Max failures", "failed clusters tolerated before the rollout pauses itself")}
          <fieldset className="field">
            <legend>
              <strong>Gates</strong> <small className="hint">"applied" always holds</small>
            </legend>
            <label>
              <input type="checkbox" checked={!form.skipInventoriesReady} onChange={(e) => set("skipInventoriesReady", !e.target.checked)} /> every
              inventory Ready
            </label>
            <label>
              <input type="checkbox" checked={!form.skipSinkErrors} onChange={(e) => set("skipSinkErrors", !e.target.checked)} /> no new sink error
            </label>
            <label>
              <input type="checkbox" checked={!form.skipCoverage} onChange={(e) => set("skipCoverage", !e.target.checked)} /> no target loses
              coverage
            </label>
            {input("maxItemChange", "Max item count change (%)", "0: off")}
          </fieldset>
          <label>
            <input type="checkbox" checked={form.requireApproval} onChange={(e) => set("requireApproval", e.target.checked)} /> Require approval
            after every wave
          </label>
        </section>
      </div>
      <div className="actions">
        <button type="button" onClick={() => call(true)} disabled={busy || !chosen}>
          Preview waves
        </button>
        {canStart ? (
          <button type="button" className="primary" onClick={() => call(false)} disabled={busy || plan?.key !== key}>
            Start rollout
          </button>
        ) : null}
        {canStart && plan?.key !== key ? <span className="muted">Preview first: start runs exactly the previewed plan.</span> : null}
      </div>
      {error ? <ErrorBox error={error} /> : null}
      {plan && plan.key === key ? (
        <section aria-label="Preview">
          <h2>
            Preview: {plan.rollout.bundle} {plan.rollout.fromRevision ? plan.rollout.fromRevision.toString() : "none"} →{" "}
            {plan.rollout.toRevision.toString()}, {plan.rollout.clusters.length} clusters
          </h2>
          <p className="muted">{strategyText(plan.rollout.strategy).join("; ")}</p>
          <Waves r={plan.rollout} preview />
        </section>
      ) : null}
    </>
  );
}

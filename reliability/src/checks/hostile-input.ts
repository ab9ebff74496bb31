/**
 * Hostile input: the corpus of corpus.ts against every contract, in a worker process (so that
 * a case that hangs or crashes — a catastrophic regex, a 16 MB value — is reported as such and
 * the rest still run). Around it, data stowage must not touch: a canary table/collection
 * written with the raw driver outside the run's namespace, and stowage data in a bystander
 * namespace; both are digested before and after.
 *
 * Proves: each input either round-trips exactly or fails with the right StowageError code,
 * and nothing else in the database changed.
 */
import type { JsonObject, KeyValueStore, SnapshotStore } from '@stowage/core';
import type { Budget } from '../config.ts';
import type { BackendReport } from '../report.ts';
import { POSTGRES_BACKENDS, type Backend, type CanaryAccess } from '../backends/types.ts';
import { startWorker, type Role } from '../workers.ts';
import { formatMs } from '../util.ts';
import { buildCorpus, classify, PATTERN_SEEDS, type CorpusTools } from './corpus.ts';
import { withClient } from '../backends/pg-admin.ts';

export interface CorpusParams {
  canaryName: string;
  startAt: number;
  largeValueBytes: number;
}

export type CorpusEvent = { start: number } | { index: number; outcome: string; ms: number };

export interface CorpusResult {
  bystanderProblems: string[];
}

const BYSTANDER_KEYS = Array.from({ length: 10 }, (_, i) => [`bystander/${i}`, `value ${i} %_*?\\ '"`] as const);

async function plantBystander(bystander: { kv: KeyValueStore; snapshots: SnapshotStore<JsonObject> }): Promise<void> {
  for (const [key, value] of BYSTANDER_KEYS) {
    await bystander.kv.set(key, value);
    await bystander.snapshots.save(key, { value });
  }
}

/** Runs corpus cases from `startAt` on, reporting each outcome as it comes. */
export const hostileCorpus: Role<CorpusParams, CorpusResult> = async (backend, params, context) => {
  const cases = buildCorpus(params.canaryName);
  const bystanderOptions = { schema: `${backend.target.namespace}_by` };
  const bystander = { kv: await backend.kv(bystanderOptions), snapshots: await backend.snapshots(bystanderOptions) };
  const tools: CorpusTools = {
    backend: backend.target.name,
    kv: await backend.kv(),
    cache: await backend.cache(),
    snapshots: await backend.snapshots(),
    locks: await backend.locks(),
    largeValueBytes: params.largeValueBytes,
    openKv: (options) => backend.kv(options),
  };
  const bystanderProblems: string[] = [];
  try {
    // Cross-process backends: the parent planted the bystander data before taking its digest.
    if (!backend.crossProcess) await plantBystander(bystander);
    for (const suffix of PATTERN_SEEDS) {
      await tools.kv.set(`pat/${suffix}`, suffix);
      await tools.cache.set(`pat/${suffix}`, suffix);
    }
    for (let index = params.startAt; index < cases.length; index++) {
      const corpusCase = cases[index]!;
      if (corpusCase.only && !corpusCase.only.includes(backend.target.name)) continue;
      context.emit({ start: index } satisfies CorpusEvent);
      const started = performance.now();
      const outcome = await corpusCase.run(tools).catch(classify);
      context.emit({ index, outcome, ms: performance.now() - started } satisfies CorpusEvent);
    }
    for (const suffix of PATTERN_SEEDS) {
      await tools.kv.delete(`pat/${suffix}`);
      await tools.cache.delete(`pat/${suffix}`);
    }
    for (const [key, value] of BYSTANDER_KEYS) {
      if ((await bystander.kv.get(key)) !== value) bystanderProblems.push(`bystander kv ${key} changed`);
      if ((await bystander.snapshots.load(key))?.value !== value) bystanderProblems.push(`bystander snapshot ${key} changed`);
    }
    const strays = (await bystander.kv.keys('*')).filter((key) => !BYSTANDER_KEYS.some(([k]) => k === key));
    // The in-memory bystander shares storage with the corpus (memory has no namespaces), so only its own keys count there.
    if (backend.crossProcess && strays.length > 0) bystanderProblems.push(`bystander namespace gained keys: ${strays.slice(0, 3).join(', ')}`);
  } finally {
    for (const store of [tools.kv, tools.cache, tools.snapshots, tools.locks, bystander.kv, bystander.snapshots]) {
      await store.close().catch(() => undefined);
    }
  }
  return { bystanderProblems };
};

const CASE_LIMIT_MS = 15_000;
const LARGE_CASE_LIMIT_MS = 90_000;

export async function hostileInput(backend: Backend, report: BackendReport, budget: Budget['hostile']): Promise<void> {
  const check = 'hostile input';
  const canaryName = `${backend.target.namespace}_canary`;
  const canary = (backend as Backend & { canary?: CanaryAccess }).canary;
  const cases = buildCorpus(canaryName);
  const applicable = cases.filter((c) => !c.only || c.only.includes(backend.target.name));
  const outcomes = new Map<number, string>();
  const durations = new Map<number, number>();
  let bystanderProblems: string[] = [];
  let digestBefore: string | undefined;
  if (canary) {
    await canary.plant();
    const bystanderOptions = { schema: `${backend.target.namespace}_by` };
    const bystander = { kv: await backend.kv(bystanderOptions), snapshots: await backend.snapshots(bystanderOptions) };
    try {
      await plantBystander(bystander);
    } finally {
      await bystander.kv.close();
      await bystander.snapshots.close();
    }
    digestBefore = await canary.digest();
  }
  const started = performance.now();
  try {
    let startAt = 0;
    while (startAt < cases.length && performance.now() - started < budget.timeLimitMs) {
      let current = -1;
      let deadline = Infinity;
      const worker = startWorker<CorpusResult>(
        backend.target,
        'hostile-corpus',
        { canaryName, startAt, largeValueBytes: budget.largeValueBytes } satisfies CorpusParams,
        {
          hardLimitMs: budget.timeLimitMs + LARGE_CASE_LIMIT_MS,
          onEvent: (event) => {
            const e = event as CorpusEvent;
            if ('start' in e) {
              current = e.start;
              deadline = performance.now() + (cases[current]!.large ? LARGE_CASE_LIMIT_MS : CASE_LIMIT_MS);
            } else {
              outcomes.set(e.index, e.outcome);
              durations.set(e.index, e.ms);
              current = -1;
              deadline = Infinity;
            }
          },
        },
      );
      const watchdog = setInterval(() => {
        if (performance.now() > deadline) worker.kill('SIGKILL');
      }, 200);
      try {
        const result = await worker.result;
        bystanderProblems = result.bystanderProblems;
        startAt = cases.length;
      } catch (error) {
        if (current < 0) throw error;
        // The worker hung or died inside one case: record it and go on after it.
        outcomes.set(current, worker.child.signalCode === 'SIGKILL' ? 'hung (killed after its time limit)' : `worker died: ${classify(error)}`);
        startAt = current + 1;
      } finally {
        clearInterval(watchdog);
        await worker.exitsWithin(10_000);
      }
    }
  } finally {
    if (canary) {
      const digestAfter = await canary.digest();
      report.expect(check, 'canary table/collection and bystander namespace digest', digestAfter === digestBefore ? 'unchanged' : 'CHANGED', 'unchanged', digestAfter === digestBefore);
      await canary.remove();
    }
    await dropHostileNamespaces(backend);
  }

  const slowest = [...durations].sort((a, b) => b[1] - a[1]).slice(0, 3);
  console.log(`[reliability]   slowest corpus cases: ${slowest.map(([i, ms]) => `${cases[i]!.id} ${formatMs(ms)}`).join(', ')}`);
  const wrong = applicable.filter((c) => {
    const outcome = outcomes.get(cases.indexOf(c));
    return outcome === undefined || !(c.expect as readonly string[]).includes(outcome);
  });
  const roundTrips = [...outcomes.values()].filter((o) => o === 'roundtrip').length;
  report.expect(check, 'corpus cases run on this backend', outcomes.size, `= ${applicable.length} (≥ 60)`, outcomes.size === applicable.length && applicable.length >= 60);
  report.info(check, 'round-tripped / refused with the expected code', `${roundTrips} / ${outcomes.size - roundTrips - wrong.length}`);
  report.expect(check, 'cases with a wrong outcome', wrong.length, '= 0', wrong.length === 0);
  report.expect(check, 'bystander stowage data changed', bystanderProblems.length, '= 0', bystanderProblems.length === 0);
  for (const c of wrong) {
    report.note(`hostile input ${c.id}: got ${outcomes.get(cases.indexOf(c)) ?? 'no outcome (not run)'}; want ${c.expect.join(' or ')}`);
  }
  for (const problem of bystanderProblems) report.note(`hostile input: ${problem}`);
}

/** A hostile schema name that the adapter accepted created a schema outside the namespace: drop it (never a system schema). */
async function dropHostileNamespaces(backend: Backend): Promise<void> {
  if (!POSTGRES_BACKENDS.includes(backend.target.name)) return;
  await withClient(backend.target.url!, async (client) => {
    const { rows } = await client.query<{ name: string }>(
      `SELECT quote_ident(nspname) AS name FROM pg_namespace WHERE nspname LIKE 'public;%'`,
    );
    for (const { name } of rows) await client.query(`DROP SCHEMA ${name} CASCADE`);
  });
}

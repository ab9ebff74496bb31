/**
 * Lost updates: writers increment one counter with read, compare-and-set, retry on
 * E_VERSION_CONFLICT — once on a key-value entry (`compareAndSet` with its version) and once
 * on a snapshot (`save` with `expectedVersion`). Proves: the final count is exactly the number
 * of increments acknowledged (none lost, none applied twice) and versions advanced at least once per write.
 */
import { isStowageError } from '@stowage/core';
import type { Budget } from '../config.ts';
import type { BackendReport } from '../report.ts';
import type { Backend } from '../backends/types.ts';
import { formatMs, randomInt, sleep } from '../util.ts';
import { runWorkers, type Role } from '../workers.ts';

export interface WriterParams {
  key: string;
  snapshotId: string;
  increments: number;
  deadline: number;
}

export interface WriterResult {
  kvDone: number;
  kvConflicts: number;
  snapshotDone: number;
  snapshotConflicts: number;
}

/**
 * Exponential back-off with full jitter after a conflict (what a real client does), so that
 * eight writers do not retry in lock step.
 */
const backoff = (conflictsInARow: number) => sleep(randomInt(0, Math.min(16, 2 ** conflictsInARow)));

/**
 * Read, compare-and-set, retry on E_VERSION_CONFLICT, until `increments` succeeded. Returns
 * the number of conflicts met.
 */
async function incrementLoop(
  increments: number,
  deadline: number,
  attempt: () => Promise<void>,
  onSuccess: () => void,
): Promise<number> {
  let conflicts = 0;
  for (let done = 0, inARow = 0; done < increments && Date.now() < deadline; ) {
    try {
      await attempt();
      done += 1;
      inARow = 0;
      onSuccess();
    } catch (error) {
      if (!isStowageError(error, 'E_VERSION_CONFLICT')) throw error;
      conflicts += 1;
      await backoff(++inARow);
    }
  }
  return conflicts;
}

/** Increments the key-value counter and, at the same time, the snapshot counter. */
export const casWriter: Role<WriterParams, WriterResult> = async (backend, params) => {
  const result: WriterResult = { kvDone: 0, kvConflicts: 0, snapshotDone: 0, snapshotConflicts: 0 };
  const kv = await backend.kv();
  const snapshots = await backend.snapshots();
  try {
    const kvLoop = incrementLoop(
      params.increments,
      params.deadline,
      async () => {
        const entry = await kv.getEntry(params.key);
        if (entry === null) throw new Error(`counter key ${params.key} vanished`);
        await kv.compareAndSet(params.key, String(Number(entry.value) + 1), entry.version);
      },
      () => (result.kvDone += 1),
    );
    const snapshotLoop = incrementLoop(
      params.increments,
      params.deadline,
      async () => {
        const current = await snapshots.loadVersioned(params.snapshotId);
        if (current === null) throw new Error(`counter snapshot ${params.snapshotId} vanished`);
        await snapshots.save(params.snapshotId, { count: Number(current.snapshot.count) + 1 }, { expectedVersion: current.version });
      },
      () => (result.snapshotDone += 1),
    );
    [result.kvConflicts, result.snapshotConflicts] = await Promise.all([kvLoop, snapshotLoop]);
  } finally {
    await kv.close();
    await snapshots.close();
  }
  return result;
};

export interface LostUpdateFigures {
  target: number;
  kvDone: number;
  kvFinal: number;
  kvVersionDelta: number;
  kvConflicts: number;
  snapshotDone: number;
  snapshotFinal: number;
  snapshotVersionDelta: number;
  snapshotConflicts: number;
  durationMs: number;
}

export async function measureLostUpdates(backend: Backend, budget: Budget['lostUpdates']): Promise<LostUpdateFigures> {
  const key = 'counter';
  const snapshotId = 'counter-snapshot';
  const kv = await backend.kv();
  const snapshots = await backend.snapshots();
  try {
    await kv.set(key, '0');
    await snapshots.save(snapshotId, { count: 0 });
    const initialKvVersion = (await kv.getEntry(key))!.version;
    const initialSnapshotVersion = (await snapshots.loadVersioned(snapshotId))!.version;
    const started = performance.now();
    const params: WriterParams = { key, snapshotId, increments: budget.increments, deadline: Date.now() + budget.timeLimitMs };
    const results = await runWorkers<WriterParams, WriterResult>(backend, 'cas-writer', casWriter, budget.writers, () => params, {
      hardLimitMs: budget.timeLimitMs + 30_000,
    });
    const sum = (field: keyof WriterResult) => results.reduce((total, r) => total + r[field], 0);
    const entry = await kv.getEntry(key);
    const snapshot = await snapshots.loadVersioned(snapshotId);
    return {
      target: budget.writers * budget.increments,
      kvDone: sum('kvDone'),
      kvFinal: Number(entry?.value),
      kvVersionDelta: (entry?.version ?? 0) - initialKvVersion,
      kvConflicts: sum('kvConflicts'),
      snapshotDone: sum('snapshotDone'),
      snapshotFinal: Number(snapshot?.snapshot.count),
      snapshotVersionDelta: (snapshot?.version ?? 0) - initialSnapshotVersion,
      snapshotConflicts: sum('snapshotConflicts'),
      durationMs: performance.now() - started,
    };
  } finally {
    await kv.close();
    await snapshots.close();
  }
}

export async function lostUpdates(backend: Backend, report: BackendReport, budget: Budget['lostUpdates']): Promise<void> {
  const check = 'lost updates';
  const f = await measureLostUpdates(backend, budget);
  const who = backend.crossProcess ? `${budget.writers} OS processes` : `${budget.writers} async writers (one process)`;
  report.expect(check, `kv compareAndSet increments acknowledged (${who} × ${budget.increments})`, f.kvDone, `= ${f.target}`, f.kvDone === f.target);
  report.expect(check, 'kv final value − acknowledged (lost < 0, doubled > 0)', f.kvFinal - f.kvDone, '= 0', f.kvFinal === f.kvDone);
  // Versions grow with every write and are never reused (a sequence, a hybrid clock), but they
  // are not "+1 per write": at least one step per acknowledged write.
  report.expect(check, 'kv version advanced by', f.kvVersionDelta, '≥ acknowledged', f.kvVersionDelta >= f.kvDone);
  report.info(check, 'kv E_VERSION_CONFLICT retries', f.kvConflicts);
  report.expect(check, 'snapshot save(expectedVersion) increments acknowledged', f.snapshotDone, `= ${f.target}`, f.snapshotDone === f.target);
  report.expect(check, 'snapshot final count − acknowledged', f.snapshotFinal - f.snapshotDone, '= 0', f.snapshotFinal === f.snapshotDone);
  report.expect(check, 'snapshot version advanced by', f.snapshotVersionDelta, '≥ acknowledged', f.snapshotVersionDelta >= f.snapshotDone);
  report.info(check, 'snapshot E_VERSION_CONFLICT retries', f.snapshotConflicts);
  report.info(check, 'duration', formatMs(f.durationMs));
}

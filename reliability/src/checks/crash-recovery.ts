/**
 * Crash recovery.
 *
 * Lock: a process takes a lock and is killed with SIGKILL (no release, no cleanup). Proves: the
 * next acquirer, waiting, gets the lock within TTL + 1 s of the kill, not before the dead
 * holder's lease ran out, and with a higher fence.
 *
 * Snapshot: a process saves ~1 MB snapshots in a loop and is killed with SIGKILL at a random
 * moment, usually in the middle of a save. Proves: what is stored afterwards is exactly the
 * last acknowledged snapshot or the one being saved — never a mix, never garbage, never nothing.
 *
 * Exactly once: a process charges keys — each key's effect (a kv entry under a fresh id, so a
 * second application shows as a second entry) and its completion in one transaction, with a
 * pause between them — and is SIGKILLed again and again, then restarted until every key is
 * charged. Two ways: `idempotency.runOnce`, and the caller's own transaction (a `pg` client, a
 * MongoDB session) with reserve, effect and complete through the stores' `withTransaction`
 * views. Proves: every effect applied exactly once (0 twice, 0 lost) and every key completed,
 * on every backend where that way can run.
 */
import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import { isStowageError, StowageError, type JsonObject } from '@stowage/core';
import type { Budget } from '../config.ts';
import type { BackendReport } from '../report.ts';
import type { Backend } from '../backends/types.ts';
import { formatMs, randomInt, sleep } from '../util.ts';
import { startWorker, type Role } from '../workers.ts';

const GRACE_MS = 1000;

export interface HolderParams {
  key: string;
  ttl: number;
}

export type HolderEvent = { acquired: { fence: number; expiresAt: number } };

/** Takes the lock, says so, then waits to be killed (bounded: it leaves by itself after a minute). */
export const lockHolder: Role<HolderParams, void> = async (backend, params, context) => {
  const locks = await backend.locks();
  const handle = await locks.acquire(params.key, params.ttl, { wait: params.ttl * 3, pollInterval: 20 });
  if (handle === null) throw new Error(`could not take ${params.key}`);
  context.emit({ acquired: { fence: handle.fence, expiresAt: handle.expiresAt.getTime() } } satisfies HolderEvent);
  await sleep(60_000);
  await locks.close();
};

export interface WriterParams {
  id: string;
  firstVersion: number;
  kilobytes: number;
}

export type WriterEvent = { saving: number } | { saved: number };

/** A deterministic snapshot of about `kilobytes` KB for version `version`; any mix of two versions differs from both. */
export function versionedSnapshot(version: number, kilobytes: number): JsonObject {
  const steps: JsonObject = {};
  const perStep = 1024;
  for (let i = 0; i < kilobytes; i++) {
    steps[`step-${i}`] = { ok: true, value: { version, i, text: `${version}:${i}:`.padEnd(perStep, String.fromCharCode(97 + ((version + i) % 26))) } };
  }
  return { formatVersion: 1, version, steps, execution: { status: 'running', lastUpdated: new Date(version * 1000).toISOString() } };
}

/** Saves versions firstVersion, firstVersion+1, … until killed (bounded: 10,000 saves or a minute). */
export const snapshotWriter: Role<WriterParams, void> = async (backend, params, context) => {
  const snapshots = await backend.snapshots();
  const deadline = Date.now() + 60_000;
  for (let version = params.firstVersion; version < params.firstVersion + 10_000 && Date.now() < deadline; version++) {
    const snapshot = versionedSnapshot(version, params.kilobytes);
    context.emit({ saving: version } satisfies WriterEvent);
    await snapshots.save(params.id, snapshot);
    context.emit({ saved: version } satisfies WriterEvent);
  }
  await snapshots.close();
};

/**
 * How a key is charged exactly once: `runOnce` (the store begins the transaction), or the
 * caller's own transaction on its own pool/client with the stores' `withTransaction` views
 * (reserve, effect, complete). Either way the effect and the record commit together.
 */
export type ChargeWay = 'runOnce' | 'caller';

export interface ChargeParams {
  way: ChargeWay;
  keys: number;
  /** Where the effects and records go: a prefix of the run's keys. */
  prefix: string;
}

export type ChargeEvent = { charged: number };

/** Opens what a charging process uses, and charges one key (the effect under a fresh id, so a second application shows). */
async function openCharger(backend: Backend, params: Omit<ChargeParams, 'keys'>) {
  const shared = params.way === 'caller' ? await backend.sharedConnection() : null;
  if (params.way === 'caller' && shared === null) throw new StowageError('E_INVALID_OPTION', 'this backend has no connection of the caller’s own');
  const open = shared ? { shared } : {};
  const [kv, idempotency] = await Promise.all([backend.kv(open), backend.idempotency(open)]);
  // Both stores' tables made before a transaction holds a connection (PGlite has one).
  await Promise.all([kv.get(`${params.prefix}warm`), idempotency.get(`${params.prefix}warm`)]);
  const effect = async (transaction: object, key: number) => {
    await kv.withTransaction!(transaction).set(`${params.prefix}effect/${key}/${randomUUID()}`, 'charged');
    await sleep(5); // between the effect and the completion, where a kill is meant to land
  };
  const charge = async (key: number): Promise<void> => {
    const name = `${params.prefix}charge/${key}`;
    if (params.way === 'runOnce') {
      await idempotency.runOnce!(name, async (transaction) => {
        await effect(transaction, key);
        return { key };
      });
      return;
    }
    await shared!.transaction(async (transaction) => {
      const records = idempotency.withTransaction!(transaction);
      const claim = await records.reserve(name, 60_000);
      if (claim.status === 'completed') return;
      if (claim.status !== 'acquired') throw new Error(`${name}: a claim in flight inside a transaction of the only writer`);
      await effect(transaction, key);
      await records.complete(name, claim.token, { key });
    });
  };
  return {
    charge,
    close: async () => {
      await Promise.all([kv.close(), idempotency.close()]);
      await shared?.close();
    },
  };
}

/** Charges keys 0 … keys−1 in turn (a key already charged is answered from its record), saying so after each. */
export const charger: Role<ChargeParams, void> = async (backend, params, context) => {
  const opened = await openCharger(backend, params);
  for (let key = 0; key < params.keys; key++) {
    await opened.charge(key);
    context.emit({ charged: key } satisfies ChargeEvent);
  }
  await opened.close();
};

export async function crashRecovery(backend: Backend, report: BackendReport, budget: Budget['crash']): Promise<void> {
  await lockTakeover(backend, report, budget);
  if (backend.crossProcess) {
    await tornSnapshots(backend, report, budget);
    for (const way of ['runOnce', 'caller'] as const) await exactlyOnce(backend, report, budget, way);
  } else {
    report.notApplicable('crash recovery', 'writers killed mid-save: memory lives in one process, there is nothing to kill');
  }
}

async function lockTakeover(backend: Backend, report: BackendReport, budget: Budget['crash']): Promise<void> {
  const check = 'crash recovery';
  const locks = await backend.locks();
  const waits: number[] = [];
  let early = 0;
  let fenceNotHigher = 0;
  let missed = 0;
  try {
    for (let round = 0; round < budget.lockKills; round++) {
      const key = `crash-${round}`;
      let dead: { fence: number; expiresAt: number };
      let killedAt: number;
      if (backend.crossProcess) {
        const acquired = Promise.withResolvers<HolderEvent['acquired']>();
        const worker = startWorker<void>(backend.target, 'lock-holder', { key, ttl: budget.lockTtl } satisfies HolderParams, {
          hardLimitMs: budget.timeLimitMs,
          onEvent: (event) => acquired.resolve((event as HolderEvent).acquired),
        });
        worker.result.catch((error: unknown) => acquired.reject(error));
        dead = await acquired.promise;
        worker.kill('SIGKILL');
        killedAt = performance.now();
        await worker.exited;
      } else {
        // One process: the holder simply stops without releasing (its handle is dropped).
        const abandoned = await locks.acquire(key, budget.lockTtl);
        if (abandoned === null) throw new Error(`could not take ${key}`);
        dead = { fence: abandoned.fence, expiresAt: abandoned.expiresAt.getTime() };
        killedAt = performance.now();
      }
      const handle = await locks.acquire(key, budget.lockTtl, { wait: budget.lockTtl + GRACE_MS * 3, pollInterval: 20 });
      const waited = performance.now() - killedAt;
      if (handle === null) {
        missed += 1;
        continue;
      }
      waits.push(waited);
      if (handle.expiresAt.getTime() - budget.lockTtl < dead.expiresAt) early += 1;
      if (handle.fence <= dead.fence) fenceNotHigher += 1;
      await handle.release();
    }
  } finally {
    await locks.close();
  }
  const how = backend.crossProcess ? 'holder SIGKILLed' : 'holder abandoned its lease (one process)';
  const slowest = Math.max(0, ...waits);
  report.expect(
    check,
    `${how} ×${budget.lockKills}: slowest takeover after the kill`,
    formatMs(slowest),
    `≤ TTL + 1 s = ${formatMs(budget.lockTtl + GRACE_MS)}`,
    missed === 0 && slowest <= budget.lockTtl + GRACE_MS,
  );
  report.expect(check, 'takeovers before the dead lease expired', early, '= 0', early === 0);
  report.expect(check, 'takeovers without a higher fence', fenceNotHigher, '= 0', fenceNotHigher === 0);
}

async function tornSnapshots(backend: Backend, report: BackendReport, budget: Budget['crash']): Promise<void> {
  const check = 'crash recovery';
  const id = 'crash-snapshot';
  const snapshots = await backend.snapshots();
  let lastSaved = 0;
  let torn = 0;
  let keptOld = 0;
  let tookNew = 0;
  const details: string[] = [];
  try {
    for (let round = 0; round < budget.snapshotKills; round++) {
      const firstVersion = lastSaved + 1;
      // Kill a random few milliseconds into the save of one of the next few versions.
      const killDuring = firstVersion + randomInt(1, 4);
      let saving = 0;
      const worker = startWorker<void>(
        backend.target,
        'snapshot-writer',
        { id, firstVersion, kilobytes: budget.snapshotKb } satisfies WriterParams,
        {
          hardLimitMs: budget.timeLimitMs,
          onEvent: (event) => {
            const e = event as WriterEvent;
            if ('saved' in e) {
              lastSaved = e.saved;
            } else {
              saving = e.saving;
              if (saving === killDuring) setTimeout(() => worker.kill('SIGKILL'), randomInt(0, 8));
            }
          },
        },
      );
      const failure = await worker.result.then(() => 'it finished instead of being killed', (error: unknown) => String(error));
      await worker.closed;
      if (worker.child.signalCode !== 'SIGKILL') throw new Error(`snapshot writer was not killed: ${failure}`);

      const stored = await snapshots.load(id);
      const candidates = [...new Set([lastSaved, saving])].filter((version) => version > 0);
      const match = candidates.find((version) => stored !== null && isDeepStrictEqual(stored, versionedSnapshot(version, budget.snapshotKb)));
      if (match === undefined) {
        torn += 1;
        details.push(`round ${round}: stored ${describeSnapshot(stored)}, expected version ${candidates.join(' or ')}`);
      } else if (match === lastSaved) {
        keptOld += 1;
      } else {
        tookNew += 1;
        lastSaved = match;
      }
    }
  } finally {
    await snapshots.close();
  }
  report.expect(
    check,
    `snapshot writer SIGKILLed mid-save ×${budget.snapshotKills} (${budget.snapshotKb} KB each): torn or missing`,
    torn,
    '= 0',
    torn === 0,
  );
  report.info(check, 'after the kill: last acknowledged kept / in-flight save landed', `${keptOld} / ${tookNew}`);
  for (const line of details) report.note(`crash recovery: ${line}`);
}

function describeSnapshot(snapshot: JsonObject | null): string {
  if (snapshot === null) return 'nothing';
  return `version field ${JSON.stringify(snapshot.version)} with ${Object.keys((snapshot.steps as JsonObject | undefined) ?? {}).length} steps`;
}

/** Why keys cannot be charged this way on this backend (it cannot run the transaction), or null. */
async function chargeRefused(backend: Backend, way: ChargeWay): Promise<string | null> {
  let opened: Awaited<ReturnType<typeof openCharger>> | undefined;
  try {
    opened = await openCharger(backend, { way, prefix: `exactly-once/probe-${way}/` });
    await opened.charge(0);
    return null;
  } catch (error) {
    if (isStowageError(error, 'E_INVALID_OPTION')) return error.message;
    throw error;
  } finally {
    await opened?.close();
  }
}

/** How the rows name each way (the caller's way: reserve, effect and complete through `withTransaction` views). */
const WAYS: Record<ChargeWay, string> = { runOnce: 'runOnce writer', caller: 'own-transaction writer' };

async function exactlyOnce(backend: Backend, report: BackendReport, budget: Budget['crash'], way: ChargeWay): Promise<void> {
  const check = 'crash recovery';
  const refused = await chargeRefused(backend, way);
  if (refused !== null) {
    report.notApplicable(check, `${WAYS[way]} SIGKILLed: ${refused}`);
    return;
  }
  const params: ChargeParams = { way, keys: budget.runOnceKeys, prefix: `exactly-once/${way}/` };
  let kills = 0;
  let charged = -1;
  for (let run = 0; ; run++) {
    // Every run charges at least the key it was killed in (the kill waits for progress).
    if (run > budget.runOnceKills + 10) throw new Error(`${WAYS[way]}: ${run} runs and still not every key charged`);
    // Kill a random few keys into the run, a random few ms into a key, until the kills are done.
    const killAt = kills < budget.runOnceKills ? charged + randomInt(3, 22) : Infinity;
    const worker = startWorker<void>(backend.target, 'charger', params, {
      hardLimitMs: budget.timeLimitMs,
      onEvent: (event) => {
        charged = Math.max(charged, (event as ChargeEvent).charged);
        if (charged === killAt) setTimeout(() => worker.kill('SIGKILL'), randomInt(0, 6));
      },
    });
    const failure = await worker.result.then(() => null, (error: unknown) => String(error));
    await worker.closed;
    if (failure === null) break;
    if (worker.child.signalCode !== 'SIGKILL') throw new Error(`${WAYS[way]} failed: ${failure}`);
    kills += 1;
  }

  const [kv, idempotency] = await Promise.all([backend.kv(), backend.idempotency()]);
  try {
    const applied = new Map<string, number>();
    const effects = `${params.prefix}effect/`;
    for (const key of await kv.keys(`${effects}*`)) {
      const charge = key.slice(effects.length).split('/')[0]!;
      applied.set(charge, (applied.get(charge) ?? 0) + 1);
    }
    let twice = 0;
    let lost = 0;
    let notCompleted = 0;
    for (let key = 0; key < params.keys; key++) {
      const count = applied.get(String(key)) ?? 0;
      if (count > 1) twice += 1;
      if (count === 0) lost += 1;
      if ((await idempotency.get(`${params.prefix}charge/${key}`)) === null) notCompleted += 1;
    }
    report.expect(check, `${WAYS[way]} SIGKILLed ×${kills} (${params.keys} keys): effects twice / lost`, `${twice} / ${lost}`, '= 0 / 0', twice === 0 && lost === 0 && kills >= budget.runOnceKills);
    report.expect(check, '… keys not completed', notCompleted, '= 0', notCompleted === 0);
  } finally {
    await Promise.all([kv.close(), idempotency.close()]);
  }
}

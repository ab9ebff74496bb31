/**
 * The battery proves itself before it judges anyone: each detector is run against a
 * deliberately broken in-memory implementation, and must catch it. A detector that reports 0
 * against a broken lock would make every "0" in the tables meaningless.
 *
 * - a lock that grants a key that is already held → lock safety must see overlaps;
 * - a lock whose fence starts over after a release → the guard must reject current holders or
 *   see fences out of grant order;
 * - a compare-and-set that ignores the version → lost updates must see lost increments;
 * - the TCP proxy, cut, must make a connection through it fail, and pass again once restored;
 * - versions that start over after a delete → versions must see stale writes accepted;
 * - prefixes glued to the key → namespaces must see entries cross between prefixes;
 * - a close() that abandons calls, and one that drops acknowledged writes → shutdown must see
 *   calls left pending and writes lost;
 * - a lock that ignores the abort signal → shutdown must see leases left behind and withLock
 *   bodies started after the abort.
 *
 * The detectors that need a server (notifications leaked through PgBouncer, deadlocks of
 * caller-order batches, connections counted in pg_stat_activity) prove themselves on that
 * server, in the backend's own table ("detector: …" rows).
 */
import net from 'node:net';
import type { KeyValueSetOptions, KeyValueStore } from '@stowage/core';
import { LockProviderBase, localHandle, type LeaseDriver } from '@stowage/core/adapter';
import {
  MEMORY_CAPABILITIES,
  MemoryCacheProvider,
  MemoryKeyValueStore,
  MemoryLockProvider,
  MemorySnapshotStore,
  createMemoryStorage,
} from '@stowage/core/memory';
import type { JsonObject } from '@stowage/core';
import type { Budget } from '../config.ts';
import { TcpProxy } from '../proxy.ts';
import type { BackendReport } from '../report.ts';
import type { Backend } from '../backends/types.ts';
import { memoryBackend } from '../backends/memory.ts';
import { measureLockSafety } from './lock-safety.ts';
import { measureLostUpdates } from './lost-updates.ts';
import {
  AbandoningKv,
  AbortIgnoringLocks,
  GluedPrefixCache,
  GluedPrefixSnapshots,
  RestartingVersionsKv,
  RestartingVersionsSnapshots,
  WriteBehindKv,
} from './flawed.ts';
import { measureNamespaces } from './namespaces.ts';
import { measureAbortRace, measureClose, type ShutdownKv, type ShutdownStores } from './shutdown.ts';
import { measureVersions } from './versions.ts';

type LockFlaw = 'grants-held-keys' | 'fence-restarts';

/** A lease table with one deliberate flaw; the rest of the lock (waiting, handles, withLock) is the kit's. */
function flawedLeases(flaw: LockFlaw): LeaseDriver {
  const leases = new Map<string, { owner: string; fence: number; expiresAt: number }>();
  const fences = new Map<string, number>();
  const live = (key: string) => {
    const lease = leases.get(key);
    return lease && lease.expiresAt > Date.now() ? lease : undefined;
  };
  return {
    acquire: async (key, owner, ttl) => {
      const held = live(key);
      if (held && held.owner !== owner && flaw !== 'grants-held-keys') return null;
      const fence = (fences.get(key) ?? 0) + 1;
      fences.set(key, fence);
      const expiresAt = Date.now() + ttl;
      leases.set(key, { owner, fence, expiresAt });
      return { key, owner, fence, expiresAt: new Date(expiresAt) };
    },
    extend: async (key, owner, ttl) => {
      const lease = live(key);
      if (lease?.owner !== owner) return null;
      lease.expiresAt = Date.now() + ttl;
      return new Date(lease.expiresAt);
    },
    release: async (key, owner) => {
      if (live(key)?.owner !== owner) return false;
      leases.delete(key);
      if (flaw === 'fence-restarts') fences.delete(key);
      return true;
    },
    forceRelease: async (key) => void leases.delete(key),
    isHeld: async (key, owner) => live(key)?.owner === owner,
    clearExpired: async () => 0,
  };
}

class FlawedLockProvider extends LockProviderBase {
  constructor(flaw: LockFlaw, leases: LeaseDriver) {
    super(`FlawedLockProvider(${flaw})`, localHandle(MEMORY_CAPABILITIES), leases);
  }
}

/** Each worker opens (and closes) a provider of its own over one shared flawed lease table, as it would over one database. */
function flawedLocks(flaw: LockFlaw): () => Promise<FlawedLockProvider> {
  const leases = flawedLeases(flaw);
  return async () => new FlawedLockProvider(flaw, leases);
}

/** compareAndSet that writes whatever the version: the read-modify-write race it exists to prevent. */
function blindCompareAndSet(store: MemoryKeyValueStore): KeyValueStore {
  return new Proxy(store, {
    get(target, property, receiver) {
      if (property === 'compareAndSet') {
        return async (key: string, value: string, _expected: number | null, options?: KeyValueSetOptions) => {
          await target.set(key, value, options);
          return (await target.getEntry(key))!.version;
        };
      }
      const member = Reflect.get(target, property, receiver) as unknown;
      return typeof member === 'function' ? member.bind(target) : member;
    },
  });
}

function flawedBackend(patch: Partial<Backend>): Backend {
  const base = memoryBackend({ name: 'memory', label: 'self-check', url: null, namespace: 'self-check' });
  return { ...base, ...patch };
}

export async function selfCheck(report: BackendReport, budget: Budget): Promise<void> {
  const check = 'self-check';
  const lockBudget: Budget['lock'] = {
    ...budget.lock,
    acquisitionsPerProcess: Math.min(budget.lock.acquisitionsPerProcess, 200),
    pauseProbability: 0.01,
    timeLimitMs: 60_000,
  };

  const overlapping = await measureLockSafety(flawedBackend({ locks: flawedLocks('grants-held-keys') }), lockBudget);
  report.expect(check, 'lock that grants held keys → overlaps detected', overlapping.overlaps, '> 0', overlapping.overlaps > 0);

  const regressing = await measureLockSafety(flawedBackend({ locks: flawedLocks('fence-restarts') }), lockBudget);
  const caught = regressing.validRejected + regressing.fenceOrderViolations + regressing.staleAccepted;
  report.expect(check, 'lock whose fence restarts after release → detected', caught, '> 0', caught > 0);

  const storage = createMemoryStorage();
  const blind = await measureLostUpdates(
    flawedBackend({ kv: async () => blindCompareAndSet(new MemoryKeyValueStore({ storage })) }),
    { writers: budget.lostUpdates.writers, increments: Math.min(budget.lostUpdates.increments, 100), timeLimitMs: 30_000 },
  );
  report.expect(check, 'compareAndSet that ignores the version → lost increments', blind.kvDone - blind.kvFinal, '> 0', blind.kvDone > blind.kvFinal);

  const proxy = await proxyWorks();
  report.expect(check, 'TCP proxy: cut fails a connection, restore lets it through', proxy, 'yes', proxy === 'yes');

  await newerDetectors(report, budget);
}

/** The detectors of the versions, namespaces and shutdown checks, each against the flaw it exists to catch. */
async function newerDetectors(report: BackendReport, budget: Budget): Promise<void> {
  const check = 'self-check';
  const restarting = new RestartingVersionsKv();
  const restartingSnapshots = new RestartingVersionsSnapshots();
  const aba = await measureVersions({ kv: async () => restarting, snapshots: async () => restartingSnapshots }, { ...budget.versions, rounds: 20 });
  report.expect(check, 'versions that restart after delete → stale kv writes accepted', aba.kvDelete.staleAccepted, '> 0', aba.kvDelete.staleAccepted > 0);
  report.expect(check, '… → stale kv writes accepted after expiry', aba.kvExpiry.staleAccepted, '> 0', aba.kvExpiry.staleAccepted > 0);
  report.expect(check, '… → stale snapshot saves accepted', aba.snapshotDelete.staleAccepted, '> 0', aba.snapshotDelete.staleAccepted > 0);

  const storage = createMemoryStorage();
  const glued = await measureNamespaces({
    cache: async (prefix) => new GluedPrefixCache(new MemoryCacheProvider({ storage, prefix: '' }), prefix),
    snapshots: async (prefix) => new GluedPrefixSnapshots(new MemorySnapshotStore<JsonObject>({ storage }), prefix),
  });
  const cacheCrossings = glued.cache.seen + glued.cache.listed + glued.cache.cleared + glued.cache.overwritten;
  const snapshotCrossings = glued.snapshots.seen + glued.snapshots.listed + glued.snapshots.cleared + glued.snapshots.overwritten;
  report.expect(check, 'cache prefix glued to the key → entries crossing prefixes', cacheCrossings, '> 0', cacheCrossings > 0);
  report.expect(check, 'snapshot prefix glued to the id → entries crossing prefixes', snapshotCrossings, '> 0', snapshotCrossings > 0);

  const closing = (kv: (storage: ReturnType<typeof createMemoryStorage>) => ShutdownKv): ShutdownStores => {
    const shared = createMemoryStorage();
    return {
      kv: async () => kv(shared),
      snapshots: async () => new MemorySnapshotStore<JsonObject>({ storage: shared }),
      cache: async () => new MemoryCacheProvider({ storage: shared }),
      locks: async () => new MemoryLockProvider({ storage: shared }),
    };
  };
  // A short liveness bound: the abandoned calls never settle, and waiting 30 s for that proves nothing more.
  const abandoned = await measureClose(closing((shared) => new AbandoningKv(new MemoryKeyValueStore({ storage: shared }))), budget.shutdown.inFlight, 1000);
  report.expect(check, 'close() that abandons calls → calls left pending', abandoned.pending, '> 0', abandoned.pending > 0);
  const writeBehind = await measureClose(closing((shared) => new WriteBehindKv(new MemoryKeyValueStore({ storage: shared }))), budget.shutdown.inFlight);
  report.expect(check, 'close() that drops buffered writes → acknowledged writes lost', writeBehind.lost.length, '> 0', writeBehind.lost.length > 0);

  const ignoringLeases = createMemoryStorage();
  const ignoring = await measureAbortRace({ locks: async () => new AbortIgnoringLocks(new MemoryLockProvider({ storage: ignoringLeases }), 'throws') }, 40);
  report.expect(check, 'lock that ignores abort, then reports it → leases left behind', ignoring.leftBehind, '> 0', ignoring.leftBehind > 0);
  const grantingLeases = createMemoryStorage();
  const granting = await measureAbortRace({ locks: async () => new AbortIgnoringLocks(new MemoryLockProvider({ storage: grantingLeases }), 'grants') }, 40);
  report.expect(check, 'lock that ignores abort, hands the lease out → leases left behind', granting.grantedAfterAbort, '> 0', granting.grantedAfterAbort > 0);
  report.expect(check, '… → withLock bodies started after abort', ignoring.bodiesAfterAbort, '> 0', ignoring.bodiesAfterAbort > 0);
}

/** An echo server behind the proxy: open → echo works; reset cut → connection fails; restored → works again. */
async function proxyWorks(): Promise<string> {
  const echo = net.createServer((socket) => socket.pipe(socket));
  await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
  const proxy = await TcpProxy.start({ host: '127.0.0.1', port: (echo.address() as net.AddressInfo).port });
  const roundTrip = () =>
    new Promise<boolean>((resolve) => {
      const socket = net.connect(proxy.port, '127.0.0.1');
      const timer = setTimeout(() => done(false), 1000);
      const done = (ok: boolean) => {
        clearTimeout(timer);
        socket.destroy();
        resolve(ok);
      };
      socket.on('data', (data) => done(data.toString() === 'ping'));
      socket.on('error', () => done(false));
      socket.on('connect', () => socket.write('ping'));
    });
  try {
    const before = await roundTrip();
    proxy.cut('reset');
    const during = await roundTrip();
    proxy.cut('blackhole');
    const blackholed = await roundTrip();
    proxy.restore();
    const after = await roundTrip();
    return before && !during && !blackholed && after ? 'yes' : `no (before ${before}, reset ${during}, blackhole ${blackholed}, after ${after})`;
  } finally {
    await proxy.close();
    await new Promise<void>((resolve) => echo.close(() => resolve()));
  }
}

/**
 * The battery proves itself before it judges anyone: each detector is run against a
 * deliberately broken in-memory implementation, and must catch it. A detector that reports 0
 * against a broken lock would make every "0" in the tables meaningless.
 *
 * - a lock that grants a key that is already held → lock safety must see overlaps;
 * - a lock whose fence starts over after a release → the guard must reject current holders or
 *   see fences out of grant order;
 * - a compare-and-set that ignores the version → lost updates must see lost increments;
 * - the TCP proxy, cut, must make a connection through it fail, and pass again once restored.
 */
import net from 'node:net';
import {
  acquireWithWait,
  parseAcquireArgs,
  runWithLock,
  StowageLockHandle,
  type AcquireOptions,
  type KeyValueSetOptions,
  type KeyValueStore,
  type Lease,
  type LeaseOperations,
  type LockHandle,
  type LockProvider,
  type WithLockOptions,
} from '@stowage/core';
import { MEMORY_CAPABILITIES, MemoryKeyValueStore, createMemoryStorage } from '@stowage/core/memory';
import type { Budget } from '../config.ts';
import { TcpProxy } from '../proxy.ts';
import type { BackendReport } from '../report.ts';
import type { Backend } from '../backends/types.ts';
import { memoryBackend } from '../backends/memory.ts';
import { measureLockSafety } from './lock-safety.ts';
import { measureLostUpdates } from './lost-updates.ts';

type LockFlaw = 'grants-held-keys' | 'fence-restarts';

/** A lease table with one deliberate flaw; otherwise a plain in-memory lock. */
class FlawedLockProvider implements LockProvider {
  readonly capabilities = MEMORY_CAPABILITIES;
  readonly #leases = new Map<string, { owner: string; fence: number; expiresAt: number }>();
  readonly #fences = new Map<string, number>();
  readonly #operations: LeaseOperations = {
    extendLease: async (key, ttl, owner) => {
      const lease = this.#live(key);
      if (lease?.owner !== owner) return null;
      lease.expiresAt = Date.now() + ttl;
      return new Date(lease.expiresAt);
    },
    release: async (key, owner) => {
      if (this.#live(key)?.owner !== owner) return false;
      this.#leases.delete(key);
      if (this.flaw === 'fence-restarts') this.#fences.delete(key);
      return true;
    },
    isHeld: async (key, owner) => this.#live(key)?.owner === owner,
  };

  private readonly flaw: LockFlaw;

  constructor(flaw: LockFlaw) {
    this.flaw = flaw;
  }

  #live(key: string) {
    const lease = this.#leases.get(key);
    return lease && lease.expiresAt > Date.now() ? lease : undefined;
  }

  async acquire(key: string, ttl: number, ownerOrOptions?: string | AcquireOptions): Promise<LockHandle | null> {
    const options = parseAcquireArgs(key, ttl, ownerOrOptions);
    const lease = await acquireWithWait(async (): Promise<Lease | null> => {
      const held = this.#live(key);
      if (held && held.owner !== options.owner && this.flaw !== 'grants-held-keys') return null;
      const fence = (this.#fences.get(key) ?? 0) + 1;
      this.#fences.set(key, fence);
      const expiresAt = Date.now() + ttl;
      this.#leases.set(key, { owner: options.owner, fence, expiresAt });
      return { key, owner: options.owner, fence, expiresAt: new Date(expiresAt) };
    }, options);
    return lease === null ? null : new StowageLockHandle(lease, this.#operations);
  }

  async extend(key: string, ttl: number, owner: string): Promise<boolean> {
    return (await this.#operations.extendLease(key, ttl, owner)) !== null;
  }

  release(key: string, owner: string): Promise<boolean> {
    return this.#operations.release(key, owner);
  }

  async forceRelease(key: string): Promise<void> {
    this.#leases.delete(key);
  }

  withLock<T>(key: string, fn: (signal: AbortSignal, handle: LockHandle) => Promise<T>, options: WithLockOptions): Promise<T> {
    return runWithLock((k, ttl, acquireOptions) => this.acquire(k, ttl, acquireOptions), key, fn, options);
  }

  async close(): Promise<void> {}
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

  const granting = new FlawedLockProvider('grants-held-keys');
  const overlapping = await measureLockSafety(flawedBackend({ locks: async () => granting }), lockBudget);
  report.expect(check, 'lock that grants held keys → overlaps detected', overlapping.overlaps, '> 0', overlapping.overlaps > 0);

  const restarting = new FlawedLockProvider('fence-restarts');
  const regressing = await measureLockSafety(flawedBackend({ locks: async () => restarting }), lockBudget);
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

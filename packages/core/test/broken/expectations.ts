import type { ContractName } from '../../src/conformance/types.js';
import type { BrokenVariantName } from './broken-adapters.js';

/** Which part of the suite runs against each broken variant, and cases that must fail there. */
export const EXPECTED_FAILURES: Record<BrokenVariantName, { contracts: ContractName[]; cases: string[] }> = {
  'lock-ignores-expiry': {
    contracts: ['LockProvider'],
    cases: [
      'expiry: a lease ends on the store clock; extend, isValid and release then fail quietly',
      'waiting acquire gets the lock once the holder lease expires',
      'fence strictly increases across release, expiry, forceRelease and new provider instances',
    ],
  },
  'glob-unescaped-underscore': {
    contracts: ['KeyValueStore'],
    cases: [
      'glob: _ % . and regex metacharacters are literal; * and ? are wildcards; \\ escapes',
      'glob: literal text with % and _ does not match other keys (prefix scans escape LIKE)',
    ],
  },
  'fence-resets-on-release': {
    contracts: ['LockProvider'],
    cases: [
      'fence strictly increases across release, expiry, forceRelease and new provider instances',
      'fence: concurrent winners over time get distinct increasing fences',
    ],
  },
  'close-not-idempotent': {
    contracts: ['KeyValueStore'],
    cases: ['close is idempotent and every method then rejects with E_CLOSED'],
  },
  'ttl-on-client-clock': {
    contracts: ['KeyValueStore', 'LockProvider', 'CacheProvider', 'IdempotencyStore', 'CircuitBreakerStore', 'SnapshotStore'],
    cases: [
      'KeyValueStore › skewed client clock: expiry follows the store clock, not Date',
      'LockProvider › skewed client clock: leases follow the store clock, not Date',
      'CacheProvider › skewed client clock: expiry follows the store clock, not Date',
      'IdempotencyStore › skewed client clock: claims and results expire on the store clock',
      'CircuitBreakerStore › skewed client clock: times and cooldowns come from the store clock',
      'SnapshotStore › skewed client clock: list order and lease expiry follow the store clock',
    ],
  },
  'cas-ignores-version': {
    contracts: ['KeyValueStore'],
    cases: [
      'compareAndSet: null creates only when absent; a version writes only when current',
      'compareAndSet: 8 concurrent increment loops on one key lose no update',
      'compareAndSet: of many concurrent creates exactly one wins',
    ],
  },
  'cache-clear-ignores-prefix': {
    contracts: ['CacheProvider'],
    cases: ['clear removes only this prefix, even when prefixes contain _ % * or .'],
  },
  'circuit-read-modify-write': {
    contracts: ['CircuitBreakerStore'],
    cases: ['20 concurrent recordFailure calls lose no increment and exactly one sees the transition'],
  },
  'idempotency-reserve-ignores-claims': {
    contracts: ['IdempotencyStore'],
    cases: [
      'reserve: the first caller acquires; while in flight others see in-flight and get reads null',
      'reserve: of 20 concurrent callers exactly one acquires; after complete all see the result',
    ],
  },
  'checkpoint-duplicates-ignored': {
    contracts: ['CheckpointStore'],
    cases: [
      'a duplicate (taskId, sequence) is E_VERSION_CONFLICT and keeps the original',
      'a duplicate id is E_VERSION_CONFLICT and keeps the original',
      'of concurrent saves of one sequence exactly one wins',
    ],
  },
  'process-transition-ignores-version': {
    contracts: ['ProcessBackend'],
    cases: ['a stale version never applies, also once the item is back in the state it was read in'],
  },
  'versions-restart-after-delete': {
    contracts: ['KeyValueStore'],
    cases: [
      'versions grow with every write and are never reused for a key, also after delete or expiry',
      'compareAndSet holds only against the incarnation it read: a version from before a delete or expiry never matches again',
    ],
  },
  'cache-prefix-concatenated': {
    contracts: ['CacheProvider'],
    cases: ['a prefix is a namespace: a cache never sees, lists, clears or overwrites the entries of a prefix that extends it'],
  },
  'snapshot-prefix-concatenated': {
    contracts: ['SnapshotStore'],
    cases: ["a prefix is a namespace: a store never loads, lists, deletes or overwrites another prefix's snapshots"],
  },
  'snapshot-strict-json': {
    contracts: ['SnapshotStore'],
    cases: [
      "a ResumeState with the step results everyday code returns (void, an undefined member, a Date, NaN) is saved as awaitly's JSON form keeps them",
      'what JSON cannot hold inside a snapshot is saved as JSON.stringify writes it (awaitly swallows a refused save): BigInt as its digits, a cycle as "[Circular]"',
    ],
  },
  'acquire-ignores-abort': {
    contracts: ['LockProvider'],
    cases: [
      'AbortSignal stops a waiting acquire with the signal reason',
      'abort is final: an acquisition aborted while an attempt was in flight leaves no lease behind',
    ],
  },
  'close-abandons-calls': {
    contracts: ['KeyValueStore'],
    cases: ['close() settles every call in flight before it resolves; nothing acknowledged is lost'],
  },
};

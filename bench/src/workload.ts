/** The data every implementation reads and writes: same sizes, same shapes, everywhere. */
import { markerKey } from './replay.ts';

/** A ~100-byte string for key-value writes. */
export const KV_VALUE = JSON.stringify({ user: 'u-1234', plan: 'pro', seats: 12, region: 'eu-west-1', flags: ['a', 'b'] }).padEnd(100, ' ');

/** A small JSON value for cache writes (~100 bytes as JSON). */
export const CACHE_VALUE = { id: 4711, name: 'Ada Lovelace', roles: ['admin', 'editor'], active: true, score: 98.5, tags: { team: 'core' } };

/**
 * What the `call`th write call writes: KV_VALUE ending in the call number, so that every write
 * of a key changes it, as real writes do. MongoDB and FerretDB skip an update that changes
 * nothing; with one value written over and over, a store that writes only the value (as
 * @keyv/mongo does) would be measured writing nothing at all.
 */
export function kvValue(call: number): string {
  const tag = String(call);
  return KV_VALUE.slice(0, KV_VALUE.length - tag.length) + tag;
}

/** The cache value of the `call`th set call (see {@link kvValue}). */
export function cacheValue(call: number): typeof CACHE_VALUE & { revision: number } {
  return { ...CACHE_VALUE, revision: call };
}

export const BATCH_SIZE = 100;

/** An awaitly WorkflowSnapshot of about 5 KB of JSON. */
export function makeSnapshot(targetBytes = 5 * 1024): Record<string, unknown> {
  const steps: Record<string, unknown> = {};
  const snapshot = {
    formatVersion: 1,
    workflowName: 'checkout',
    steps,
    execution: { status: 'running', lastUpdated: '2026-01-15T10:30:00.000Z', currentStepId: 'charge-card' },
    metadata: { workflowId: 'checkout-123', definitionHash: 'a1b2c3d4e5f6', input: { orderId: 'o-987', items: 3 } },
  };
  for (let i = 0; JSON.stringify(snapshot).length < targetBytes; i++) {
    steps[`step-${i}`] = {
      ok: true,
      value: { id: `item-${i}`, sku: `SKU-${1000 + i}`, qty: (i % 5) + 1, price: 19.99 + i, note: 'reserved in warehouse 7' },
    };
  }
  return snapshot;
}

export const SNAPSHOT = makeSnapshot();
export const SNAPSHOT_BYTES = JSON.stringify(SNAPSHOT).length;

/**
 * The keys one operation uses. With a `space`, iteration `i` reuses key `i % space` (reads
 * need keys that exist, seeded once); without, every phase gets fresh keys (deletes need a
 * key that exists and has not been deleted yet, seeded before each phase).
 */
export class KeySpace {
  #phase = 0;
  readonly #prefix: string;
  readonly space: number | null;

  constructor(prefix: string, space: number | null) {
    this.#prefix = prefix;
    this.space = space;
  }

  /** Starts a new phase (fresh keys when there is no fixed space). */
  nextPhase(): void {
    this.#phase++;
  }

  /** Key `j` of call `i`; `i < 0` gives the capture markers. */
  key(i: number, j = 0): string {
    if (i < 0) return markerKey(j);
    return this.space === null ? `${this.#prefix}:${this.#phase}:${i}:${j}` : `${this.#prefix}:${i % this.space}:${j}`;
  }

  keysOf(i: number, count: number): string[] {
    return Array.from({ length: count }, (_, j) => this.key(i, j));
  }
}

/** Random draws per phase: enough that 32 in flight never see a pattern, small enough to precompute. */
const RANDOM_DRAWS = 1 << 16;

/**
 * The keys of the anchor table, `"1"` … `"rows"`, drawn uniformly at random as `pgbench -S`
 * draws its keys (`random(1, rows)`): every implementation reads the same keys in the same
 * order, from a fixed seed, and every phase starts at another point of the sequence.
 */
export class AnchorKeys extends KeySpace {
  readonly rows: number;
  readonly #draws: Uint32Array;
  #offset = 0;

  constructor(rows: number) {
    super('anchor', rows);
    this.rows = rows;
    this.#draws = new Uint32Array(RANDOM_DRAWS);
    let state = 0x9e3779b9; // mulberry32
    for (let d = 0; d < RANDOM_DRAWS; d++) {
      state = (state + 0x6d2b79f5) | 0;
      let t = Math.imul(state ^ (state >>> 15), 1 | state);
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
      this.#draws[d] = 1 + ((((t ^ (t >>> 14)) >>> 0) / 4294967296) * rows) | 0;
    }
  }

  override nextPhase(): void {
    this.#offset = (this.#offset + 7919) % RANDOM_DRAWS;
  }

  override key(i: number, j = 0): string {
    if (i < 0) return markerKey(j);
    return String(this.#draws[(this.#offset + i + j * 104_729) % RANDOM_DRAWS]);
  }
}

/**
 * Heap growth over many operations: a mix of key-value, cache, snapshot and lock calls, 32 in
 * flight, on a fixed set of keys (so the database does not grow either). heapUsed is sampled
 * after forced garbage collection (node --expose-gc); a least-squares line through the
 * samples gives the trend. A leak of even one small object per call shows as tens of bytes
 * per operation; no trend is a slope near zero.
 */
import { config } from './config.ts';
import { timeConcurrent } from './measure.ts';
import type { StowageSet } from './ops.ts';
import { check } from './sections.ts';
import { formatBytes, formatInt, linearFit } from './stats.ts';
import type { SectionTable } from './types.ts';
import { CACHE_VALUE, KV_VALUE, SNAPSHOT } from './workload.ts';

/** Fitted growth over the whole run must stay under this. */
export const MEMORY_GROWTH_LIMIT_BYTES = 1024 * 1024;

export interface MemoryResult {
  backend: string;
  ops: number;
  samples: { ops: number; heapUsed: number }[];
  slopeBytesPerOp: number | null;
  fittedGrowthBytes: number | null;
  opsPerSec: number | null;
  pass: boolean | null;
  /** Why fewer than the configured operations ran. */
  note?: string;
  error?: string;
}

function collect(): number {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run node with --expose-gc (pnpm bench does)');
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

export async function runMemory(backend: string, set: StowageSet): Promise<MemoryResult> {
  const result: MemoryResult = { backend, ops: config.memoryOps, samples: [], slopeBytesPerOp: null, fittedGrowthBytes: null, opsPerSec: null, pass: null };
  const keys = 500;
  const mix = async (i: number): Promise<void> => {
    const key = `mem:${i % keys}`;
    switch (i % 6) {
      case 0:
        await set.kv.set(key, KV_VALUE);
        return;
      case 1:
        await set.kv.get(key);
        return;
      case 2:
        await set.cache.set(key, CACHE_VALUE);
        return;
      case 3:
        await set.cache.get(key);
        return;
      case 4:
        await set.snapshots.save(`mem:${i % 50}`, SNAPSHOT);
        return;
      default: {
        const handle = await set.locks.acquire(key, 30_000);
        await handle?.release();
      }
    }
  };
  try {
    // warm-up: connections, JIT, statement caches reach their steady size; it also tells how
    // many operations fit in the time budget on this server
    const warm = await timeConcurrent({ run: mix }, Math.min(2_000, config.memoryOps / 10), config.concurrency);
    const affordable = Math.floor((warm.opsPerSec * config.memoryMaxMs) / 1000);
    const total = Math.min(config.memoryOps, Math.max(affordable, 1_000));
    if (total < config.memoryOps) result.note = `capped at ${total} ops: ${Math.round(warm.opsPerSec)} ops/s here, BENCH_MEMORY_MAX_MS ${config.memoryMaxMs}`;
    const chunks = config.memorySamples - 1;
    const perChunk = Math.ceil(total / chunks);
    let done = 0;
    let elapsed = 0;
    result.samples.push({ ops: 0, heapUsed: collect() });
    for (let c = 0; c < chunks; c++) {
      const offset = done;
      const sample = await timeConcurrent({ run: (i) => mix(offset + i) }, perChunk, config.concurrency);
      done += perChunk;
      elapsed += sample.elapsedMs;
      result.samples.push({ ops: done, heapUsed: collect() });
    }
    const fit = linearFit(result.samples.map((s) => s.ops), result.samples.map((s) => s.heapUsed));
    result.ops = done;
    result.slopeBytesPerOp = fit.slope;
    result.fittedGrowthBytes = fit.slope * done;
    result.opsPerSec = (done / elapsed) * 1000;
    result.pass = result.fittedGrowthBytes < MEMORY_GROWTH_LIMIT_BYTES;
  } catch (error) {
    result.error = (error as Error).message;
    result.pass = false;
  }
  return result;
}

/** The heap-growth run as a section table. */
export async function runHeapGrowth(backend: string, set: StowageSet): Promise<SectionTable> {
  const m = await runMemory(backend, set);
  const limit = formatBytes(MEMORY_GROWTH_LIMIT_BYTES);
  return {
    id: 'heap',
    title: `heap growth over a kv/cache/snapshot/lock mix, ${config.concurrency} in flight, on a fixed set of keys (target: fitted growth < ${limit} over the run)`,
    header: ['what', 'ops', 'heap first→last', 'slope B/op', 'fitted growth'],
    align: ['l', 'r', 'r', 'r', 'r'],
    rows: [
      {
        cells: [
          'kv/cache/snapshot/lock mix',
          formatInt(m.ops),
          m.samples.length > 0 ? `${formatBytes(m.samples[0]!.heapUsed)} → ${formatBytes(m.samples.at(-1)!.heapUsed)}` : '-',
          m.slopeBytesPerOp === null ? '-' : m.slopeBytesPerOp.toFixed(2),
          m.fittedGrowthBytes === null ? '-' : formatBytes(m.fittedGrowthBytes),
        ],
        check: check('heap growth of the mix', `< ${limit}`, m.error ?? formatBytes(m.fittedGrowthBytes ?? 0), m.pass === true),
        data: { ...m },
      },
    ],
    notes: m.note ? [m.note] : [],
  };
}

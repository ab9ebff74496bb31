/** Small helpers the section modules share: timing sequential calls, building rows, sizes. */
import { median, percentile } from './stats.ts';
import type { SectionRow, SectionTable, TargetCheck } from './types.ts';

export interface Timing {
  p50: number;
  p99: number;
  samples: number;
}

function summary(samples: number[]): Timing {
  return { p50: median(samples), p99: percentile(samples, 99), samples: samples.length };
}

/**
 * Times `calls` sequential calls of each function, taking turns call by call (a, b, a, b, …)
 * after `warmUp` untimed calls of each: both sides see the same machine, and the warm-up goes
 * past the five executions after which PostgreSQL may switch a prepared statement to its
 * generic plan, so the plan measured is the one every later call gets.
 */
export async function timeTurns(fns: (() => Promise<unknown>)[], calls: number, warmUp = 8): Promise<Timing[]> {
  for (let i = 0; i < warmUp; i++) for (const fn of fns) await fn();
  const samples: number[][] = fns.map(() => []);
  for (let i = 0; i < calls; i++) {
    for (const [f, fn] of fns.entries()) {
      const start = performance.now();
      await fn();
      samples[f]!.push(performance.now() - start);
    }
  }
  return samples.map(summary);
}

export function ms(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return '-';
  return value >= 100 ? value.toFixed(0) : value >= 10 ? value.toFixed(1) : value.toFixed(2);
}

/** `10k`, `1M`, `100k`. */
export function sizeLabel(rows: number): string {
  if (rows >= 1_000_000 && rows % 1_000_000 === 0) return `${rows / 1_000_000}M`;
  if (rows >= 1_000 && rows % 1_000 === 0) return `${rows / 1_000}k`;
  return String(rows);
}

export function mib(bytes: number | null | undefined): string {
  if (bytes === null || bytes === undefined || !Number.isFinite(bytes)) return '-';
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

export function check(what: string, target: string, actual: string, pass: boolean): TargetCheck {
  return { what, target, actual, pass };
}

/** A row whose target does not apply here, with the reason in the verdict column. */
export function naRow(label: string, width: number, reason: string): SectionRow {
  return { cells: [label, ...Array.from({ length: width - 1 }, () => '-')], note: `n/a: ${reason}` };
}

/** A section that failed as a whole: one table with the error. */
export function failedTable(id: string, title: string, error: unknown): SectionTable {
  return { id, title, header: [], align: [], rows: [], notes: [], error: error instanceof Error ? error.message : String(error) };
}

/** Sleeps `ms` milliseconds. */
export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Forces a full collection (node --expose-gc) and returns heapUsed. */
export function collectedHeap(): number {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run node with --expose-gc (pnpm bench does)');
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

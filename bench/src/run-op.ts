/**
 * Measures one operation on one backend: stowage, the raw replay of stowage's own statements,
 * and everything else it is compared with (the adapter with coalescing off, the raw driver's
 * obvious single statement, the physical anchor, peers), interleaved round by round.
 */
import { config } from './config.ts';
import { timeConcurrent, warmUp } from './measure.ts';
import { median, percentile, ratioText } from './stats.ts';
import type { BackendBench, Impl, ImplResult, OpBench, OpResult, TargetCheck, ThroughputSample } from './types.ts';

/** Throughput rounds that run even when an operation is over its time budget. */
const MIN_THROUGHPUT_ROUNDS = 3;
/**
 * Past `config.rounds`, rounds go on (up to `config.maxRounds`, within the budget) while the
 * standard error of a ratio's median is above this: a noisy server gets more rounds.
 */
const RATIO_PRECISION = 0.025;
const MAX_SLICES = 32;
/** No warm-up or round makes more calls than this, however fast the server. */
const MAX_PHASE_CALLS = 50_000;
/** A throughput slice makes at least this many calls per call in flight. */
const MIN_SLICE_CALLS_PER_SLOT = 4;
const ROUND_TRIP_SAMPLE = 4;

function errorText(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

interface Slot {
  impl: Impl;
  result: ImplResult;
  latencies: number[];
  /** Mean ms per sequential call in the warm-up: sizes the concurrent warm-up. */
  meanMs: number;
  /** Calls per throughput round: about `throughputMs` at the rate of the concurrent warm-up. */
  roundCalls: number;
}

/** Moves the key space on and lets `impl` create what the next `count` calls need. */
async function preparePhase(op: OpBench, impl: Impl, count: number): Promise<void> {
  op.keys.nextPhase();
  const owner = impl.kind === 'replay' ? op.stowage : impl;
  await owner.prepare?.(count);
}

async function countRoundTrips(backend: BackendBench, op: OpBench, impl: Impl, call: (i: number) => Promise<unknown>): Promise<{ perCall: number; detail: string[] }> {
  await preparePhase(op, impl, ROUND_TRIP_SAMPLE);
  const observation = await backend.observe(async () => {
    for (let i = 0; i < ROUND_TRIP_SAMPLE; i++) await call(i);
  });
  const perCall = observation.count / ROUND_TRIP_SAMPLE;
  // one call's statements are enough to show what happened
  const detail = observation.descriptions.slice(0, Math.ceil(observation.descriptions.length / ROUND_TRIP_SAMPLE));
  return { perCall, detail };
}

function newSlot(impl: Impl): Slot {
  return { impl, result: emptyResult(impl), latencies: [], meanMs: 1, roundCalls: 0 };
}

function emptyResult(impl: Impl): ImplResult {
  return {
    name: impl.name,
    kind: impl.kind,
    latency: null,
    opsPerSec: null,
    roundsOpsPerSec: [],
    cpuMicrosPerOp: null,
    roundsCpuMicrosPerOp: [],
    roundTrips: impl.knownRoundTrips ?? null,
    roundTripDetail: [],
  };
}

/** `count` calls of `slot` with `concurrency` in flight: its own program's run, or `run` in this process. */
function timeSlot(slot: Slot, count: number, concurrency: number): Promise<ThroughputSample> {
  return slot.impl.batch ? slot.impl.batch(count, concurrency) : timeConcurrent(slot.impl, count, concurrency);
}

/** Seeds and warms up one of the others; counts its round trips where its traffic can be observed. */
async function prepareOther(backend: BackendBench, op: OpBench, slot: Slot): Promise<void> {
  const impl = slot.impl;
  await impl.seed?.();
  if (impl.batch) return; // an external program warms itself up in the concurrent warm-up
  await preparePhase(op, impl, config.warmupIterations);
  slot.meanMs = await warmUp(impl, config.warmupIterations, config.throughputMs);
  if (impl.observed) {
    await preparePhase(op, impl, config.warmupIterations);
    await warmUp({ run: impl.observed }, Math.min(10, config.warmupIterations), config.throughputMs);
    const rt = await countRoundTrips(backend, op, impl, impl.observed);
    slot.result.roundTrips = rt.perCall;
    slot.result.roundTripDetail = rt.detail;
  }
}

export async function runOp(backend: BackendBench, op: OpBench, log: (line: string) => void): Promise<OpResult> {
  const result: OpResult = {
    backend: backend.id,
    op: op.name,
    note: op.note,
    concurrency: op.concurrency ?? config.concurrency,
    expectedRoundTrips: op.expectedRoundTrips,
    impls: [],
    ratios: [],
    latencyRatio: null,
    latencyTarget: op.latencyTarget ?? null,
    statements: [],
    replayKeyParams: null,
    checks: [],
  };
  const began = performance.now();
  const trace = (what: string) => {
    if (config.verbose) log(`  ${op.name} +${((performance.now() - began) / 1000).toFixed(1)}s ${what}`);
  };
  const deadline = performance.now() + config.opBudgetMs;
  const overBudget = (round: number) => round > 0 && performance.now() > deadline;

  // stowage first: warm both instances, capture its statements, count its round trips
  const stowage = newSlot(op.stowage);
  const slots: Slot[] = [stowage];
  try {
    trace('seeding');
    await op.stowage.seed?.();
    trace('warming up stowage');
    await preparePhase(op, op.stowage, config.warmupIterations);
    stowage.meanMs = await warmUp(op.stowage, config.warmupIterations, config.throughputMs);
    await preparePhase(op, op.stowage, config.warmupIterations);
    await warmUp({ run: op.observed }, Math.min(20, config.warmupIterations), config.throughputMs);
    trace('capturing');
    if (op.captureSecondCall) await op.observed(-1);
    const capture = await backend.observe(() => op.observed(-1));
    result.statements = capture.descriptions;
    const rt = await countRoundTrips(backend, op, op.stowage, op.observed);
    stowage.result.roundTrips = rt.perCall;
    stowage.result.roundTripDetail = rt.detail;
    const replay = { ...backend.rawFor(op, capture), target: op.replayTarget };
    result.replayKeyParams = replay.keyParams ?? null;
    const replaySlot = newSlot(replay);
    replaySlot.result.roundTrips = capture.count;
    slots.push(replaySlot);
  } catch (error) {
    stowage.result.error = errorText(error);
    log(`  ${op.name}: stowage failed: ${stowage.result.error}`);
  }
  const replaySlot = slots[1];
  if (replaySlot !== undefined) {
    try {
      await preparePhase(op, replaySlot.impl, config.warmupIterations);
      replaySlot.meanMs = await warmUp(replaySlot.impl, config.warmupIterations, config.throughputMs);
    } catch (error) {
      replaySlot.result.error = errorText(error);
      log(`  ${op.name}: the replay failed: ${replaySlot.result.error}`);
    }
  }

  for (const other of op.others) {
    const slot = newSlot(other);
    trace(`seeding and warming up ${other.name}`);
    try {
      await prepareOther(backend, op, slot);
      slots.push(slot);
    } catch (error) {
      slot.result.error = errorText(error);
      result.impls.push(slot.result);
      log(`  ${op.name}: ${other.name} failed: ${slot.result.error}`);
    }
  }
  const live = () => slots.filter((s) => s.result.error === undefined);

  // the concurrent warm-up gets about `throughputMs` of calls, sized from the sequential mean
  // (32 in flight are assumed about 3x faster than one at a time)
  const warmUpCalls = (slot: Slot) =>
    Math.max(result.concurrency, Math.min(MAX_PHASE_CALLS, Math.round((config.throughputMs / slot.meanMs) * Math.min(3, result.concurrency))));

  // One untimed concurrent phase each: sequential warm-up calls leave code that only runs hot
  // under load (the driver's pipelining, stowage's own paths) half-optimized, and the
  // implementation measured first would pay for warming what the others then share.
  for (const slot of live()) {
    trace(`warming up ${slot.impl.name} concurrently`);
    try {
      const count = warmUpCalls(slot);
      await preparePhase(op, slot.impl, count);
      const { opsPerSec } = await timeSlot(slot, count, result.concurrency);
      slot.roundCalls = Math.max(2 * MIN_SLICE_CALLS_PER_SLOT * result.concurrency, Math.min(MAX_PHASE_CALLS, Math.round((opsPerSec * config.throughputMs) / 1000)));
    } catch (error) {
      slot.result.error = errorText(error);
    }
  }

  // Throughput decides the verdicts, so it runs first and gets at least MIN_THROUGHPUT_ROUNDS
  // rounds whatever the budget, and more than `config.rounds` while its ratios are imprecise.
  // Within a round the implementations take turns in short slices, in palindromes
  // (A B C C B A A B C C B A …): the machine's load changes from one half second to the next,
  // and only calls made close together in time see the same machine. An external program
  // (pgbench) starts a process and its connections for every slice, so an operation that has
  // one runs a single palindrome of two long slices per round.
  const external = slots.some((slot) => slot.impl.batch !== undefined);
  const moreRounds = (round: number) =>
    round < config.rounds || (round < config.maxRounds && ratioStandardError(slots.map((s) => s.result), op) > RATIO_PRECISION);
  for (let round = 0; moreRounds(round) && !(round >= MIN_THROUGHPUT_ROUNDS && overBudget(round)); round++) {
    const order = rotate(live(), round);
    const palindrome = [...order, ...[...order].reverse()];
    const spent = new Map<Slot, { calls: number; ms: number; cpuMicros: number }>();
    const slices = external ? 2 : slicesFor(Math.min(...order.map((slot) => slot.roundCalls)), result.concurrency);
    for (let pass = 0; pass < slices / 2; pass++) {
      for (const slot of palindrome) {
        if (slot.result.error !== undefined) continue;
        const count = Math.ceil(slot.roundCalls / slices);
        trace(`throughput ${slot.impl.name} round ${round} slice ${pass}: ${count} calls`);
        try {
          await preparePhase(op, slot.impl, count);
          const sample = await timeSlot(slot, count, result.concurrency);
          const sum = spent.get(slot) ?? { calls: 0, ms: 0, cpuMicros: 0 };
          spent.set(slot, { calls: sum.calls + sample.ops, ms: sum.ms + sample.elapsedMs, cpuMicros: sum.cpuMicros + sample.cpuMicrosPerOp * sample.ops });
        } catch (error) {
          slot.result.error = errorText(error);
        }
      }
    }
    for (const [slot, sum] of spent) {
      if (slot.result.error !== undefined) continue;
      slot.result.roundsOpsPerSec.push((sum.calls / sum.ms) * 1000);
      slot.result.roundsCpuMicrosPerOp.push(sum.cpuMicros / sum.calls);
    }
  }

  // Latency: the implementations take turns call by call (A B C A B C …), `rounds` times or
  // until the budget is spent, so that each sees the same moments of a busy machine; an
  // external program (pgbench) runs its sequential calls as a block of its own per round.
  for (let round = 0; round < config.rounds && !overBudget(round); round++) {
    const turns = rotate(live(), round).filter((slot) => !slot.impl.batch);
    // about `2 × throughputMs` per implementation and round: on a slow server fewer calls, and
    // fewer keys for `prepare` to create (a delete needs a fresh key per call)
    const turnMs = turns.reduce((sum, slot) => sum + slot.meanMs, 0);
    const calls = Math.min(config.latencyIterations, Math.max(20, Math.ceil((config.throughputMs * 2 * turns.length) / Math.max(turnMs, 0.001))));
    trace(`latency round ${round}: ${calls} calls each`);
    for (const slot of turns) await preparePhase(op, slot.impl, calls);
    const began = performance.now();
    for (let i = 0; i < calls; i++) {
      for (const slot of turns) {
        if (slot.result.error !== undefined) continue;
        try {
          const start = performance.now();
          await slot.impl.run(i);
          slot.latencies.push(performance.now() - start);
        } catch (error) {
          slot.result.error = errorText(error);
        }
      }
      if (i >= 5 && performance.now() - began > config.throughputMs * 2 * turns.length) break;
    }
    for (const slot of live().filter((s) => s.impl.sequential)) {
      try {
        slot.latencies.push(...(await slot.impl.sequential!(config.latencyIterations)));
      } catch (error) {
        slot.result.error = errorText(error);
      }
    }
  }
  for (const slot of slots) {
    if (slot.latencies.length === 0) continue;
    const mean = slot.latencies.reduce((a, b) => a + b, 0) / slot.latencies.length;
    slot.result.latency = { p50: percentile(slot.latencies, 50), p99: percentile(slot.latencies, 99), mean, samples: slot.latencies.length };
  }

  for (const slot of slots) {
    if (slot.result.roundsOpsPerSec.length > 0) {
      slot.result.opsPerSec = median(slot.result.roundsOpsPerSec);
      const cpu = slot.result.roundsCpuMicrosPerOp.filter(Number.isFinite);
      slot.result.cpuMicrosPerOp = cpu.length > 0 ? median(cpu) : null;
    }
    if (!result.impls.includes(slot.result)) result.impls.push(slot.result);
  }

  result.checks = checksFor(result, op, slots);
  return result;
}

/**
 * stowage's throughput relative to another implementation: the median, over rounds, of the two
 * ops/s of one round. Within a round the implementations take turns in short slices, so a slow
 * moment of the machine or a server that drifts over the run weighs on both sides of each ratio alike.
 */
function pairedRatio(stowage: ImplResult, other: ImplResult): number | null {
  const ratios = roundRatios(stowage, other);
  return ratios.length === 0 ? null : median(ratios);
}

function roundRatios(stowage: ImplResult, other: ImplResult): number[] {
  const rounds = Math.min(stowage.roundsOpsPerSec.length, other.roundsOpsPerSec.length);
  return Array.from({ length: rounds }, (_, r) => stowage.roundsOpsPerSec[r]! / other.roundsOpsPerSec[r]!);
}

function targetOf(op: OpBench, impl: ImplResult): number | null {
  if (impl.kind === 'replay') return op.replayTarget;
  return op.others.find((other) => other.name === impl.name)?.target ?? null;
}

/**
 * The largest relative standard error among the medians of the ratios that have a target:
 * about 1.25 standard deviations of the round ratios over √rounds, over the target (a ratio of
 * 6 spreads six times as much as a ratio of 1 for the same noise).
 */
function ratioStandardError(impls: ImplResult[], op: OpBench): number {
  const stowage = impls.find((i) => i.kind === 'stowage');
  if (stowage === undefined || stowage.error !== undefined) return 0;
  let largest = 0;
  for (const other of impls) {
    const target = other.kind === 'stowage' || other.error !== undefined ? null : targetOf(op, other);
    if (target === null) continue;
    const ratios = roundRatios(stowage, other);
    if (ratios.length < 2) return Infinity;
    const mean = ratios.reduce((a, b) => a + b, 0) / ratios.length;
    const sd = Math.sqrt(ratios.reduce((sum, r) => sum + (r - mean) ** 2, 0) / (ratios.length - 1));
    largest = Math.max(largest, (1.2533 * sd) / Math.sqrt(ratios.length) / target);
  }
  return largest;
}

/**
 * Slices per implementation and round: up to MAX_SLICES, even (whole palindromes), and each
 * slice long enough to keep `concurrency` calls in flight most of the time.
 */
function slicesFor(callsPerRound: number, concurrency: number): number {
  const fitting = Math.floor(callsPerRound / (MIN_SLICE_CALLS_PER_SLOT * concurrency));
  return Math.max(2, Math.min(MAX_SLICES, fitting - (fitting % 2)));
}

function rotate<T>(items: T[], by: number): T[] {
  if (items.length === 0) return items;
  const k = by % items.length;
  return [...items.slice(k), ...items.slice(0, k)];
}

function checksFor(result: OpResult, op: OpBench, slots: Slot[]): TargetCheck[] {
  const checks: TargetCheck[] = [];
  const stowage = result.impls.find((i) => i.kind === 'stowage');
  if (stowage === undefined || stowage.error !== undefined) {
    checks.push({ what: 'stowage runs', target: 'no error', actual: stowage?.error ?? 'not run', pass: false });
    return checks;
  }
  if (stowage.roundTrips !== null) {
    checks.push({
      what: 'round trips',
      target: `${op.expectedRoundTrips}`,
      actual: `${stowage.roundTrips}`,
      pass: stowage.roundTrips === op.expectedRoundTrips,
    });
  }
  for (const slot of slots.slice(1)) {
    const impl = slot.result;
    const target = targetOf(op, impl);
    const ratio = pairedRatio(stowage, impl);
    result.ratios.push({ impl: impl.name, kind: impl.kind, ratio, target });
    if (target === null) continue;
    if (impl.error !== undefined) {
      // a replay that cannot run is a limit of the replay (shown on its row), not a miss of stowage's
      if (impl.kind !== 'replay') checks.push({ what: `${impl.name} runs`, target: 'no error', actual: impl.error, pass: false });
    } else if (ratio !== null) {
      checks.push({ what: `stowage/${impl.name} throughput`, target: `>= ${target.toFixed(2)}`, actual: ratioText(ratio), pass: ratio >= target });
    }
  }
  const raw = result.impls.find((i) => i.kind === 'raw');
  if (op.latencyTarget !== undefined && stowage.latency && raw?.latency) {
    result.latencyRatio = stowage.latency.p50 / raw.latency.p50;
    checks.push({
      what: `lone call p50 / ${raw.name} p50`,
      target: `<= ${op.latencyTarget.toFixed(2)}`,
      actual: result.latencyRatio.toFixed(2),
      pass: result.latencyRatio <= op.latencyTarget,
    });
  }
  return checks;
}

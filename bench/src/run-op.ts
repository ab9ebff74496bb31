/**
 * Measures one operation on one backend: stowage, the raw replay of stowage's own
 * statements, and the peers, interleaved round by round.
 */
import { config } from './config.ts';
import { timeConcurrent, timeSequential, warmUp } from './measure.ts';
import { median, percentile, ratioText } from './stats.ts';
import type { BackendBench, Impl, ImplResult, OpBench, OpResult, PeerImpl, TargetCheck } from './types.ts';

export const RAW_RATIO_TARGET = 0.9;
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
  const owner = impl.kind === 'raw' ? op.stowage : impl;
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
    roundTrips: null,
    roundTripDetail: [],
  };
}

export async function runOp(backend: BackendBench, op: OpBench, log: (line: string) => void): Promise<OpResult> {
  const result: OpResult = {
    backend: backend.id,
    op: op.name,
    note: op.note,
    concurrency: op.concurrency ?? config.concurrency,
    expectedRoundTrips: op.expectedRoundTrips,
    impls: [],
    rawRatio: null,
    peerRatios: [],
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
    const capture = await backend.observe(() => op.observed(-1));
    result.statements = capture.descriptions;
    const rt = await countRoundTrips(backend, op, op.stowage, op.observed);
    stowage.result.roundTrips = rt.perCall;
    stowage.result.roundTripDetail = rt.detail;
    const raw = backend.rawFor(op, capture);
    result.replayKeyParams = raw.keyParams ?? null;
    const rawSlot = newSlot(raw);
    rawSlot.result.roundTrips = capture.count;
    slots.push(rawSlot);
  } catch (error) {
    stowage.result.error = errorText(error);
    log(`  ${op.name}: stowage failed: ${stowage.result.error}`);
  }

  for (const peer of op.peers) {
    const slot = newSlot(peer);
    trace(`seeding and warming up ${peer.name}`);
    try {
      await peer.seed?.();
      await preparePhase(op, peer, config.warmupIterations);
      slot.meanMs = await warmUp(peer, config.warmupIterations, config.throughputMs);
      await preparePhase(op, peer, config.warmupIterations);
      await warmUp({ run: peer.observed }, Math.min(10, config.warmupIterations), config.throughputMs);
      const rt = await countRoundTrips(backend, op, peer, peer.observed);
      slot.result.roundTrips = rt.perCall;
      slot.result.roundTripDetail = rt.detail;
      slots.push(slot);
    } catch (error) {
      slot.result.error = errorText(error);
      result.impls.push(slot.result);
      log(`  ${op.name}: ${peer.name} failed: ${slot.result.error}`);
    }
  }
  if (slots.length > 1) {
    const raw = slots[1]!;
    if (raw.impl.kind === 'raw') {
      await preparePhase(op, raw.impl, config.warmupIterations);
      await warmUp(raw.impl, config.warmupIterations, config.throughputMs).then(
        (meanMs) => void (raw.meanMs = meanMs),
        (error) => void (raw.result.error = errorText(error)),
      );
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
      const { opsPerSec } = await timeConcurrent(slot.impl, count, result.concurrency);
      slot.roundCalls = Math.max(2 * MIN_SLICE_CALLS_PER_SLOT * result.concurrency, Math.min(MAX_PHASE_CALLS, Math.round((opsPerSec * config.throughputMs) / 1000)));
    } catch (error) {
      slot.result.error = errorText(error);
    }
  }

  // Throughput decides the verdicts, so it runs first and gets at least MIN_THROUGHPUT_ROUNDS
  // rounds whatever the budget, and more than `config.rounds` while its ratios are imprecise.
  // Within a round the implementations take turns in short slices, in palindromes
  // (A B C C B A A B C C B A …): the machine's load changes from one half second to the next,
  // and only calls made close together in time see the same machine.
  const moreRounds = (round: number) =>
    round < config.rounds || (round < config.maxRounds && ratioStandardError(slots.map((s) => s.result), op) > RATIO_PRECISION);
  for (let round = 0; moreRounds(round) && !(round >= MIN_THROUGHPUT_ROUNDS && overBudget(round)); round++) {
    const order = rotate(live(), round);
    const palindrome = [...order, ...[...order].reverse()];
    const spent = new Map<Slot, { calls: number; ms: number; cpuMicros: number }>();
    const slices = slicesFor(Math.min(...order.map((slot) => slot.roundCalls)), result.concurrency);
    for (let pass = 0; pass < slices / 2; pass++) {
      for (const slot of palindrome) {
        if (slot.result.error !== undefined) continue;
        const count = Math.ceil(slot.roundCalls / slices);
        trace(`throughput ${slot.impl.name} round ${round} slice ${pass}: ${count} calls`);
        try {
          await preparePhase(op, slot.impl, count);
          const sample = await timeConcurrent(slot.impl, count, result.concurrency);
          const sum = spent.get(slot) ?? { calls: 0, ms: 0, cpuMicros: 0 };
          spent.set(slot, { calls: sum.calls + count, ms: sum.ms + sample.elapsedMs, cpuMicros: sum.cpuMicros + sample.cpuMicrosPerOp * count });
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

  // latency: every implementation, alternating, `rounds` times or once the budget is spent
  for (let round = 0; round < config.rounds && !overBudget(round); round++) {
    for (const slot of rotate(live(), round)) {
      trace(`latency ${slot.impl.name} round ${round}`);
      try {
        await preparePhase(op, slot.impl, config.latencyIterations);
        slot.latencies.push(...(await timeSequential(slot.impl, config.latencyIterations, config.throughputMs * 2, 5)));
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
      slot.result.cpuMicrosPerOp = median(slot.result.roundsCpuMicrosPerOp);
    }
    if (!result.impls.includes(slot.result)) result.impls.push(slot.result);
  }

  result.checks = checksFor(result, op);
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

/**
 * The largest standard error among the medians of the ratios that have a target (stowage/raw,
 * stowage/peer): about 1.25 standard deviations of the round ratios over √rounds.
 */
function ratioStandardError(impls: ImplResult[], op: OpBench): number {
  const stowage = impls.find((i) => i.kind === 'stowage');
  if (stowage === undefined || stowage.error !== undefined) return 0;
  const targeted = impls.filter(
    (i) => i.error === undefined && (i.kind === 'raw' || op.peers.some((peer) => peer.name === i.name && peer.target !== null)),
  );
  let largest = 0;
  for (const other of targeted) {
    const ratios = roundRatios(stowage, other);
    if (ratios.length < 2) return Infinity;
    const mean = ratios.reduce((a, b) => a + b, 0) / ratios.length;
    const sd = Math.sqrt(ratios.reduce((sum, r) => sum + (r - mean) ** 2, 0) / (ratios.length - 1));
    largest = Math.max(largest, (1.2533 * sd) / Math.sqrt(ratios.length));
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

function checksFor(result: OpResult, op: OpBench): TargetCheck[] {
  const checks: TargetCheck[] = [];
  const stowage = result.impls.find((i) => i.kind === 'stowage');
  const raw = result.impls.find((i) => i.kind === 'raw');
  if (stowage?.error !== undefined) {
    checks.push({ what: 'stowage runs', target: 'no error', actual: stowage.error, pass: false });
    return checks;
  }
  if (stowage?.roundTrips !== null && stowage?.roundTrips !== undefined) {
    checks.push({
      what: 'round trips',
      target: `${op.expectedRoundTrips}`,
      actual: `${stowage.roundTrips}`,
      pass: stowage.roundTrips === op.expectedRoundTrips,
    });
  }
  const rawRatio = stowage && raw ? pairedRatio(stowage, raw) : null;
  if (rawRatio !== null) {
    result.rawRatio = rawRatio;
    checks.push({
      what: 'stowage/raw throughput',
      target: `>= ${RAW_RATIO_TARGET.toFixed(2)}`,
      actual: ratioText(result.rawRatio),
      pass: result.rawRatio >= RAW_RATIO_TARGET,
    });
  } else if (raw?.error !== undefined) {
    checks.push({ what: 'raw replay runs', target: 'no error', actual: raw.error, pass: false });
  }
  for (const peer of op.peers) {
    const measured = result.impls.find((i) => i.name === peer.name);
    const ratio = stowage && measured ? pairedRatio(stowage, measured) : null;
    result.peerRatios.push({ peer: peer.name, ratio, target: peer.target });
    if (peer.target !== null && ratio !== null) {
      checks.push({ what: `stowage/${peer.name} throughput`, target: `>= ${peer.target.toFixed(2)}`, actual: ratioText(ratio), pass: ratio >= peer.target });
    }
  }
  return checks;
}

export type { PeerImpl };

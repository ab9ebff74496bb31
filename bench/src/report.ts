/** The printed table, the list of unmet targets, and the JSON written next to the chart. */
import { config } from './config.ts';
import { HANDOFF_P50_TARGET_MS, type HandoffResult } from './handoff.ts';
import { MEMORY_GROWTH_LIMIT_BYTES, type MemoryResult } from './memory.ts';
import { RAW_RATIO_TARGET } from './run-op.ts';
import { formatBytes, formatInt, formatMicros, formatRatio } from './stats.ts';
import type { OpResult } from './types.ts';

export interface BackendReport {
  id: string;
  title: string;
  label: string;
  driver: string;
  stowageError: string | null;
  /** How peers were run here, when that needed explaining. */
  notes: string[];
  ops: OpResult[];
  handoff: HandoffResult[];
  memory: MemoryResult | null;
  /** The backend could not be started or failed as a whole. */
  error?: string;
}

export interface BenchReport {
  startedAt: string;
  finishedAt: string;
  durationSec: number;
  node: string;
  cpus: number;
  settings: Omit<typeof config, 'skip'> & { skip: string[] };
  backends: BackendReport[];
  /** Backends that were not run, and why. */
  missing: { id: string; reason: string }[];
  /** One line per unmet target. */
  unmet: string[];
  checked: number;
}

type Align = 'l' | 'r';

export function renderTable(header: string[], rows: string[][], align: Align[]): string {
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] ?? '').length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, c) => (align[c] === 'r' ? cell.padStart(widths[c]!) : cell.padEnd(widths[c]!)))
      .join('  ')
      .trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

function opRows(op: OpResult, backendError: string | null): string[][] {
  const rows: string[][] = [];
  const stowage = op.impls.find((i) => i.kind === 'stowage');
  const failed = op.checks.filter((c) => !c.pass);
  for (const impl of op.impls) {
    const isStowage = impl.kind === 'stowage';
    let ratio = '';
    if (impl.kind === 'raw') ratio = formatRatio(op.rawRatio);
    if (impl.kind === 'peer') ratio = formatRatio(op.peerRatios.find((p) => p.peer === impl.name)?.ratio ?? null);
    let verdict = '';
    if (isStowage) {
      verdict = impl.error !== undefined ? 'FAIL (error)' : failed.length === 0 ? (op.checks.length > 0 ? 'PASS' : '') : `FAIL ${failed.map(shortCheck).join(', ')}`;
    } else if (impl.kind === 'raw') {
      verdict = `target >= ${RAW_RATIO_TARGET.toFixed(2)}`;
    } else {
      const target = op.peerRatios.find((p) => p.peer === impl.name)?.target;
      verdict = target === null || target === undefined ? 'no target' : `target >= ${target.toFixed(2)}`;
    }
    if (impl.error !== undefined && !isStowage) verdict = `error: ${impl.error.slice(0, 60)}`;
    const rt = impl.roundTrips === null ? '-' : Number.isInteger(impl.roundTrips) ? String(impl.roundTrips) : impl.roundTrips.toFixed(2);
    rows.push([
      isStowage ? `${op.op}${op.concurrency !== config.concurrency ? ` (@${op.concurrency})` : ''}` : '',
      impl.name,
      impl.latency ? formatMicros(impl.latency.p50) : '-',
      impl.latency ? formatMicros(impl.latency.p99) : '-',
      impl.opsPerSec !== null ? formatInt(impl.opsPerSec) : '-',
      impl.cpuMicrosPerOp !== null ? impl.cpuMicrosPerOp.toFixed(0) : '-',
      ratio,
      isStowage ? String(impl.roundsOpsPerSec.length) : '',
      isStowage ? `${rt}/${op.expectedRoundTrips}` : rt,
      verdict,
    ]);
  }
  if (stowage?.error !== undefined && (backendError === null || !stowage.error.includes(backendError))) {
    rows.push(['', `↳ ${stowage.error.slice(0, 60)}`, '', '', '', '', '', '', '', '']);
  }
  return rows;
}

function shortCheck(check: { what: string; actual: string; target: string }): string {
  if (check.what === 'round trips') return `RT ${check.actual}≠${check.target}`;
  if (check.what === 'stowage/raw throughput') return `raw ${check.actual}<${RAW_RATIO_TARGET.toFixed(2)}`;
  if (check.what.startsWith('stowage/')) return `${check.what.slice(8, check.what.indexOf(' '))} ${check.actual}<${check.target.replace('>= ', '')}`;
  return check.what;
}

export function renderBackend(backend: BackendReport): string {
  const out: string[] = [];
  out.push(`■ ${backend.title} — ${backend.label} — driver ${backend.driver}`);
  if (backend.error) out.push(`  backend failed: ${backend.error}`);
  if (backend.stowageError) out.push(`  stowage not measured: ${backend.stowageError}`);
  for (const note of backend.notes) out.push(`  note: ${note}`);
  if (backend.ops.length > 0) {
    out.push(
      renderTable(
        ['operation', 'impl', 'p50 µs', 'p99 µs', `ops/s @${config.concurrency}`, 'cpu µs/op', 'stowage÷', 'rounds', 'RT', 'verdict'],
        backend.ops.flatMap((op) => opRows(op, backend.stowageError)),
        ['l', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'l'],
      ),
    );
  }
  if (backend.handoff.length > 0) {
    out.push('');
    out.push(
      renderTable(
        ['lock hand-off', 'waiters', 'samples', 'p50 ms', 'p99 ms', 'max ms', 'verdict'],
        backend.handoff.map((h) => [
          h.mode,
          String(h.waiters),
          String(h.samples),
          h.p50Ms === null ? '-' : h.p50Ms.toFixed(2),
          h.p99Ms === null ? '-' : h.p99Ms.toFixed(2),
          h.maxMs === null ? '-' : h.maxMs.toFixed(2),
          h.unavailable
            ? `n/a: ${h.unavailable}`
            : h.error
              ? `FAIL error: ${h.error}`
              : h.pass === null
                ? 'no target (poll interval 50 ms)'
                : `${h.pass ? 'PASS' : 'FAIL'} (p50 < ${HANDOFF_P50_TARGET_MS} ms)`,
        ]),
        ['l', 'r', 'r', 'r', 'r', 'r', 'l'],
      ),
    );
  }
  if (backend.memory) {
    const m = backend.memory;
    out.push('');
    out.push(
      renderTable(
        ['heap growth', 'ops', 'heap first→last', 'slope B/op', 'fitted growth', 'verdict'],
        [
          [
            'kv/cache/snapshot/lock mix',
            formatInt(m.ops),
            m.samples.length > 0 ? `${formatBytes(m.samples[0]!.heapUsed)} → ${formatBytes(m.samples.at(-1)!.heapUsed)}` : '-',
            m.slopeBytesPerOp === null ? '-' : m.slopeBytesPerOp.toFixed(2),
            m.fittedGrowthBytes === null ? '-' : formatBytes(m.fittedGrowthBytes),
            (m.error ? `FAIL error: ${m.error}` : `${m.pass ? 'PASS' : 'FAIL'} (< ${formatBytes(MEMORY_GROWTH_LIMIT_BYTES)} over the run)`) +
              (m.note ? ` — ${m.note}` : ''),
          ],
        ],
        ['l', 'r', 'r', 'r', 'r', 'l'],
      ),
    );
  }
  return out.join('\n');
}

/** Every unmet target, one line each, and how many targets were checked. */
export function collectUnmet(backends: BackendReport[]): { unmet: string[]; checked: number } {
  const unmet: string[] = [];
  let checked = 0;
  for (const b of backends) {
    if (b.error) unmet.push(`${b.id}: backend failed: ${b.error}`);
    if (b.stowageError) unmet.push(`${b.id}: stowage not measured: ${b.stowageError}`);
    for (const op of b.ops) {
      for (const check of op.checks) {
        // an adapter that did not load is reported once, not once per operation
        if (b.stowageError && check.actual.includes(b.stowageError)) continue;
        checked++;
        if (!check.pass) unmet.push(`${b.id} ${op.op}: ${check.what} ${check.actual} (target ${check.target})`);
      }
      for (const impl of op.impls) {
        if (impl.kind !== 'raw' && impl.roundTrips !== null && impl.kind === 'stowage' && !Number.isInteger(impl.roundTrips)) {
          unmet.push(`${b.id} ${op.op}: ${impl.name} round trips vary between calls (${impl.roundTrips})`);
        }
      }
    }
    for (const h of b.handoff) {
      if (h.pass === null) continue;
      checked++;
      if (!h.pass) unmet.push(`${b.id} lock hand-off (${h.mode}): p50 ${h.p50Ms?.toFixed(2) ?? '-'} ms${h.error ? ` error: ${h.error}` : ''} (target < ${HANDOFF_P50_TARGET_MS} ms)`);
    }
    if (b.memory && b.memory.pass !== null) {
      checked++;
      if (!b.memory.pass) {
        unmet.push(`${b.id} heap growth: ${b.memory.error ?? `${formatBytes(b.memory.fittedGrowthBytes ?? 0)} fitted over ${formatInt(b.memory.ops)} ops`} (target < ${formatBytes(MEMORY_GROWTH_LIMIT_BYTES)})`);
      }
    }
  }
  return { unmet, checked };
}

export function renderSummary(report: BenchReport): string {
  const lines: string[] = [];
  for (const m of report.missing) lines.push(`not run: ${m.id}: ${m.reason}`);
  if (report.unmet.length === 0) {
    lines.push(`ALL TARGETS MET (${report.checked} checked)`);
  } else {
    lines.push(`UNMET TARGETS: ${report.unmet.length} of ${report.checked} checked (plus any listed failures)`);
    for (const u of report.unmet) lines.push(`  ✗ ${u}`);
  }
  return lines.join('\n');
}

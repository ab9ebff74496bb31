/** The printed table, the list of unmet targets, and the JSON written next to the chart. */
import { config } from './config.ts';
import { formatInt, formatMicros, formatRatio } from './stats.ts';
import type { ImplKind, ImplResult, OpResult, SectionTable, TargetCheck } from './types.ts';

export interface BackendReport {
  id: string;
  title: string;
  label: string;
  driver: string;
  stowageError: string | null;
  /** How peers were run here, when that needed explaining. */
  notes: string[];
  ops: OpResult[];
  /** Listings by table size, hand-off, connections, memory: one table each. */
  sections: SectionTable[];
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

/** Rows of an operation in this order: stowage, its variant, the raw driver, the anchor, peers, the replay. */
const KIND_ORDER: ImplKind[] = ['stowage', 'variant', 'raw', 'anchor', 'peer', 'replay'];

function opRows(op: OpResult, backendError: string | null): string[][] {
  const rows: string[][] = [];
  const stowage = op.impls.find((i) => i.kind === 'stowage');
  const failed = op.checks.filter((c) => !c.pass);
  const impls = [...op.impls].sort((a, b) => KIND_ORDER.indexOf(a.kind) - KIND_ORDER.indexOf(b.kind));
  for (const impl of impls) {
    const isStowage = impl.kind === 'stowage';
    const ratioOf = op.ratios.find((r) => r.impl === impl.name);
    let verdict = '';
    if (isStowage) {
      verdict = impl.error !== undefined ? 'FAIL (error)' : failed.length === 0 ? (op.checks.length > 0 ? 'PASS' : '') : `FAIL ${failed.map(shortCheck).join(', ')}`;
    } else {
      const target = ratioOf?.target ?? null;
      verdict = target === null ? 'no target' : `target >= ${target.toFixed(2)}`;
      if (impl.kind === 'raw' && op.latencyTarget !== null) verdict += `; lone p50 <= ${op.latencyTarget.toFixed(2)}x`;
    }
    if (impl.error !== undefined && !isStowage) verdict = `error: ${impl.error.slice(0, 60)}`;
    rows.push([
      isStowage ? `${op.op}${op.concurrency !== config.concurrency ? ` (@${op.concurrency})` : ''}` : '',
      impl.name,
      impl.latency ? formatMicros(impl.latency.p50) : '-',
      impl.latency ? formatMicros(impl.latency.p99) : '-',
      impl.opsPerSec !== null ? formatInt(impl.opsPerSec) : '-',
      impl.cpuMicrosPerOp !== null ? impl.cpuMicrosPerOp.toFixed(0) : '-',
      isStowage ? '' : formatRatio(ratioOf?.ratio ?? null),
      isStowage ? String(impl.roundsOpsPerSec.length) : '',
      roundTripsText(impl, isStowage ? op.expectedRoundTrips : null),
      verdict,
    ]);
  }
  if (stowage?.error !== undefined && (backendError === null || !stowage.error.includes(backendError))) {
    rows.push(['', `↳ ${stowage.error.slice(0, 60)}`, '', '', '', '', '', '', '', '']);
  }
  return rows;
}

function roundTripsText(impl: ImplResult, expected: number | null): string {
  const rt = impl.roundTrips === null ? '-' : Number.isInteger(impl.roundTrips) ? String(impl.roundTrips) : impl.roundTrips.toFixed(2);
  return expected === null ? rt : `${rt}/${expected}`;
}

function shortCheck(check: TargetCheck): string {
  if (check.what === 'round trips') return `RT ${check.actual}≠${check.target}`;
  if (check.what.startsWith('lone call')) return `lone p50 ${check.actual}x>${check.target.replace('<= ', '')}`;
  if (check.what.startsWith('stowage/')) return `÷${check.what.slice(8, check.what.lastIndexOf(' '))} ${check.actual}<${check.target.replace('>= ', '')}`;
  return check.what;
}

function verdictCell(row: { check?: TargetCheck; note?: string }): string {
  if (row.check) return row.check.pass ? 'PASS' : `FAIL ${row.check.actual} (target ${row.check.target})`;
  return row.note ?? '';
}

export function renderSection(section: SectionTable): string {
  const out: string[] = [`${section.title}`];
  if (section.error) out.push(`  FAIL: ${section.error}`);
  if (section.rows.length > 0) {
    out.push(
      renderTable(
        [...section.header, 'verdict'],
        section.rows.map((row) => [...row.cells, verdictCell(row)]),
        [...section.align, 'l'],
      ),
    );
  }
  for (const note of section.notes) out.push(`  note: ${note}`);
  return out.join('\n');
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
  for (const section of backend.sections) {
    out.push('');
    out.push(renderSection(section));
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
      const stowage = op.impls.find((i) => i.kind === 'stowage');
      if (stowage && stowage.roundTrips !== null && !Number.isInteger(stowage.roundTrips)) {
        unmet.push(`${b.id} ${op.op}: stowage round trips vary between calls (${stowage.roundTrips})`);
      }
    }
    for (const section of b.sections) {
      if (section.error) unmet.push(`${b.id} ${section.id}: failed: ${section.error}`);
      for (const row of section.rows) {
        if (!row.check) continue;
        checked++;
        if (!row.check.pass) unmet.push(`${b.id} ${section.id}: ${row.check.what} ${row.check.actual} (target ${row.check.target})`);
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

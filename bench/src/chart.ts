/**
 * A hand-written SVG a person can glance at: per backend, per operation, throughput bars on a
 * log scale relative to the operation's reference row, the raw driver's single statement where
 * there is one (raw = 1×), else the replay of stowage's own statements. Red ticks on stowage's
 * bar are its targets (3× raw, 1.5× pgbench, …, placed where that row's rate times the target
 * falls); a stowage bar that ends left of a tick missed it. Below each panel, one line per
 * section row with a target (listings, hand-off, connections, memory), ✓ or ✗.
 */
import type { BenchReport } from './report.ts';
import { formatInt, ratioText } from './stats.ts';
import type { ImplKind, ImplResult, OpResult } from './types.ts';

const WIDTH = 1000;
const LABEL_W = 230;
const PLOT_W = 520;
const MIN_SCALE = 1 / 8;
const MAX_SCALE = 16;
const BAR_H = 9;
const BAR_GAP = 2;
const GROUP_GAP = 9;
const COLORS: Record<ImplKind, string> = {
  stowage: '#2563eb',
  variant: '#93c5fd',
  raw: '#6b7280',
  anchor: '#111827',
  replay: '#d1d5db',
  peer: '#f59e0b',
};
const KIND_ORDER: ImplKind[] = ['stowage', 'variant', 'raw', 'anchor', 'peer', 'replay'];

function esc(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

function reference(op: OpResult): ImplResult | undefined {
  return op.impls.find((i) => i.kind === 'raw' && i.opsPerSec !== null) ?? op.impls.find((i) => i.kind === 'replay' && i.opsPerSec !== null);
}

export function renderChart(report: BenchReport): string {
  const parts: string[] = [];
  let y = 0;
  const text = (x: number, yy: number, content: string, attrs = ''): void => {
    parts.push(`<text x="${x}" y="${yy}" ${attrs}>${esc(content)}</text>`);
  };
  const x0 = LABEL_W;
  const scale = (v: number) => x0 + ((Math.log2(Math.min(Math.max(v, MIN_SCALE), MAX_SCALE)) - Math.log2(MIN_SCALE)) / Math.log2(MAX_SCALE / MIN_SCALE)) * PLOT_W;

  y += 28;
  text(16, y, 'stowage bench — throughput relative to the raw driver (one statement per call = 1×; log scale)', 'font-size="16" font-weight="bold"');
  y += 18;
  text(
    16,
    y,
    `${report.startedAt} · node ${report.node} · ${report.cpus} CPUs · ${report.settings.concurrency} in flight · median of ${report.settings.rounds}–${report.settings.maxRounds} rounds${report.settings.quick ? ' · BENCH_QUICK' : ''}`,
    'font-size="11" fill="#555"',
  );
  y += 20;
  const legend: [string, string][] = [
    ['stowage', COLORS.stowage],
    ['coalesce:false', COLORS.variant],
    ['raw driver, 1 statement', COLORS.raw],
    ['anchor (pgbench, find by _id)', COLORS.anchor],
    ['peers', COLORS.peer],
    ["replay of stowage's SQL", COLORS.replay],
  ];
  let lx = 16;
  for (const [name, color] of legend) {
    parts.push(`<rect x="${lx}" y="${y - 9}" width="12" height="10" fill="${color}"/>`);
    text(lx + 16, y, name, 'font-size="11"');
    lx += 26 + name.length * 6;
  }
  parts.push(`<line x1="${lx}" y1="${y - 10}" x2="${lx}" y2="${y + 2}" stroke="#dc2626" stroke-width="2"/>`);
  text(lx + 6, y, 'target', 'font-size="11"');
  y += 16;

  for (const backend of report.backends) {
    y += 18;
    text(16, y, `${backend.title} — ${backend.label}`, 'font-size="13" font-weight="bold"');
    y += 8;
    if (backend.error) {
      y += 14;
      text(24, y, backend.error, 'font-size="11" fill="#b91c1c"');
      continue;
    }
    const top = y;
    for (const op of backend.ops) {
      const ref = reference(op);
      const base = ref?.opsPerSec ?? Math.max(...op.impls.map((i) => i.opsPerSec ?? 0), 1);
      const groupTop = y + 6;
      let by = groupTop;
      const impls = [...op.impls].sort((a, b) => KIND_ORDER.indexOf(a.kind) - KIND_ORDER.indexOf(b.kind));
      for (const impl of impls) {
        if (impl.opsPerSec !== null) {
          const ratio = impl.opsPerSec / base;
          const width = Math.max(1, scale(ratio) - x0);
          parts.push(`<rect x="${x0}" y="${by}" width="${width.toFixed(1)}" height="${BAR_H}" fill="${COLORS[impl.kind]}"><title>${esc(`${impl.name}: ${formatInt(impl.opsPerSec)} ops/s (${ratioText(ratio)}× ${ref?.name ?? 'the fastest'})`)}</title></rect>`);
          text(scale(ratio) + 4, by + BAR_H - 1, `${formatInt(impl.opsPerSec)}/s ${impl.kind === 'stowage' ? '' : impl.name}`, 'font-size="9" fill="#333"');
          if (impl.kind === 'stowage') {
            for (const r of op.ratios) {
              const other = op.impls.find((i) => i.name === r.impl);
              if (r.target === null || other?.opsPerSec == null) continue;
              const at = scale((other.opsPerSec * r.target) / base);
              parts.push(`<line x1="${at.toFixed(1)}" y1="${by - 1}" x2="${at.toFixed(1)}" y2="${by + BAR_H + 1}" stroke="#dc2626" stroke-width="2"><title>${esc(`target ${r.target}× ${r.impl}`)}</title></line>`);
            }
          }
        } else {
          text(x0 + 4, by + BAR_H - 1, `${impl.name}: ${impl.error ? 'error' : 'not measured'}`, 'font-size="9" fill="#b91c1c"');
        }
        by += BAR_H + BAR_GAP;
      }
      const failed = op.checks.some((c) => !c.pass);
      const mid = (groupTop + by) / 2 + 4;
      text(16, mid, op.op, 'font-size="11"');
      const shown = op.ratios.filter((r) => r.target !== null && r.ratio !== null).map((r) => `${ratioText(r.ratio!)}× ${r.kind === 'anchor' ? 'anchor' : r.kind}`);
      text(WIDTH - 150, mid, `${op.checks.length === 0 ? '' : failed ? '✗' : '✓'} ${shown.slice(0, 2).join(', ')}`, `font-size="10" fill="${failed ? '#b91c1c' : '#15803d'}"`);
      y = by + GROUP_GAP - 6;
    }
    if (backend.ops.length > 0) {
      parts.push(`<line x1="${scale(1)}" y1="${top}" x2="${scale(1)}" y2="${y}" stroke="#6b7280" stroke-width="1"/>`);
      parts.push(`<line x1="${x0}" y1="${top}" x2="${x0}" y2="${y}" stroke="#111"/>`);
      y += 12;
      for (const tick of [0.125, 0.25, 0.5, 1, 2, 4, 8, 16]) text(scale(tick) - 6, y, `${tick}×`, 'font-size="9" fill="#555"');
    }
    for (const section of backend.sections) {
      if (section.error) {
        y += 15;
        text(24, y, `${section.id}: failed: ${section.error.slice(0, 120)}`, 'font-size="11" fill="#b91c1c"');
      }
      for (const row of section.rows) {
        if (!row.check) continue;
        y += 15;
        const mark = row.check.pass ? '✓' : '✗';
        text(24, y, `${mark} ${row.check.what}: ${row.check.actual} (target ${row.check.target})`.slice(0, 150), `font-size="11" fill="${row.check.pass ? '#111' : '#b91c1c'}"`);
      }
    }
  }
  y += 20;
  const summary = report.unmet.length === 0 ? `All ${report.checked} targets met.` : `${report.unmet.length} of ${report.checked} targets unmet: see the printed summary / results.json.`;
  text(16, y, summary, `font-size="12" font-weight="bold" fill="${report.unmet.length === 0 ? '#15803d' : '#b91c1c'}"`);
  y += 16;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${y}" viewBox="0 0 ${WIDTH} ${y}" font-family="ui-sans-serif, system-ui, sans-serif">`,
    `<rect width="100%" height="100%" fill="#fff"/>`,
    ...parts,
    '</svg>',
    '',
  ].join('\n');
}

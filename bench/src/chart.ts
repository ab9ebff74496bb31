/**
 * A hand-written SVG a person can glance at: per backend, per operation, throughput bars
 * scaled to the raw driver running the same statements (raw = 1.0). The dashed line is the
 * 0.90 target; a stowage bar that ends left of it missed. Peers are drawn on the same scale.
 */
import { HANDOFF_P50_TARGET_MS } from './handoff.ts';
import { RAW_RATIO_TARGET } from './run-op.ts';
import type { BenchReport } from './report.ts';
import { formatBytes, formatInt, ratioText } from './stats.ts';

const WIDTH = 1000;
const LABEL_W = 230;
const PLOT_W = 520;
const MAX_SCALE = 1.5;
const BAR_H = 9;
const BAR_GAP = 2;
const GROUP_GAP = 9;
const COLORS: Record<string, string> = { stowage: '#2563eb', raw: '#9ca3af' };
const PEER_COLORS = ['#f59e0b', '#10b981', '#a855f7'];

function esc(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

export function renderChart(report: BenchReport): string {
  const parts: string[] = [];
  let y = 0;
  const text = (x: number, yy: number, content: string, attrs = ''): void => {
    parts.push(`<text x="${x}" y="${yy}" ${attrs}>${esc(content)}</text>`);
  };
  const x0 = LABEL_W;
  const scale = (v: number) => x0 + (Math.min(v, MAX_SCALE) / MAX_SCALE) * PLOT_W;

  y += 28;
  text(16, y, 'stowage bench — throughput relative to the raw driver running the same statements (raw = 1.0)', 'font-size="16" font-weight="bold"');
  y += 18;
  text(
    16,
    y,
    `${report.startedAt} · node ${report.node} · ${report.cpus} CPUs · ${report.settings.concurrency} in flight · median of ${report.settings.rounds}–${report.settings.maxRounds} rounds${report.settings.quick ? ' · BENCH_QUICK' : ''}`,
    'font-size="11" fill="#555"',
  );
  y += 20;
  // legend
  const legend: [string, string][] = [
    ['stowage', COLORS.stowage!],
    ['raw driver (same statements)', COLORS.raw!],
    ['peer libraries', PEER_COLORS[0]!],
  ];
  let lx = 16;
  for (const [name, color] of legend) {
    parts.push(`<rect x="${lx}" y="${y - 9}" width="12" height="10" fill="${color}"/>`);
    text(lx + 16, y, name, 'font-size="11"');
    lx += 30 + name.length * 6.5;
  }
  parts.push(`<line x1="${lx}" y1="${y - 9}" x2="${lx}" y2="${y + 1}" stroke="#dc2626" stroke-dasharray="3,2"/>`);
  text(lx + 6, y, `target stowage ≥ ${RAW_RATIO_TARGET.toFixed(2)} × raw`, 'font-size="11"');
  y += 16;

  for (const backend of report.backends) {
    y += 18;
    text(16, y, `${backend.title} — ${backend.label}`, 'font-size="13" font-weight="bold"');
    y += 8;
    if (backend.error || backend.ops.length === 0) {
      y += 14;
      text(24, y, backend.error ?? backend.stowageError ?? 'nothing measured', 'font-size="11" fill="#b91c1c"');
      continue;
    }
    const top = y;
    for (const op of backend.ops) {
      const raw = op.impls.find((i) => i.kind === 'raw');
      const measured = op.impls.filter((i) => i.opsPerSec !== null);
      const reference = raw?.opsPerSec ?? Math.max(...measured.map((i) => i.opsPerSec!), 1);
      const groupTop = y + 6;
      let by = groupTop;
      let peerIndex = 0;
      for (const impl of op.impls) {
        const color = impl.kind === 'peer' ? PEER_COLORS[peerIndex++ % PEER_COLORS.length]! : COLORS[impl.kind]!;
        if (impl.opsPerSec !== null) {
          // stowage's bar is the ratio the verdict uses (paired rounds), so it agrees with the target line
          const ratio = impl.kind === 'stowage' && raw && op.rawRatio !== null ? op.rawRatio : impl.opsPerSec / reference;
          parts.push(`<rect x="${x0}" y="${by}" width="${(scale(ratio) - x0).toFixed(1)}" height="${BAR_H}" fill="${color}"><title>${esc(`${impl.name}: ${formatInt(impl.opsPerSec)} ops/s (${ratioText(ratio)} × raw)`)}</title></rect>`);
          if (ratio > MAX_SCALE) text(scale(MAX_SCALE) - 16, by + BAR_H - 1, '»', 'font-size="10" fill="#fff"');
          text(scale(ratio) + 4, by + BAR_H - 1, `${formatInt(impl.opsPerSec)}/s ${impl.kind === 'stowage' ? '' : impl.name}`, 'font-size="9" fill="#333"');
        } else {
          text(x0 + 4, by + BAR_H - 1, `${impl.name}: ${impl.error ? 'error' : 'not measured'}`, 'font-size="9" fill="#b91c1c"');
        }
        by += BAR_H + BAR_GAP;
      }
      const failed = op.checks.some((c) => !c.pass);
      const mid = (groupTop + by) / 2 + 4;
      text(16, mid, op.op, 'font-size="11"');
      const verdict = op.checks.length === 0 ? '' : failed ? '✗' : '✓';
      text(WIDTH - 125, mid, `${verdict} ${op.rawRatio === null ? '' : `${ratioText(op.rawRatio)}× raw`}`, `font-size="11" fill="${failed ? '#b91c1c' : '#15803d'}"`);
      const peerMiss = op.peerRatios.find((p) => p.target !== null && p.ratio !== null && p.ratio < p.target);
      if (peerMiss) text(WIDTH - 125, mid + 12, `${ratioText(peerMiss.ratio!)}× ${peerMiss.peer}`, 'font-size="9" fill="#b91c1c"');
      y = by + GROUP_GAP - 6;
    }
    // axis lines over the whole panel
    parts.push(`<line x1="${scale(1)}" y1="${top}" x2="${scale(1)}" y2="${y}" stroke="#6b7280" stroke-width="1"/>`);
    parts.push(`<line x1="${scale(RAW_RATIO_TARGET)}" y1="${top}" x2="${scale(RAW_RATIO_TARGET)}" y2="${y}" stroke="#dc2626" stroke-dasharray="3,2"/>`);
    parts.push(`<line x1="${x0}" y1="${top}" x2="${x0}" y2="${y}" stroke="#111"/>`);
    y += 12;
    for (const tick of [0, 0.5, 1, 1.5]) text(scale(tick) - 6, y, `${tick}×`, 'font-size="9" fill="#555"');
    for (const h of backend.handoff) {
      y += 15;
      const result = h.unavailable
        ? `n/a (${h.unavailable})`
        : h.error
          ? `error: ${h.error}`
          : `p50 ${h.p50Ms!.toFixed(1)} ms, p99 ${h.p99Ms!.toFixed(1)} ms${h.pass === null ? '' : h.pass ? ` ✓ (< ${HANDOFF_P50_TARGET_MS} ms)` : ` ✗ (target < ${HANDOFF_P50_TARGET_MS} ms)`}`;
      text(24, y, `lock hand-off, ${h.waiters} waiters, ${h.mode}: ${result}`, `font-size="11" fill="${h.pass === false ? '#b91c1c' : '#111'}"`);
    }
    if (backend.memory) {
      const m = backend.memory;
      y += 15;
      const result = m.error ? `error: ${m.error}` : `${m.slopeBytesPerOp!.toFixed(2)} B/op, fitted ${formatBytes(m.fittedGrowthBytes!)} over ${formatInt(m.ops)} ops ${m.pass ? '✓' : '✗'}`;
      text(24, y, `heap growth: ${result}`, `font-size="11" fill="${m.pass === false ? '#b91c1c' : '#111'}"`);
    }
  }
  y += 20;
  const summary = report.unmet.length === 0 ? `All ${report.checked} targets met.` : `${report.unmet.length} unmet target(s): see the printed summary / results.json.`;
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

/**
 * p99 against the offered rate, one panel per route, one line per implementation, on a log
 * scale of milliseconds with the held bound drawn across: where a line crosses the bound is
 * the rate that implementation holds. Unanswered (infinite) p99s are drawn at the top edge.
 */
import type { ImplName } from './impls.ts';
import type { OpenLoopSetup, Point } from './section.ts';

const PANEL_W = 460;
const PANEL_H = 260;
const MARGIN = { left: 56, right: 16, top: 28, bottom: 40 };
const MIN_MS = 0.5;
const MAX_MS = 5_000;
const COLORS: Record<ImplName, string> = {
  stowage: '#2563eb',
  'raw pg, prepared': '#111827',
  'raw pg, unnamed': '#6b7280',
  '@keyv/postgres': '#f59e0b',
  'raw driver': '#111827',
};

export function renderOpenLoopChart(setup: OpenLoopSetup, points: Point[], heldMs: number): string {
  const width = setup.routes.length * (PANEL_W + MARGIN.left + MARGIN.right);
  const height = PANEL_H + MARGIN.top + MARGIN.bottom + 20 * setup.impls.length;
  const y = (value: number): number => {
    const clamped = Math.min(MAX_MS, Math.max(MIN_MS, Number.isFinite(value) ? value : MAX_MS));
    return MARGIN.top + PANEL_H * (1 - Math.log(clamped / MIN_MS) / Math.log(MAX_MS / MIN_MS));
  };
  const parts = [`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" font-family="sans-serif" font-size="11">`];
  setup.routes.forEach((spec, index) => {
    const left = index * (PANEL_W + MARGIN.left + MARGIN.right) + MARGIN.left;
    const maxRate = Math.max(...spec.rates);
    const x = (rate: number): number => left + (PANEL_W * rate) / maxRate;
    parts.push(`<text x="${left}" y="16" font-weight="bold">${spec.title} (${setup.id}): p99 ms against offered requests/s</text>`);
    parts.push(`<rect x="${left}" y="${MARGIN.top}" width="${PANEL_W}" height="${PANEL_H}" fill="none" stroke="#d1d5db"/>`);
    for (const tick of [1, 10, 100, 1_000]) {
      parts.push(`<text x="${left - 6}" y="${y(tick) + 4}" text-anchor="end">${tick}</text>`);
      parts.push(`<line x1="${left}" x2="${left + PANEL_W}" y1="${y(tick)}" y2="${y(tick)}" stroke="#f3f4f6"/>`);
    }
    parts.push(`<line x1="${left}" x2="${left + PANEL_W}" y1="${y(heldMs)}" y2="${y(heldMs)}" stroke="#dc2626" stroke-dasharray="4 3"/>`);
    for (const rate of spec.rates) parts.push(`<text x="${x(rate)}" y="${MARGIN.top + PANEL_H + 14}" text-anchor="middle">${rate >= 1000 ? `${rate / 1000}k` : rate}</text>`);
    for (const impl of setup.impls) {
      const line = points.filter((p) => p.route === spec.route && p.impl === impl).sort((a, b) => a.offered - b.offered);
      if (line.length === 0) continue;
      const path = line.map((p, i) => `${i === 0 ? 'M' : 'L'}${x(p.offered).toFixed(1)},${y(p.p99).toFixed(1)}`).join(' ');
      parts.push(`<path d="${path}" fill="none" stroke="${COLORS[impl]}" stroke-width="2"/>`);
    }
    setup.impls.forEach((impl, i) => {
      const top = MARGIN.top + PANEL_H + MARGIN.bottom + 20 * i;
      parts.push(`<rect x="${left}" y="${top - 9}" width="14" height="4" fill="${COLORS[impl]}"/><text x="${left + 20}" y="${top - 4}">${impl}</text>`);
    });
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

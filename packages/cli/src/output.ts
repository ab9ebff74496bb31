import { redact } from './redact.js';

/** A column of a table for people: its title and how a row shows in it. */
export interface Column<T> {
  title: string;
  value: (row: T) => string;
}

/** Rows as aligned columns (no colours, no box drawing: it survives pipes, logs and `less`). */
export function table<T>(rows: readonly T[], columns: readonly Column<T>[]): string {
  const cells = rows.map((row) => columns.map((column) => oneLine(column.value(row))));
  const widths = columns.map((column, i) => Math.max(column.title.length, ...cells.map((line) => line[i]!.length)));
  const format = (line: string[]) => line.map((cell, i) => (i === line.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ').trimEnd();
  return [format(columns.map((column) => column.title)), ...cells.map(format)].join('\n');
}

/** One line of printable text: control characters (a U+0000 in a lease key) show as `\u0000`. */
function oneLine(text: string): string {
  // eslint-disable-next-line no-control-regex
  const flat = text.replace(/[\r\n\t]+/g, ' ').replace(/[\u0000-\u001f\u007f]/g, (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, '0')}`);
  return flat.length > 60 ? `${flat.slice(0, 57)}...` : flat;
}

/** `1h 2m`, `45s`, `850ms`; negative durations read `-3s`. */
export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '-';
  const sign = ms < 0 ? '-' : '';
  let rest = Math.abs(Math.round(ms));
  if (rest < 1000) return `${sign}${rest}ms`;
  rest = Math.floor(rest / 1000);
  const parts: string[] = [];
  for (const [unit, size] of [['d', 86_400], ['h', 3600], ['m', 60], ['s', 1]] as const) {
    if (rest >= size) {
      parts.push(`${Math.floor(rest / size)}${unit}`);
      rest %= size;
    }
    if (parts.length === 2) break;
  }
  return sign + parts.join(' ');
}

/** `30s`, `10m`, `2h`, `7d`, `500ms` or a plain number of ms -> milliseconds; `undefined` when it is none of these. */
export function parseDuration(text: string): number | undefined {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(text.trim());
  if (!match) return undefined;
  const factor = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[(match[2] ?? 'ms') as 'ms'];
  return Number(match[1]) * factor;
}

/** Writes to stdout, passwords removed. */
export function print(text: string): void {
  process.stdout.write(`${redact(text)}\n`);
}

export function printError(text: string): void {
  process.stderr.write(`${redact(text)}\n`);
}

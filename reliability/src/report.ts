/**
 * Results and the summary table. A check adds rows; each row is one measured number and,
 * when it is an invariant, what it must be. `info` rows carry context (how much load ran,
 * how long recovery took) and never fail the run.
 */

export type Verdict = 'PASS' | 'FAIL' | 'info' | 'n/a';

export interface Row {
  check: string;
  measure: string;
  value: string;
  required: string;
  verdict: Verdict;
}

export class BackendReport {
  readonly rows: Row[] = [];
  /** Failure details printed under the table (which corpus case, which error). */
  readonly notes: string[] = [];
  readonly backend: string;
  readonly label: string;

  constructor(backend: string, label: string) {
    this.backend = backend;
    this.label = label;
  }

  /** An invariant: `ok` decides PASS or FAIL. */
  expect(check: string, measure: string, value: number | string, required: string, ok: boolean): boolean {
    this.rows.push({ check, measure, value: String(value), required, verdict: ok ? 'PASS' : 'FAIL' });
    return ok;
  }

  /** A number that gives context and is not judged. */
  info(check: string, measure: string, value: number | string): void {
    this.rows.push({ check, measure, value: String(value), required: '', verdict: 'info' });
  }

  /** A check that does not apply to this backend, with the reason. */
  notApplicable(check: string, reason: string): void {
    this.rows.push({ check, measure: reason, value: '', required: '', verdict: 'n/a' });
  }

  /** A check that could not run to completion: always a failure. */
  crashed(check: string, error: unknown): void {
    this.rows.push({ check, measure: 'check crashed', value: describeError(error), required: 'runs to the end', verdict: 'FAIL' });
  }

  note(text: string): void {
    this.notes.push(text);
  }

  get failed(): boolean {
    return this.rows.some((row) => row.verdict === 'FAIL');
  }

  failedChecks(): string[] {
    return [...new Set(this.rows.filter((row) => row.verdict === 'FAIL').map((row) => row.check))];
  }
}

export function describeError(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return `${error.name}${code === undefined ? '' : ` ${String(code)}`}: ${error.message.split('\n')[0]}`;
  }
  return String(error);
}

const HEADERS = ['check', 'measure', 'value', 'required', 'result'] as const;
const MAX_CELL = 72;

function cell(text: string): string {
  return text.length > MAX_CELL ? `${text.slice(0, MAX_CELL - 1)}…` : text;
}

/** A fixed-width text table (plain ASCII so CI logs and READMEs show it unchanged). */
export function renderTable(report: BackendReport): string {
  const lines = report.rows.map((row) => [row.check, row.measure, row.value, row.required, row.verdict].map(cell));
  const widths = HEADERS.map((header, column) => Math.max(header.length, ...lines.map((line) => line[column]!.length)));
  const format = (line: readonly string[]) => `| ${line.map((text, column) => text.padEnd(widths[column]!)).join(' | ')} |`;
  const rule = `|${widths.map((width) => '-'.repeat(width + 2)).join('|')}|`;
  let previousCheck = '';
  const body = lines.map((line) => {
    // Show each check's name once, on its first row.
    const shown = line[0] === previousCheck ? ['', ...line.slice(1)] : line;
    previousCheck = line[0]!;
    return format(shown);
  });
  return [`${report.backend} — ${report.label}`, format(HEADERS), rule, ...body].join('\n');
}

/** One line per backend and check: the overview printed last. */
export function renderOverview(reports: readonly BackendReport[], checks: readonly string[]): string {
  const verdictOf = (report: BackendReport, check: string): string => {
    const rows = report.rows.filter((row) => row.check === check);
    // A backend that was found and loaded has no 'backend' row.
    if (rows.length === 0) return check === 'backend' && report.backend !== 'self-check' ? 'found' : '-';
    if (rows.some((row) => row.verdict === 'FAIL')) return 'FAIL';
    if (rows.every((row) => row.verdict === 'n/a')) return 'n/a';
    return 'PASS';
  };
  const header = ['backend', ...checks];
  const lines = reports.map((report) => [report.backend, ...checks.map((check) => verdictOf(report, check))]);
  const widths = header.map((text, column) => Math.max(text.length, ...lines.map((line) => line[column]!.length)));
  const format = (line: readonly string[]) => `| ${line.map((text, column) => text.padEnd(widths[column]!)).join(' | ')} |`;
  const rule = `|${widths.map((width) => '-'.repeat(width + 2)).join('|')}|`;
  return [format(header), rule, ...lines.map(format)].join('\n');
}

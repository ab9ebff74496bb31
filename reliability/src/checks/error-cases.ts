/**
 * What the errors check (and least privilege) judge a failure with: a case that produces it,
 * the code and driver cause it must carry, and the verdict on what came back. The
 * backend-specific cases are in errors-postgres.ts and errors-mongo.ts; errors.ts runs them.
 */
import { isStowageError, StowageError, type StowageErrorCode } from '@stowage/core';
import { describeError, type BackendReport } from '../report.ts';
import type { BackendName } from '../backends/types.ts';

export interface ErrorCase<C> {
  /** The failure, as the row names it. */
  what: string;
  code: StowageErrorCode;
  /**
   * The driver error expected as `cause`: its SQLSTATE or Node/driver code, `'any'` for a
   * driver error whose code varies, or `null` where stowage refuses before calling the driver.
   */
  cause: string | null;
  only: readonly BackendName[];
  /** Produces the failure; must reject. Throw {@link SetupFailed} when the scene could not be set up. */
  produce(context: C): Promise<unknown>;
}

/** The case could not be set up (not a verdict on the error mapping). */
export class SetupFailed extends Error {}

export type Verdict = { ok: true; got: string } | { ok: false; got: string; kind: 'raw' | 'wrong code' | 'wrong cause' | 'not produced' | 'set-up' };

function causeCode(error: StowageError): string | undefined {
  const code = (error.cause as { code?: unknown } | undefined)?.code;
  return code === undefined ? undefined : String(code);
}

/** What a case's rejection was, judged against what it must be. */
export function judge(expected: Pick<ErrorCase<unknown>, 'code' | 'cause'>, outcome: { rejected: boolean; error?: unknown }): Verdict {
  if (!outcome.rejected) return { ok: false, got: 'the call succeeded', kind: 'not produced' };
  const error = outcome.error;
  if (error instanceof SetupFailed) return { ok: false, got: `set-up failed: ${error.message}`, kind: 'set-up' };
  if (!isStowageError(error)) return { ok: false, got: `raw ${describeError(error)}`, kind: 'raw' };
  const cause = error.cause;
  const code = causeCode(error);
  const got = cause === undefined ? error.code : `${error.code} ← ${code ?? (cause instanceof Error ? cause.name : 'cause')}`;
  if (error.code !== expected.code) return { ok: false, got, kind: 'wrong code' };
  if (expected.cause === null) return { ok: true, got };
  const driverCause = cause !== undefined && cause !== null && !(cause instanceof StowageError);
  if (!driverCause || (expected.cause !== 'any' && code !== expected.cause)) return { ok: false, got, kind: 'wrong cause' };
  return { ok: true, got };
}

export function requiredText(expected: Pick<ErrorCase<unknown>, 'code' | 'cause'>): string {
  if (expected.cause === null) return expected.code;
  return `${expected.code} ← ${expected.cause === 'any' ? 'driver error' : expected.cause}`;
}

export async function runCases<C>(cases: readonly ErrorCase<C>[], context: C, backend: BackendName, report: BackendReport): Promise<void> {
  const check = 'errors';
  let raw = 0;
  let wrongCode = 0;
  let ran = 0;
  for (const errorCase of cases) {
    if (!errorCase.only.includes(backend)) continue;
    ran += 1;
    const outcome = await errorCase.produce(context).then(
      () => ({ rejected: false }),
      (error: unknown) => ({ rejected: true, error }),
    );
    const verdict = judge(errorCase, outcome);
    report.expect(check, errorCase.what, verdict.got, requiredText(errorCase), verdict.ok);
    if (!verdict.ok) {
      if (verdict.kind === 'raw') raw += 1;
      if (verdict.kind === 'wrong code') wrongCode += 1;
      const message = 'error' in outcome && outcome.error instanceof Error ? outcome.error.message : verdict.got;
      report.note(`errors ${errorCase.what}: ${verdict.kind}: ${message.split('\n')[0]}`);
    }
  }
  report.expect(check, `raw errors (not a StowageError), of ${ran} cases`, raw, '= 0', raw === 0);
  report.expect(check, 'wrong codes', wrongCode, '= 0', wrongCode === 0);
}

import type { ResumeState, ResumeStateEntry } from '../contracts/snapshots.js';
import type { JsonValue } from '../json.js';

/*
 * awaitly's `ResumeState` (the step results a `createResumeStateCollector()` gathers) holds a
 * `Map` and `Error` causes, which JSON cannot carry. awaitly defines a JSON form for it,
 * `SerializedResumeState` (`{ kind: "ResumeState", steps: [[key, stepResult], …] }`), and says
 * adapters may accept a `ResumeState` in `save` and return one from `load`. These functions
 * convert between the two exactly as awaitly's `serializeResumeState` /
 * `deserializeResumeState` do, so a store never needs awaitly at run time and what it writes
 * reads back in awaitly's own adapters.
 */

/** awaitly's `SerializedResumeState`: the form a `ResumeState` is stored in. */
export interface SerializedResumeState {
  kind: 'ResumeState';
  steps: [string, SerializedStepResult][];
}

type SerializedStepResult =
  | { ok: true; value: unknown }
  | { ok: false; error: unknown; cause: SerializedCause; meta: { origin: 'result' | 'throw' } };

type SerializedCause =
  | { type: 'error'; name: string; message: string; stack?: string; cause?: SerializedCause }
  | { type: 'thrown'; originalType: string; stringRepresentation: string; value?: JsonValue; truncated?: true };

/** awaitly cuts the text of a thrown non-Error at this many characters. */
const MAX_THROWN_TEXT = 1000;

/** A runtime `ResumeState`: an object whose `steps` is a `Map`. */
export function isResumeState(value: unknown): value is ResumeState {
  return typeof value === 'object' && value !== null && (value as { steps?: unknown }).steps instanceof Map;
}

export function isSerializedResumeState(value: unknown): value is SerializedResumeState {
  return (
    typeof value === 'object' &&
    value !== null &&
    (value as { kind?: unknown }).kind === 'ResumeState' &&
    Array.isArray((value as { steps?: unknown }).steps)
  );
}

export function serializeResumeState(state: ResumeState): SerializedResumeState {
  const steps: [string, SerializedStepResult][] = [];
  for (const [key, entry] of state.steps) steps.push([key, serializeEntry(entry)]);
  return { kind: 'ResumeState', steps };
}

export function deserializeResumeState(serialized: SerializedResumeState): ResumeState {
  const steps = new Map<string, ResumeStateEntry>();
  for (const [key, step] of serialized.steps) steps.set(key, deserializeEntry(step));
  return { steps };
}

function serializeEntry({ result, meta }: ResumeStateEntry): SerializedStepResult {
  if (result.ok) return { ok: true, value: result.value };
  // awaitly wraps a replayed failure's cause as { __cachedMeta, originalCause, meta }.
  const cause = isCachedMeta(result.cause) ? result.cause.originalCause : result.cause;
  const origin = (meta as { origin?: unknown } | undefined)?.origin === 'throw' ? 'throw' : 'result';
  return { ok: false, error: result.error, cause: cause instanceof Error ? serializeError(cause) : serializeThrown(cause), meta: { origin } };
}

function deserializeEntry(step: SerializedStepResult): ResumeStateEntry {
  if (step.ok) return { result: { ok: true, value: step.value } };
  const cause = deserializeCause(step.cause);
  const meta = step.meta?.origin === 'throw' ? { origin: 'throw' as const, thrown: cause } : { origin: 'result' as const, resultCause: cause };
  return { result: { ok: false, error: step.error, cause: { __cachedMeta: true, originalCause: cause, meta } }, meta };
}

function isCachedMeta(cause: unknown): cause is { originalCause: unknown } {
  return typeof cause === 'object' && cause !== null && (cause as { __cachedMeta?: unknown }).__cachedMeta === true;
}

function serializeError(error: Error): SerializedCause {
  const serialized: SerializedCause = { type: 'error', name: error.name, message: error.message };
  if (error.stack) serialized.stack = error.stack;
  if (error.cause !== undefined) serialized.cause = error.cause instanceof Error ? serializeError(error.cause) : serializeThrown(error.cause);
  return serialized;
}

function serializeThrown(thrown: unknown): SerializedCause {
  let text: string;
  let truncated = false;
  try {
    text = String(thrown);
    if (text.length > MAX_THROWN_TEXT) {
      text = text.slice(0, MAX_THROWN_TEXT);
      truncated = true;
    }
  } catch {
    text = '[unable to convert to string]';
  }
  const originalType =
    thrown === null ? 'null' : typeof thrown === 'object' ? ((thrown as object).constructor?.name ?? 'Object') : typeof thrown;
  let value: JsonValue | undefined;
  try {
    const json = JSON.stringify(thrown);
    if (json !== undefined) value = JSON.parse(json) as JsonValue;
  } catch {
    // not representable as JSON: the text stands in for it
  }
  const serialized: SerializedCause = { type: 'thrown', originalType, stringRepresentation: text };
  if (value !== undefined) serialized.value = value;
  if (truncated) serialized.truncated = true;
  return serialized;
}

function deserializeCause(cause: SerializedCause): unknown {
  if (cause.type === 'error') {
    const error = new Error(cause.message);
    error.name = cause.name;
    if (cause.stack) error.stack = cause.stack;
    if (cause.cause) error.cause = deserializeCause(cause.cause);
    return error;
  }
  return cause.value !== undefined ? cause.value : cause.stringRepresentation;
}

import { StowageError } from '../errors.js';
import { assertValidDuration, describeValue } from '../keys.js';
import type { JsonObject } from '../json.js';
import type {
  BackoffOptions,
  ProcessDefinition,
  ProcessDefinitionInput,
  RetryOptions,
  StateDefinition,
} from '../contracts/process.js';
import { assertProcessName, assertStateName } from './validation.js';

export const DEFAULT_LEASE = 30_000;
export const DEFAULT_MAX_ATTEMPTS = 5;
export const DEFAULT_DEAD_LETTER_STATE = 'failed';

/**
 * Validates a process definition and fills in its defaults. State names are inferred, so
 * handlers can only return states the process has:
 *
 * ```ts
 * const devices = defineProcess({
 *   name: 'device-downgrade',
 *   initial: 'started',
 *   states: {
 *     started: { handler: async () => 'downloading' },
 *     downloading: { concurrency: 4, handler: async (item, { idempotencyKey }) => ({ to: 'done', data: { ...item.data, done: true } }) },
 *   },
 *   terminal: ['done', 'failed'],
 * });
 * ```
 *
 * Throws `E_INVALID_OPTION` for a definition that cannot run (unknown initial state, a
 * dead-letter state that is not terminal, a state both active and terminal, …).
 */
export function defineProcess<
  TData extends JsonObject = JsonObject,
  const TActive extends string = string,
  const TTerminal extends string = string,
>(input: ProcessDefinitionInput<TData, TActive, TTerminal>): ProcessDefinition<TData, TActive, TTerminal> {
  const invalid = (message: string): never => {
    throw new StowageError('E_INVALID_OPTION', `process ${describeValue(input?.name)}: ${message}`);
  };
  if (input === null || typeof input !== 'object') invalid('the definition must be an object');
  assertProcessName(input.name);
  if (input.states === null || typeof input.states !== 'object') invalid('states must be an object');
  const activeStates = Object.keys(input.states) as TActive[];
  if (activeStates.length === 0) invalid('it needs at least one state with a handler');
  if (!Array.isArray(input.terminal) || input.terminal.length === 0) invalid('terminal must list at least one state');

  const terminal = [...new Set(input.terminal)];
  for (const state of [...activeStates, ...terminal]) assertStateName(state);
  for (const state of terminal) {
    if ((activeStates as string[]).includes(state)) invalid(`"${state}" cannot be both terminal and have a handler`);
  }
  if (!(activeStates as string[]).includes(input.initial)) invalid(`initial state ${describeValue(input.initial)} has no handler`);
  const deadLetter = (input.deadLetter ?? DEFAULT_DEAD_LETTER_STATE) as TTerminal;
  if (!terminal.includes(deadLetter)) {
    invalid(`dead-letter state "${deadLetter}" must be one of the terminal states (${terminal.join(', ')})`);
  }

  const lease = input.lease ?? DEFAULT_LEASE;
  assertValidDuration(lease, 'lease');
  const retry = input.retry ?? {};
  assertRetryOptions(retry, 'retry');
  for (const state of activeStates) {
    const definition = (input.states as Record<string, StateDefinition<TData, string>>)[state]!;
    if (definition === null || typeof definition !== 'object' || typeof definition.handler !== 'function') {
      invalid(`state "${state}" needs a handler function`);
    }
    if (definition.concurrency !== undefined) assertConcurrency(definition.concurrency, `states.${state}.concurrency`);
    if (definition.lease !== undefined) assertValidDuration(definition.lease, `states.${state}.lease`);
    if (definition.transactional !== undefined && typeof definition.transactional !== 'boolean') {
      invalid(`states.${state}.transactional must be a boolean`);
    }
    if (definition.retry !== undefined) assertRetryOptions(definition.retry, `states.${state}.retry`);
  }

  return Object.freeze({
    name: input.name,
    initial: input.initial,
    states: input.states as ProcessDefinition<TData, TActive, TTerminal>['states'],
    terminal: Object.freeze(terminal),
    deadLetter,
    retry,
    lease,
    activeStates: Object.freeze(activeStates),
  });
}

export function assertConcurrency(value: unknown, what: string): asserts value is number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1 || value > 1000) {
    throw new StowageError('E_INVALID_OPTION', `${what} must be an integer from 1 to 1000, got ${describeValue(value)}`);
  }
}

function assertRetryOptions(retry: RetryOptions, what: string): void {
  if (retry === null || typeof retry !== 'object') throw new StowageError('E_INVALID_OPTION', `${what} must be an object`);
  const { maxAttempts, backoff } = retry;
  if (maxAttempts !== undefined && (!Number.isSafeInteger(maxAttempts) || maxAttempts < 1)) {
    throw new StowageError('E_INVALID_OPTION', `${what}.maxAttempts must be a positive integer, got ${describeValue(maxAttempts)}`);
  }
  if (backoff === undefined || typeof backoff === 'function') return;
  if (backoff === null || typeof backoff !== 'object') {
    throw new StowageError('E_INVALID_OPTION', `${what}.backoff must be an object or a function`);
  }
  const { initial, factor, max, jitter } = backoff;
  if (initial !== undefined) assertValidDuration(initial, `${what}.backoff.initial`);
  if (max !== undefined) assertValidDuration(max, `${what}.backoff.max`);
  if (factor !== undefined && !(typeof factor === 'number' && Number.isFinite(factor) && factor >= 1)) {
    throw new StowageError('E_INVALID_OPTION', `${what}.backoff.factor must be a number >= 1`);
  }
  if (jitter !== undefined && !(typeof jitter === 'number' && jitter >= 0 && jitter <= 1)) {
    throw new StowageError('E_INVALID_OPTION', `${what}.backoff.jitter must be a number from 0 to 1`);
  }
}

/** The retry policy of one state: the state's own, else the process's, else the defaults. */
export function resolveRetry(definition: ProcessDefinition, state: string): Required<Pick<RetryOptions, 'maxAttempts'>> & {
  delay(attempt: number): number;
} {
  const own = (definition.states as Record<string, StateDefinition<JsonObject, string>>)[state]?.retry;
  const maxAttempts = own?.maxAttempts ?? definition.retry.maxAttempts ?? DEFAULT_MAX_ATTEMPTS;
  const backoff = own?.backoff ?? definition.retry.backoff ?? {};
  return {
    maxAttempts,
    delay: (attempt) => {
      const ms = typeof backoff === 'function' ? backoff(attempt) : exponentialBackoff(backoff, attempt);
      return Number.isFinite(ms) && ms > 0 ? Math.round(ms) : 0;
    },
  };
}

/** `initial * factor^(attempt-1)`, capped at `max`, minus up to `jitter` of it at random. */
export function exponentialBackoff(options: BackoffOptions, attempt: number): number {
  const { initial = 1000, factor = 2, max = 300_000, jitter = 0.2 } = options;
  const base = Math.min(max, initial * factor ** Math.max(0, attempt - 1));
  return base * (1 - jitter * Math.random());
}

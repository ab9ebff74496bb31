import { StowageError } from '../errors.js';
import { assertJsonValue, type JsonObject } from '../json.js';
import { assertValidDuration, assertValidKey, assertValidOwner, describeType, describeValue } from '../keys.js';
import type {
  ClaimRequest,
  CreateItemRequest,
  ExtendLeaseRequest,
  FindClaimableRequest,
  ListItemsRequest,
  ReleaseRequest,
  TransitionRequest,
} from '../contracts/process.js';

/*
 * Input rules every process backend applies, so that memory, Postgres and Mongo reject the
 * same requests with the same codes. Backends call the `assert…Request` function first thing.
 */

const NAME_PATTERN = /^[A-Za-z][A-Za-z0-9_.-]*$/;

/** Process and state names: a letter, then letters, digits, `_`, `.`, `-`; at most 63 characters. */
export function assertProcessName(name: unknown, what = 'process name'): asserts name is string {
  if (typeof name !== 'string' || name.length > 63 || !NAME_PATTERN.test(name)) {
    throw new StowageError(
      'E_INVALID_OPTION',
      `${what} must start with a letter and contain only letters, digits, "_", "." and "-" (at most 63), got ${describeValue(name)}`,
    );
  }
}

export function assertStateName(name: unknown, what = 'state name'): asserts name is string {
  assertProcessName(name, what);
}

/** Worker names follow the same rule with up to 128 characters (room for pod names). */
export function assertWorkerName(name: unknown): asserts name is string {
  if (typeof name !== 'string' || name.length > 128 || !NAME_PATTERN.test(name)) {
    throw new StowageError(
      'E_INVALID_OPTION',
      `worker name must start with a letter and contain only letters, digits, "_", "." and "-" (at most 128), got ${describeValue(name)}`,
    );
  }
}

/** Item ids follow the key rules: non-empty, well-formed, at most 1024 UTF-8 bytes (`E_INVALID_KEY`). */
export function assertItemId(id: unknown): asserts id is string {
  assertValidKey(id, 'item id');
}

export function assertItemData(data: unknown, what = 'data'): asserts data is JsonObject {
  if (data === null || typeof data !== 'object' || Array.isArray(data)) {
    throw new StowageError('E_INVALID_VALUE', `${what} must be a JSON object, got ${describeType(data)}`);
  }
  assertJsonValue(data, what);
}

function assertVersion(version: unknown): asserts version is number {
  if (typeof version !== 'number' || !Number.isSafeInteger(version) || version < 1) {
    throw new StowageError('E_INVALID_OPTION', `version must be a positive integer, got ${describeValue(version)}`);
  }
}

function assertObject(request: unknown, what: string): void {
  if (request === null || typeof request !== 'object') {
    throw new StowageError('E_INVALID_OPTION', `${what} must be an object, got ${describeType(request)}`);
  }
}

export const DEFAULT_ITEM_LIST_LIMIT = 100;
export const MAX_ITEM_LIST_LIMIT = 10_000;

export function assertLimit(limit: unknown): asserts limit is number {
  if (typeof limit !== 'number' || !Number.isSafeInteger(limit) || limit < 1 || limit > MAX_ITEM_LIST_LIMIT) {
    throw new StowageError('E_INVALID_OPTION', `limit must be an integer from 1 to ${MAX_ITEM_LIST_LIMIT}, got ${describeValue(limit)}`);
  }
}

export function assertCreateItemRequest(request: CreateItemRequest): void {
  assertObject(request, 'createItem request');
  assertProcessName(request.process);
  assertItemId(request.id);
  assertStateName(request.state);
  assertItemData(request.data);
}

export function assertListItemsRequest(request: ListItemsRequest): void {
  assertObject(request, 'listItems request');
  assertProcessName(request.process);
  if (request.state !== undefined) assertStateName(request.state);
  if (request.after !== undefined) assertItemId(request.after);
  assertLimit(request.limit);
}

export function assertFindClaimableRequest(request: FindClaimableRequest): void {
  assertObject(request, 'findClaimable request');
  assertProcessName(request.process);
  assertStateName(request.state);
  if (typeof request.includeUnclaimed !== 'boolean') {
    throw new StowageError('E_INVALID_OPTION', 'includeUnclaimed must be a boolean');
  }
  if (request.unclaimedFor !== undefined) assertValidDuration(request.unclaimedFor, 'unclaimedFor');
  assertLimit(request.limit);
}

export function assertClaimRequest(request: ClaimRequest | ExtendLeaseRequest): void {
  assertObject(request, 'claim request');
  assertProcessName(request.process);
  assertItemId(request.itemId);
  if ('state' in request) assertStateName(request.state);
  assertVersion(request.version);
  assertValidOwner(request.owner);
  assertValidDuration(request.lease, 'lease');
}

export function assertReleaseRequest(request: ReleaseRequest): void {
  assertObject(request, 'release request');
  assertProcessName(request.process);
  assertItemId(request.itemId);
  assertVersion(request.version);
  assertValidOwner(request.owner);
  if (typeof request.delay !== 'number' || !Number.isSafeInteger(request.delay) || request.delay < 0) {
    throw new StowageError('E_INVALID_OPTION', `delay must be a non-negative integer number of ms, got ${describeValue(request.delay)}`);
  }
  if (request.error !== undefined && typeof request.error !== 'string') {
    throw new StowageError('E_INVALID_VALUE', 'error must be a string');
  }
}

export function assertTransitionRequest(request: TransitionRequest): void {
  assertObject(request, 'transition request');
  assertProcessName(request.process);
  assertItemId(request.itemId);
  assertStateName(request.from, 'from');
  assertStateName(request.to, 'to');
  if (request.from === request.to) {
    throw new StowageError('E_INVALID_VALUE', `a transition must change the state (from and to are both "${request.from}")`);
  }
  assertVersion(request.version);
  if (request.data !== undefined) assertItemData(request.data);
  if (request.kind !== 'advance' && request.kind !== 'dead-letter') {
    throw new StowageError('E_INVALID_OPTION', `kind must be "advance" or "dead-letter", got ${describeValue(request.kind)}`);
  }
  if (typeof request.key !== 'string' || request.key.length === 0) {
    throw new StowageError('E_INVALID_OPTION', 'key must be a non-empty string');
  }
  if (request.error !== undefined && typeof request.error !== 'string') {
    throw new StowageError('E_INVALID_VALUE', 'error must be a string');
  }
}

/**
 * The idempotency key of one stay of an item in one state: the same across retries and
 * redeliveries of that stay, different for every other. The item id comes last so that ids
 * containing ":" cannot collide.
 */
export function transitionKey(processName: string, state: string, version: number, itemId: string): string {
  return `${processName}:${state}:${version}:${itemId}`;
}

/** Errors stored as `lastError` are cut to this many characters. */
export const MAX_ERROR_LENGTH = 2000;

export function describeError(error: unknown): string {
  // Well-formed and without NUL, so that every database can store it as text.
  const text = (error instanceof Error ? `${error.name}: ${error.message}` : String(error)).toWellFormed().replaceAll('\u0000', '\ufffd');
  return text.length > MAX_ERROR_LENGTH ? `${text.slice(0, MAX_ERROR_LENGTH - 1)}…` : text;
}

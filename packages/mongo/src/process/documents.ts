import type { JsonObject, ProcessItem, TransitionKind, TransitionRecord } from '@stowage/core';

/** One version of one item: the item as it was from `at` on, and the transition that made it. */
export interface ProcessVersionDocument {
  /** `${process}:${version}:${itemId}`: unique, so inserting a version is a compare-and-set. */
  _id: string;
  process: string;
  itemId: string;
  version: number;
  state: string;
  /** The state the item left (null for version 1). */
  from: string | null;
  kind: TransitionKind;
  /** The idempotency key of the handler whose result made this version. */
  key: string | null;
  /** JSON text: any JSON object round-trips exactly, whatever its keys. */
  data: string;
  createdAt: Date;
  /** When the item entered this version (server clock). */
  at: Date;
  /** False once a later version exists. */
  current: boolean;
  attempts: number;
  lastError: string | null;
  /** The error of a dead-letter transition (kept apart from `lastError`, which retries overwrite). */
  error: string | null;
  leaseOwner: string | null;
  leaseUntil: Date | null;
}

/** A claim on a server without atomic updates: the free lease it takes over, named in `_id`. */
export interface ClaimTicketDocument {
  /** `${of}#${previous}#${generation}`. */
  _id: string;
  /** The version `_id` (tickets are deleted when the version is retired). */
  of: string;
  /** The lease taken over: `${owner}@${end in epoch ms}`, or `unclaimed`. */
  previous: string;
  /** 0, or one more than a ticket whose claimer did not finish taking the lease in time. */
  generation: number;
  owner: string;
  at: Date;
  /** Until when this ticket blocks other claimers of the same lease. */
  until: Date;
}

/** The identity of one version: its `_id`, plus the fields of a `{ process, itemId }` shard key. */
export interface VersionKey {
  _id: string;
  process: string;
  itemId: string;
}

export function versionId(processName: string, version: number, itemId: string): string {
  return `${processName}:${version}:${itemId}`;
}

/** The filter for one version. */
export function byVersion(request: { process: string; itemId: string; version: number }): VersionKey {
  return { _id: versionId(request.process, request.version, request.itemId), process: request.process, itemId: request.itemId };
}

export function toItem(document: ProcessVersionDocument): ProcessItem {
  return {
    id: document.itemId,
    state: document.state,
    data: JSON.parse(document.data) as JsonObject,
    version: document.version,
    attempts: document.attempts,
    lastError: document.lastError,
    leaseOwner: document.leaseOwner,
    leaseUntil: document.leaseUntil,
    createdAt: document.createdAt,
    updatedAt: document.at,
  };
}

export function toTransition(document: ProcessVersionDocument): TransitionRecord {
  return {
    itemId: document.itemId,
    from: document.from,
    to: document.state,
    version: document.version,
    kind: document.kind,
    key: document.key,
    error: document.error,
    at: document.at,
  };
}

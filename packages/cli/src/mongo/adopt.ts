import { StowageError } from '@stowage/core';
import type { Document } from 'mongodb';
import type { OpenOptions } from '../model.js';
import type { AdoptionPlanItem } from '../model.js';
import { loadPeer } from '../peers.js';
import type { MongoSession } from './session.js';

/*
 * `stowage adopt` on MongoDB: go-go-scope's collections (the only documents @stowage/mongo
 * converts) and awaitly-mongo's `workflow_state` (used as it is, plus one index). The plan counts the documents
 * and restates the README's conversion; `--apply` runs goGoScopePersistence's own adoption
 * (its `connect()`), with its guarantees: every document checked first, inserts that never
 * overwrite, resumable after a crash.
 */

const SHAPES: Record<string, string> = {
  lock: '{ key: keyPrefix + "lock:" + key, owner, expiresAt } -> { _id: keyPrefix + key, fence: 1, owner, expiresAt }',
  circuitBreaker: '{ key: keyPrefix + "circuit:" + key, state, failureCount, … } -> { _id: keyPrefix + key, state, failureCount, … }',
  cache: '{ key: keyPrefix + "cache:" + key, value, expiresAt } -> { _id: keyPrefix + U+0000 + key, value: richCodec text, expiresAt? }; expired ones dropped',
  idempotency: '{ key, value, expiresAt } -> { _id: keyPrefix + key, status: "completed", value: richCodec text }; expired ones dropped',
  checkpoint: '{ id, taskId, sequence, … } -> { _id: id, taskId, sequence, …, data: richCodec text }',
};

/** The layout names of the plan's items, by which `--apply` knows what to run. */
const AWAITLY_KV = "awaitly-mongo's key-value collection";

export async function adoptionPlan(session: MongoSession): Promise<AdoptionPlanItem[]> {
  const { GO_GO_SCOPE_NAMES } = await loadPeer<typeof import('@stowage/core/go-go-scope')>('@stowage/core/go-go-scope');
  const plan: AdoptionPlanItem[] = [];
  // awaitly-mongo's workflow_state is used as it is: only the newest-first index is added.
  const kv = session.db.collection(session.collections.kv!);
  const kvIndexes: Document[] | null = await kv.listIndexes().toArray().catch(() => null);
  const recent = kvIndexes?.some((index) => JSON.stringify(index.key) === JSON.stringify({ updatedAt: -1, _id: 1 }));
  if (kvIndexes !== null && !recent) {
    plan.push({
      name: session.collections.kv!,
      layout: AWAITLY_KV,
      rows: await kv.estimatedDocumentCount(),
      changes: ['create the index { updatedAt: -1, _id: 1 } (newest-first listings); documents stay as they are (no version reads as 1)'],
    });
  }
  for (const [slot, name] of Object.entries(GO_GO_SCOPE_NAMES)) {
    const collection = session.db.collection(name);
    // go-go-scope's checkpoints have `id`; every other slot's documents have `key`.
    const legacy = slot === 'checkpoint' ? { id: { $exists: true } } : { key: { $exists: true } };
    const documents = await collection.countDocuments(legacy);
    if (documents === 0) continue;
    const indexes: Document[] = await collection.listIndexes().toArray().catch(() => []);
    const changes = [
      ...indexes.filter((index) => index.key?.key !== undefined && index.unique).map((index) => `drop go-go-scope's unique index ${index.name} ({ key: 1 })`),
      ...(slot === 'lock' ? indexes.filter((index) => index.expireAfterSeconds !== undefined).map((index) => `drop the TTL index ${index.name} (it would reset fences)`) : []),
      `convert ${documents} document(s), 500 at a time: ${SHAPES[slot]}`,
    ];
    plan.push({ name, layout: `go-go-scope's ${slot} collection`, rows: documents, changes });
  }
  return plan;
}

export async function adopt(session: MongoSession, options: OpenOptions, plan: AdoptionPlanItem[], progress: (line: string) => void): Promise<void> {
  const { goGoScopePersistence, MongoKeyValueStore } = await loadPeer<typeof import('@stowage/mongo')>('@stowage/mongo');
  for (const item of plan.filter((entry) => entry.layout === AWAITLY_KV)) {
    progress(`${item.name}: creating its index…`);
    const store = new MongoKeyValueStore({ existingDb: session.db, collection: item.name });
    try {
      await store.ready();
    } finally {
      await store.close();
    }
  }
  const goGoScope = plan.filter((entry) => entry.layout !== AWAITLY_KV);
  if (goGoScope.length === 0) return;
  const keyPrefix = options.keyPrefix ?? '';
  progress(`adopting ${goGoScope.map((item) => item.name).join(', ')} with keyPrefix ${JSON.stringify(keyPrefix)}…`);
  const persistence = goGoScopePersistence({ existingDb: session.db }, { keyPrefix });
  try {
    if (typeof persistence.connect !== 'function') throw new StowageError('E_INVALID_OPTION', 'goGoScopePersistence has no connect()');
    await persistence.connect();
  } finally {
    await persistence.close?.();
  }
  progress('done');
}

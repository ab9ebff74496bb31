import type { Document } from 'mongodb';
import type { DoctorOptions, Finding } from '../model.js';
import { loadPeer } from '../peers.js';
import type { MongoSession } from './session.js';
import { privilegeCheck, reason } from './privileges.js';
import { shardKeyCheck } from './shard-keys.js';

/*
 * `stowage doctor` on MongoDB: the URL's read preference and write concern, the topology, the
 * Stable API, shard keys, the user's privileges, the expiry indexes, and go-go-scope documents
 * not adopted yet (the @stowage/mongo README, "Production notes", "Deployments" and
 * "Collections, indexes and documents").
 */

export async function doctor(session: MongoSession, _options: DoctorOptions): Promise<Finding[]> {
  const findings: Finding[] = [];
  const hello = (await session.db.admin().command({ hello: 1 })) as Document;
  const build = (await session.db.admin().command({ buildInfo: 1 }).catch(() => ({}))) as Document;
  const topology = hello.msg === 'isdbgrid' ? 'sharded cluster (mongos)' : hello.setName ? `replica set ${hello.setName}` : 'standalone server';
  findings.push({ severity: 'ok', check: 'connection', message: `MongoDB-wire server ${build.version ?? '(version unknown)'}, ${topology}, database ${session.db.databaseName}` });
  urlFindings(findings, session.url);
  if (!hello.setName && hello.msg !== 'isdbgrid') {
    findings.push({
      severity: 'warn',
      check: 'topology',
      message: 'a standalone server: no transactions, change-stream wake-ups or majority acknowledgement; run a replica set (even a single node)',
    });
  }
  findings.push(await stableApiFinding(session));
  findings.push(...(await shardKeyCheck(session, hello.msg === 'isdbgrid', topology)));
  findings.push(...(await privilegeCheck(session)));
  await indexFindings(findings, session);
  await goGoScopeFindings(findings, session);
  return findings;
}

/**
 * The Stable API: a URL cannot declare one (the driver takes `serverApi` only as a MongoClient
 * option), and stowage needs none; its stores send only Stable API V1 commands, so they also run
 * on a client created with `serverApi: { version: '1', strict: true }` (the Atlas snippet). What
 * is left to tell is whether this server takes such a client: a client of its own says.
 */
async function stableApiFinding(session: MongoSession): Promise<Finding> {
  const { MongoClient } = await loadPeer<typeof import('mongodb')>('mongodb');
  const declared =
    'the URL declares no server API version (a URL cannot: serverApi is a MongoClient option); stowage needs none: its stores send only Stable API V1 commands, strict or not';
  const asked = "a client with serverApi { version: '1', strict: true }";
  const client = new MongoClient(session.url, { appName: 'stowage-cli', serverSelectionTimeoutMS: 10_000, readPreference: 'primary', serverApi: { version: '1', strict: true } });
  try {
    try {
      await client.connect();
      await client.db(session.db.databaseName).command({ ping: 1 });
    } catch (error) {
      return { severity: 'info', check: 'Stable API', message: `${declared}. This server refuses ${asked} (${reason(error)}): create yours without serverApi` };
    }
    // buildInfo is outside V1: a server that enforces strict refuses it (APIStrictError 323).
    const enforced = await client
      .db('admin')
      .command({ buildInfo: 1 })
      .then(() => 'strict not enforced: buildInfo, outside V1, answered')
      .catch((error: unknown) => ((error as { code?: unknown }).code === 323 ? 'strict enforced: buildInfo, outside V1, refused' : `buildInfo: ${reason(error)}`));
    return { severity: 'ok', check: 'Stable API', message: `${declared}. This server takes ${asked} (ping answered; ${enforced})` };
  } finally {
    await client.close().catch(() => undefined);
  }
}

/** The URL's options as the driver reads them (names are case-insensitive). */
function urlFindings(findings: Finding[], url: string): void {
  const query = url.includes('?') ? new URLSearchParams(url.slice(url.indexOf('?') + 1)) : new URLSearchParams();
  const option = (name: string) => [...query].find(([key]) => key.toLowerCase() === name.toLowerCase())?.[1];
  const readPreference = option('readPreference');
  if (readPreference !== undefined && readPreference !== 'primary') {
    findings.push({
      severity: 'error',
      check: 'readPreference',
      message:
        `readPreference=${readPreference}: the stores read their own promises from the primary, but a transaction you run with them ` +
        "(withTransaction, runOnce) must read the primary and fails, and every other read of this client may see a stale lock, version or result; drop it from the URL (or set readPreference=primary)",
    });
  }
  const w = option('w');
  if (w !== undefined && w !== 'majority' && Number(w) < 2) {
    findings.push({
      severity: 'error',
      check: 'writeConcern',
      message:
        `w=${w}: a write acknowledged by one member can be rolled back at a failover. Stores ask for majority themselves, but the cache ` +
        "and every transaction you commit with a store (withTransaction, runOnce) use the client's: versions, fences and idempotency results could go back; use w=majority",
    });
  }
  const journal = option('journal');
  if (journal === 'false') findings.push({ severity: 'warn', check: 'writeConcern', message: 'journal=false: an acknowledged write may be lost in a crash' });
  if (option('retryWrites') === 'false') {
    findings.push({ severity: 'warn', check: 'retryWrites', message: 'retryWrites=false: a point write that meets a failover fails instead of being sent once more to the new primary' });
  }
}

/** The indexes of the collections that exist: TTL where stowage expects one, none on lock collections. */
async function indexFindings(findings: Finding[], session: MongoSession): Promise<void> {
  const indexesOf = async (name: string): Promise<Document[] | null> => {
    try {
      return await session.db.collection(name).listIndexes().toArray();
    } catch {
      return null; // no such collection (NamespaceNotFound)
    }
  };
  const ttlOn = (indexes: Document[]) => indexes.find((index) => index.key?.expiresAt !== undefined && index.expireAfterSeconds !== undefined);
  for (const kind of ['locks', 'workflowLocks'] as const) {
    const indexes = await indexesOf(session.collections[kind]!);
    const ttl = indexes && ttlOn(indexes);
    if (ttl) {
      findings.push({
        severity: 'error',
        check: 'indexes',
        message: `${session.collections[kind]} has the TTL index ${ttl.name}: a TTL deletion of a lock document resets its fence, and stores refuse to start on it; drop it (db.${session.collections[kind]}.dropIndex('${ttl.name}'))`,
      });
    }
  }
  for (const kind of ['kv', 'cache', 'idempotency'] as const) {
    const indexes = await indexesOf(session.collections[kind]!);
    if (indexes && !ttlOn(indexes)) {
      findings.push({
        severity: 'info',
        check: 'indexes',
        message: `${session.collections[kind]} has no TTL index on expiresAt: expired documents stay (invisible) until clearExpired() (servers without TTL indexes, or created with autoCreate: false; see indexSpecs())`,
      });
    }
  }
}

/** go-go-scope's own documents (`{ key, … }` with an ObjectId `_id`) that goGoScopePersistence has not adopted yet. */
async function goGoScopeFindings(findings: Finding[], session: MongoSession): Promise<void> {
  const { GO_GO_SCOPE_NAMES } = await loadPeer<typeof import('@stowage/core/go-go-scope')>('@stowage/core/go-go-scope');
  for (const name of Object.values(GO_GO_SCOPE_NAMES)) {
    const legacy = await session.db.collection(name).findOne({ key: { $exists: true } }, { projection: { _id: 1 } });
    if (legacy) {
      findings.push({
        severity: 'warn',
        check: 'adoption',
        message: `${name} holds go-go-scope's own documents ({ key, … }), not adopted yet: goGoScopePersistence adopts them on its first start (stop go-go-scope's processes first); \`stowage adopt --dry-run\` lists them`,
      });
    }
  }
}

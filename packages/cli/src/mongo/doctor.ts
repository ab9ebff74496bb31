import type { Document } from 'mongodb';
import type { DoctorOptions, Finding } from '../model.js';
import { loadPeer } from '../peers.js';
import type { MongoSession } from './backend.js';

/*
 * `stowage doctor` on MongoDB: the URL's read preference and write concern, the topology, the
 * expiry indexes, and go-go-scope documents not adopted yet (the @stowage/mongo README,
 * "Production notes" and "Collections, indexes and documents").
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
  await indexFindings(findings, session);
  await goGoScopeFindings(findings, session);
  return findings;
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

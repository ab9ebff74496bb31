import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MongoClient } from 'mongodb';
import { indexSpecs, rolePrivileges } from '@stowage/mongo';
import { findMongoServer, startJongodb, type FoundBackend } from '@stowage/test-env';
import { DEFAULT_COLLECTIONS } from '@stowage/mongo';
import { grants, privilegeFindings, reason, withoutUser, type HeldPrivilege } from '../src/mongo/privileges.js';
import { keeps, shardKeyFindings } from '../src/mongo/shard-keys.js';
import { stowage, unique } from './support.js';

/*
 * `stowage doctor` on MongoDB: the Stable API, shard keys and privileges. On the stand-ins
 * (FerretDB, STOWAGE_MONGO_URL, and jongodb), each line is checked against what the server
 * itself answers: neither lists a user's privileges (FerretDB answers connectionStatus without
 * them, jongodb has no connectionStatus), so the doctor says it could not check, and neither is
 * a sharded cluster. No stand-in has users or shards: the comparisons themselves are checked on
 * answers of the shapes MongoDB gives (`connectionStatus`, `config.collections`).
 */

const lines = (text: string, check: string) => text.split('\n').filter((line) => new RegExp(`^\\S+ +${check}: `).test(line));

describe.each([
  ['FerretDB', findMongoServer],
  ['jongodb', startJongodb],
] as const)('doctor on %s', (name, start) => {
  let backend: FoundBackend;
  let client: MongoClient;
  const database = unique('cli_doctor');

  beforeAll(async () => {
    backend = (await start())!;
    client = new MongoClient(backend.url);
    await client.connect();
  });

  afterAll(async () => {
    await client.close();
    await backend.stop();
  });

  it('Stable API, shard keys (not sharded: said once), privileges (could not check: the server does not say)', async () => {
    const result = await stowage(['doctor', backend.url, '--db', database, '--table', 'process=jobs']);
    expect(result.stderr).toBe('');
    // What the server says, asked the way the doctor asks.
    const strict = new MongoClient(backend.url, { serverApi: { version: '1', strict: true } });
    const buildInfo = await strict
      .db('admin')
      .command({ buildInfo: 1 })
      .then(() => 'strict not enforced: buildInfo, outside V1, answered')
      .finally(() => strict.close());
    const status = await client
      .db(database)
      .command({ connectionStatus: 1, showPrivileges: true })
      .then((answer) => answer as { authInfo?: { authenticatedUserPrivileges?: unknown } })
      .catch((error: unknown) => error as Error);

    expect(lines(result.stdout, 'Stable API')).toEqual([
      "ok    Stable API: the URL declares no server API version (a URL cannot: serverApi is a MongoClient option); stowage needs none: its stores send only Stable API V1 commands, strict or not. " +
        `This server takes a client with serverApi { version: '1', strict: true } (ping answered; ${buildInfo})`,
    ]);
    const documented = indexSpecs({ process: 'jobs' });
    expect(documented.map((spec) => spec.collection)).toContain('jobs_claims');
    expect(lines(result.stdout, 'shard keys')).toEqual([
      `info  shard keys: not a sharded cluster (${name === 'jongodb' ? 'replica set rs0' : 'standalone server'}): nothing is sharded. To shard, use the keys indexSpecs() returns as shardKey: ` +
        '{"_id":"hashed"} for workflow_state, awaitly_snapshots, awaitly_workflow_locks, stowage_locks, stowage_cache, stowage_circuit, stowage_idempotency; ' +
        '{"taskId":1} for stowage_checkpoints; {"process":1,"itemId":1} for jobs; {"of":1} for jobs_claims',
    ]);
    const why =
      status instanceof Error
        ? reason(status)
        : (expect(status.authInfo?.authenticatedUserPrivileges).toBeUndefined(),
          "connectionStatus with showPrivileges answered without authenticatedUserPrivileges (this server does not list a user's privileges)");
    expect(lines(result.stdout, 'privileges')).toEqual([
      `WARN  privileges: could not check privileges: ${why}; compare the user's roles with rolePrivileges() of @stowage/mongo by hand`,
    ]);
    expect(result.code).toBe(0); // could not check is no error
  });

  it('no user and no privileges (what MongoDB without access control answers): a read tells access control off', async () => {
    const session = { client, db: client.db(database), url: backend.url, collections: { ...DEFAULT_COLLECTIONS }, now: async () => new Date() };
    expect(await withoutUser(session)).toEqual({
      severity: 'info',
      check: 'privileges',
      message: 'no user authenticated, and the server does not check access (access control off): every action rolePrivileges() lists is allowed',
    });
  });
});

/** A user's privileges as MongoDB's `connectionStatus` lists them. */
const user = (privileges: HeldPrivilege[]) => ({ users: ['app@admin'], privileges });
const everyAction = (db: string, collection: string, actions: string[]): HeldPrivilege => ({ resource: { db, collection }, actions });

describe('privileges: rolePrivileges() against connectionStatus', () => {
  const wanted = rolePrivileges('shop', { only: ['locks', 'process', 'processClaims'] });
  const all = wanted.flatMap(({ resource, actions }) => actions.map((action) => ({ resource, action })));
  const existing = new Set(['stowage_locks', 'stowage_process']);

  it('MongoDB resource rules: a database-wide privilege covers its collections, a collection one only itself; anyResource and anyAction', () => {
    const locks = { db: 'shop', collection: 'stowage_locks' };
    expect(grants([everyAction('shop', '', ['find'])], locks, 'find')).toBe(true);
    expect(grants([everyAction('', 'stowage_locks', ['find'])], locks, 'find')).toBe(true);
    expect(grants([everyAction('', '', ['find'])], locks, 'find')).toBe(true);
    expect(grants([everyAction('other', '', ['find'])], locks, 'find')).toBe(false);
    expect(grants([everyAction('shop', 'stowage_cache', ['find'])], locks, 'find')).toBe(false);
    expect(grants([everyAction('shop', 'stowage_locks', ['find'])], { db: 'shop', collection: '' }, 'find')).toBe(false);
    expect(grants([{ resource: { cluster: true }, actions: ['anyAction'] }], locks, 'find')).toBe(false);
    expect(grants([{ resource: { anyResource: true }, actions: ['anyAction'] }], locks, 'remove')).toBe(true);
  });

  it('every action held: one ok line', () => {
    const held = user([everyAction('shop', '', [...new Set(all.map((entry) => entry.action))])]);
    const onExisting = all.filter((entry) => entry.resource.collection === '' || existing.has(entry.resource.collection));
    expect(privilegeFindings(wanted, held, existing)).toEqual([
      { severity: 'ok', check: 'privileges', message: `user app@admin has the ${onExisting.length} action(s) rolePrivileges() lists on the collections that exist` },
    ]);
  });

  it('one finding per missing action, with its severity: a store call that would fail is an error, a degraded wake-up or start-up check a warning', () => {
    // readWrite without changeStream, createIndex and collMod; no listCollections on the database.
    const held = user([everyAction('shop', '', ['find', 'insert', 'update', 'listIndexes', 'createCollection'])]);
    const findings = privilegeFindings(wanted, held, existing);
    expect(findings.map((finding) => `${finding.severity} ${finding.message.slice(0, finding.message.indexOf(':'))}`)).toEqual([
      'error user app@admin lacks remove on collection shop.stowage_locks',
      'warn user app@admin lacks changeStream on collection shop.stowage_locks',
      'warn user app@admin lacks createIndex on collection shop.stowage_locks',
      'error user app@admin lacks remove on collection shop.stowage_process',
      'warn user app@admin lacks changeStream on collection shop.stowage_process',
      'warn user app@admin lacks createIndex on collection shop.stowage_process',
      'warn user app@admin lacks listCollections on database shop',
      // the claims collection does not exist: one line for it
      'warn 1 collection(s) do not exist (stowage_process_claims) and user app@admin lacks actions on them (remove, createIndex)',
    ]);
    expect(findings[0]!.message).toBe(
      "user app@admin lacks remove on collection shop.stowage_locks: deletes, releases and sweeps on it fail (Unauthorized); grant a role of the user { resource: {\"db\":\"shop\",\"collection\":\"stowage_locks\"}, actions: ['remove'] } (rolePrivileges() lists them all)",
    );
  });

  it('collMod on a TTL collection and createCollection on one that exists: info', () => {
    const cache = rolePrivileges('shop', { only: ['cache'] });
    const findings = privilegeFindings(cache, user([everyAction('shop', 'stowage_cache', ['find', 'insert', 'update', 'remove', 'listIndexes', 'createIndex'])]), new Set(['stowage_cache']));
    expect(findings.map((finding) => [finding.severity, finding.message.split(':')[0]])).toEqual([
      ['info', 'user app@admin lacks createCollection on collection shop.stowage_cache'],
      ['info', 'user app@admin lacks collMod on collection shop.stowage_cache'],
    ]);
  });
});

describe('shard keys: indexSpecs() against config.collections', () => {
  const specs = indexSpecs();

  it('the documented keys, and { _id: 1 } for { _id: "hashed" } (writes name _id either way)', () => {
    expect(keeps({ _id: 'hashed' }, { _id: 'hashed' })).toBe(true);
    expect(keeps({ _id: 'hashed' }, { _id: 1 })).toBe(true);
    expect(keeps({ process: 1, itemId: 1 }, { process: 1.0, itemId: 1 })).toBe(true);
    expect(keeps({ process: 1, itemId: 1 }, { itemId: 1, process: 1 })).toBe(false);
    expect(keeps({ taskId: 1 }, { taskId: 'hashed' })).toBe(false);
    expect(keeps({ _id: 'hashed' }, { owner: 1 })).toBe(false);
  });

  it('a collection sharded on another key is an error; dropped entries and other databases do not count', () => {
    const findings = shardKeyFindings('shop', specs, [
      { _id: 'shop.stowage_locks', key: { _id: 'hashed' } },
      { _id: 'shop.stowage_checkpoints', key: { _id: 'hashed' } },
      { _id: 'shop.stowage_cache', key: { prefix: 1 }, dropped: true },
    ]);
    expect(findings).toEqual([
      {
        severity: 'error',
        check: 'shard keys',
        message:
          'stowage_checkpoints is sharded on {"_id":"hashed"}, where stowage\'s writes name {"taskId":1} by equality: its upserts and findAndModify without the shard key are refused before MongoDB 7.1 and sent to every shard after, ' +
          'and its unique index {"taskId":1,"sequence":1} must start with the shard key; reshard it on {"taskId":1} (indexSpecs() shardKey)',
      },
    ]);
    expect(shardKeyFindings('shop', specs, [{ _id: 'shop.stowage_locks', key: { _id: 'hashed' } }, { _id: 'other.stowage_checkpoints', key: { x: 1 } }])).toEqual([
      { severity: 'ok', check: 'shard keys', message: '1 collection(s) sharded on the documented key (stowage_locks {"_id":"hashed"}); the others live on the database\'s primary shard' },
    ]);
  });

  it('config.collections unreadable: could not check, a warning', () => {
    expect(shardKeyFindings('shop', specs, { unknown: 'reading config.collections: not authorized on config (Unauthorized 13)' })).toEqual([
      { severity: 'warn', check: 'shard keys', message: 'could not check shard keys: reading config.collections: not authorized on config (Unauthorized 13)' },
    ]);
  });
});

import type { MongoPrivilege } from '@stowage/mongo';
import type { Document } from 'mongodb';
import type { Finding, Severity } from '../model.js';
import { loadPeer } from '../peers.js';
import type { MongoSession } from './session.js';

/*
 * `stowage doctor` on MongoDB, privileges: every action `rolePrivileges()` of @stowage/mongo
 * lists, against the privileges the connected user holds (`connectionStatus` with
 * `showPrivileges: true`). Like the PostgreSQL doctor's grants: one finding per missing action
 * on the collections that exist, one for the collections that do not.
 */

/** A privilege as `connectionStatus` lists it (`authInfo.authenticatedUserPrivileges`). */
export interface HeldPrivilege {
  resource: { db?: string; collection?: string; cluster?: boolean; anyResource?: boolean };
  actions: string[];
}

/** What `connectionStatus` told: the user(s) and their privileges, or why it could not tell. */
export type Held = { users: string[]; privileges: HeldPrivilege[] } | { unknown: string };

/** What a missing action costs, and so its severity (README of @stowage/mongo, "Privileges"). */
const COST: Record<string, { severity: Severity; why: string }> = {
  find: { severity: 'error', why: 'every read of the stores on it fails (Unauthorized)' },
  insert: { severity: 'error', why: 'the stores\' writes on it fail (Unauthorized)' },
  update: { severity: 'error', why: 'the stores\' writes on it fail (Unauthorized)' },
  remove: { severity: 'error', why: 'deletes, releases and sweeps on it fail (Unauthorized)' },
  listIndexes: {
    severity: 'warn',
    why: 'stores with autoCreate: true (the default) fail at start; with autoCreate: false they start without checking its collation, unique indexes and TTL indexes',
  },
  createIndex: { severity: 'warn', why: 'stores with autoCreate: true (the default) fail at start; with autoCreate: false your migration creates the indexes (indexSpecs())' },
  createCollection: { severity: 'info', why: 'needed only to create it again (autoCreate: true), should it be dropped' },
  collMod: { severity: 'info', why: 'needed only to turn a plain { expiresAt: 1 } index into a TTL index (autoCreate: true)' },
  changeStream: { severity: 'warn', why: 'its waits are not woken by a change stream and only poll' },
  listCollections: { severity: 'warn', why: 'a process feed cannot tell a dropped and re-created collection by its UUID' },
};

/** The user's privileges, as the server lists them; `unknown` says why it could not (a finding, never a crash). */
export async function heldPrivileges(session: MongoSession): Promise<Held> {
  let status: Document;
  try {
    status = await session.db.command({ connectionStatus: 1, showPrivileges: true });
  } catch (error) {
    return { unknown: reason(error) };
  }
  const auth = status.authInfo as { authenticatedUsers?: Array<{ user: string; db: string }>; authenticatedUserPrivileges?: HeldPrivilege[] } | undefined;
  if (!Array.isArray(auth?.authenticatedUserPrivileges)) {
    return { unknown: 'connectionStatus with showPrivileges answered without authenticatedUserPrivileges (this server does not list a user\'s privileges)' };
  }
  return { users: (auth.authenticatedUsers ?? []).map((user) => `${user.user}@${user.db}`), privileges: auth.authenticatedUserPrivileges };
}

/** `message (CodeName 13)` of a server error, or the message of any other. */
export function reason(error: unknown): string {
  const { message, code, codeName } = error as { message?: string; code?: unknown; codeName?: unknown };
  const named = [codeName, code].filter((part) => part !== undefined).join(' ');
  return `${message ?? String(error)}${named ? ` (${named})` : ''}`;
}

/**
 * Whether `held` grants `action` on `wanted` (a collection, or the database with `collection: ''`),
 * by MongoDB's resource rules: `{ db, collection: '' }` is every collection of the database
 * (and the database itself), `{ db: '', collection }` that collection in every database,
 * `{ anyResource: true }` everything; `anyAction` is every action.
 */
export function grants(held: readonly HeldPrivilege[], wanted: MongoPrivilege['resource'], action: string): boolean {
  return held.some(({ resource, actions }) => {
    if (!actions.includes(action) && !actions.includes('anyAction')) return false;
    if (resource.anyResource) return true;
    if (resource.cluster || resource.db === undefined || resource.collection === undefined) return false;
    const db = resource.db === '' || resource.db === wanted.db;
    const collection = resource.collection === '' || resource.collection === wanted.collection;
    return db && collection;
  });
}

/**
 * The findings of the privilege check. `existing`: the collections of the database (`null` when
 * the server could not list them: every collection then counts as existing).
 */
export function privilegeFindings(wanted: readonly MongoPrivilege[], held: Held, existing: ReadonlySet<string> | null): Finding[] {
  if ('unknown' in held) {
    return [{ severity: 'warn', check: 'privileges', message: `could not check privileges: ${held.unknown}; compare the user's roles with rolePrivileges() of @stowage/mongo by hand` }];
  }
  const user = held.users.length === 0 ? 'the connection (no user authenticated)' : `user ${held.users.join(', ')}`;
  const findings: Finding[] = [];
  const absent = new Map<string, Set<string>>();
  let checked = 0;
  for (const { resource, actions } of wanted) {
    const exists = resource.collection === '' || existing === null || existing.has(resource.collection);
    for (const action of actions) {
      if (grants(held.privileges, resource, action)) {
        if (exists) checked++;
        continue;
      }
      if (!exists) {
        absent.set(resource.collection, (absent.get(resource.collection) ?? new Set()).add(action));
        continue;
      }
      const cost = COST[action] ?? { severity: 'warn' as const, why: 'rolePrivileges() lists it' };
      const on = resource.collection === '' ? `database ${resource.db}` : `collection ${resource.db}.${resource.collection}`;
      findings.push({
        severity: cost.severity,
        check: 'privileges',
        message: `${user} lacks ${action} on ${on}: ${cost.why}; grant a role of the user { resource: ${JSON.stringify(resource)}, actions: ['${action}'] } (rolePrivileges() lists them all)`,
      });
    }
  }
  if (findings.length === 0) findings.push({ severity: 'ok', check: 'privileges', message: `${user} has the ${checked} action(s) rolePrivileges() lists on the collections that exist` });
  if (absent.size > 0) {
    const actions = [...new Set([...absent.values()].flatMap((set) => [...set]))];
    findings.push({
      severity: 'warn',
      check: 'privileges',
      message:
        `${absent.size} collection(s) do not exist (${[...absent.keys()].join(', ')}) and ${user} lacks actions on them (${actions.join(', ')}): ` +
        'a store on one fails; grant rolePrivileges() of @stowage/mongo (with only: the kinds you use), or create them with indexSpecs() and pass autoCreate: false',
    });
  }
  return findings;
}

/** The privilege check of `doctor`: rolePrivileges() for the session's database and collection names. */
export async function privilegeCheck(session: MongoSession): Promise<Finding[]> {
  const { rolePrivileges } = await loadPeer<typeof import('@stowage/mongo')>('@stowage/mongo');
  const held = await heldPrivileges(session);
  if ('unknown' in held) return privilegeFindings([], held, null);
  if (held.users.length === 0 && held.privileges.length === 0) return [await withoutUser(session)];
  const wanted = rolePrivileges(session.db.databaseName, { collections: session.collections });
  // nameOnly + authorizedCollections: what a role without the listCollections action may send (as the stores do).
  const existing = await session.db
    .listCollections({}, { nameOnly: true, authorizedCollections: true })
    .toArray()
    .then((collections) => new Set(collections.map((collection) => collection.name as string)))
    .catch(() => null);
  return privilegeFindings(wanted, held, existing);
}

/**
 * No user and no privileges: either the server does not check access (every action is
 * allowed) or the URL logs in as nobody where it does. A read tells them apart.
 */
export async function withoutUser(session: MongoSession): Promise<Finding> {
  try {
    await session.db.collection(session.collections.locks!).findOne({}, { projection: { _id: 1 } });
    return { severity: 'info', check: 'privileges', message: 'no user authenticated, and the server does not check access (access control off): every action rolePrivileges() lists is allowed' };
  } catch (error) {
    return {
      severity: 'error',
      check: 'privileges',
      message: `no user authenticated, and the server refuses reads (${reason(error)}): give the URL the user of the stores (mongodb://user:password@host/…)`,
    };
  }
}

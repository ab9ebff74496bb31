/**
 * The raw-driver baseline replays exactly what stowage sent. Stowage is called once with
 * marker keys (`@@K0@@`, `@@K1@@`, …); every statement/command it sends is captured, and
 * each marker inside its parameters is later replaced by the key of the iteration. Every
 * other parameter (values, TTLs, owner tokens, JSON bodies) is replayed as captured, so the
 * raw side runs the identical statement with the identical parameter shapes.
 */
import type { Db, MongoClient } from 'mongodb';
import type pg from 'pg';
import type { MongoCommand } from './mongo-observer.ts';
import type { PgStatement } from './pg-observer.ts';

export const markerKey = (j: number): string => `@@K${j}@@`;
const MARKER = /@@K(\d+)@@/g;

export type KeyOf = (j: number) => string;
type Template = (keyOf: KeyOf) => unknown;

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== 'object') return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/**
 * Turns a captured value into a function of the iteration's keys. Subtrees without a
 * marker are returned as the captured object (no copy); strings with markers are rebuilt
 * from precomputed parts, so the raw side pays as little as possible for the substitution.
 */
export function compileTemplate(value: unknown): { template: Template; markers: number } {
  if (typeof value === 'string') {
    const parts = value.split(MARKER);
    if (parts.length === 1) return { template: () => value, markers: 0 };
    // split with a capture group: [text, index, text, index, …, text]
    const markers = (parts.length - 1) / 2;
    return {
      template: (keyOf) => {
        let out = parts[0]!;
        for (let p = 1; p < parts.length; p += 2) out += keyOf(Number(parts[p])) + parts[p + 1]!;
        return out;
      },
      markers,
    };
  }
  if (Array.isArray(value)) {
    const compiled = value.map(compileTemplate);
    const markers = compiled.reduce((sum, c) => sum + c.markers, 0);
    if (markers === 0) return { template: () => value, markers };
    return { template: (keyOf) => compiled.map((c) => c.template(keyOf)), markers };
  }
  if (isPlainObject(value)) {
    const entries = Object.entries(value).map(([k, v]) => [k, compileTemplate(v)] as const);
    const markers = entries.reduce((sum, [, c]) => sum + c.markers, 0);
    if (markers === 0) return { template: () => value, markers };
    return {
      template: (keyOf) => {
        const out: Record<string, unknown> = {};
        for (const [k, c] of entries) out[k] = c.template(keyOf);
        return out;
      },
      markers,
    };
  }
  return { template: () => value, markers: 0 };
}

export interface Replayer {
  run(keyOf: KeyOf): Promise<unknown>;
  /** Parameters that carry the key; 0 means the replay hits the same key every time. */
  markers: number;
}

const TRANSACTION_START = /^\s*(begin|start\s+transaction)\b/i;

/**
 * Replays captured pg statements on `pool`; a captured transaction runs on one dedicated client.
 * Named (prepared) statements stay named and, like stowage, the replay adapts when the server
 * objects: on a session shared by several clients (PGlite's socket server, 42P05) each client
 * gets names of its own; when the session does not know the name (26000) it goes unnamed.
 * A parameter that is the JSON text of one of `callerValues` is passed as that object, for
 * `pg` to serialize (see `OpBench.callerValues`).
 */
export function pgReplayer(pool: pg.Pool, statements: readonly PgStatement[], callerValues: readonly unknown[] = []): Replayer {
  const callerValueOfJson = new Map(callerValues.map((value) => [JSON.stringify(value), value]));
  const asCallerGaveIt = (value: unknown) => (typeof value === 'string' ? (callerValueOfJson.get(value) ?? value) : value);
  const compiled = statements.map((s) => ({
    text: s.text,
    name: s.name,
    values: s.values === undefined ? null : compileTemplate(s.values.map(asCallerGaveIt)),
  }));
  const markers = compiled.reduce((sum, c) => sum + (c.values?.markers ?? 0), 0);
  let naming: 'shared' | 'per-client' | 'off' = 'shared';
  const clientNames = new WeakMap<object, number>();
  let clients = 0;
  const config = (c: (typeof compiled)[number], keyOf: KeyOf, client: object): pg.QueryConfig => {
    const out: pg.QueryConfig = { text: c.text };
    if (c.name !== undefined && naming === 'shared') out.name = c.name;
    if (c.name !== undefined && naming === 'per-client') {
      if (!clientNames.has(client)) clientNames.set(client, ++clients);
      out.name = `${c.name}_raw${clientNames.get(client)}`;
    }
    if (c.values !== null) out.values = c.values.template(keyOf) as unknown[];
    return out;
  };
  const runOne = async (on: pg.Pool | pg.PoolClient, c: (typeof compiled)[number], keyOf: KeyOf): Promise<unknown> => {
    const mode = naming;
    try {
      if (mode === 'per-client' && c.name !== undefined && on === pool) {
        const client = await pool.connect();
        try {
          return await client.query(config(c, keyOf, client));
        } finally {
          client.release();
        }
      }
      return await on.query(config(c, keyOf, on));
    } catch (error) {
      const code = (error as { code?: string }).code;
      if (c.name === undefined || mode === 'off' || (code !== '42P05' && code !== '26000')) throw error;
      naming = mode === 'shared' && code === '42P05' ? 'per-client' : 'off';
      return runOne(on, c, keyOf);
    }
  };
  const transactional = statements.some((s) => TRANSACTION_START.test(s.text));
  if (compiled.length === 1) {
    const only = compiled[0]!;
    return { markers, run: (keyOf) => runOne(pool, only, keyOf) };
  }
  if (transactional) {
    return {
      markers,
      run: async (keyOf) => {
        const client = await pool.connect();
        try {
          for (const c of compiled) await runOne(client, c, keyOf);
        } finally {
          client.release();
        }
      },
    };
  }
  return {
    markers,
    run: async (keyOf) => {
      for (const c of compiled) await runOne(pool, c, keyOf);
    },
  };
}

/** Fields the driver adds to every command; `db.command` adds its own again. */
const DRIVER_FIELDS = new Set(['lsid', '$clusterTime', '$db', '$readPreference', 'txnNumber', 'apiVersion', 'apiStrict', 'apiDeprecationErrors']);

export function stripDriverFields(command: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(command)) if (!DRIVER_FIELDS.has(k)) out[k] = v;
  return out;
}

/** Replays captured commands with `db.command`, the thinnest path through the official driver. */
export function mongoReplayer(client: MongoClient, commands: readonly MongoCommand[]): Replayer {
  const dbs = new Map<string, Db>();
  const compiled = commands.map((c) => {
    let db = dbs.get(c.databaseName);
    if (db === undefined) dbs.set(c.databaseName, (db = client.db(c.databaseName)));
    return { db, body: compileTemplate(stripDriverFields(c.command)) };
  });
  const markers = compiled.reduce((sum, c) => sum + c.body.markers, 0);
  const send = async (c: (typeof compiled)[number], keyOf: KeyOf): Promise<unknown> => {
    const reply = await c.db.command(c.body.template(keyOf) as Record<string, unknown>);
    // `db.command` resolves with a write's errors in the reply: a replay that wrote nothing is no floor
    const writeErrors = (reply as { writeErrors?: { errmsg?: string }[] }).writeErrors;
    if (writeErrors !== undefined && writeErrors.length > 0) {
      throw new Error(`the replayed command failed (${writeErrors[0]!.errmsg ?? 'write error'}): stowage's captured parameters do not replay`);
    }
    return reply;
  };
  if (compiled.length === 1) {
    const only = compiled[0]!;
    return { markers, run: (keyOf) => send(only, keyOf) };
  }
  return {
    markers,
    run: async (keyOf) => {
      for (const c of compiled) await send(c, keyOf);
    },
  };
}

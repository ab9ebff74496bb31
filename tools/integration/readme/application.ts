/**
 * The application a README's code blocks are written in: the functions and values they call
 * without defining them (`fetchUser`, `loadUser`, a `pool`, a `url`, …). test/readme-code.test.ts
 * type-checks every block with these as globals, and runs the blocks marked `<!-- runs: … -->`
 * with this module preloaded (`node --import`), so the names exist at run time too.
 *
 * Only the names the runnable blocks call get a value; the others are declared for the type
 * check alone.
 */
import { ok } from 'awaitly';
import type { MeterProvider, TracerProvider } from '@opentelemetry/api';
import type { Pool, PoolClient } from 'pg';
import type { Db } from 'mongodb';
import type { PostgresLockingSnapshotStore } from '@stowage/postgres';
import type { JsonObject, ProcessDefinition, ProcessItem, WorkflowSnapshot } from '@stowage/core';
import type { PersistenceProviders } from 'go-go-scope';

interface User {
  id: string;
  name: string;
}

const application = {
  /** awaitly steps return a Result. */
  fetchUser: async (id: string) => ok<User>({ id, name: 'Ada Lovelace' }),
  createOrder: async (user: User) => ok({ orderId: `order-${user.id}`, userId: user.id, total: 42 }),
  loadUser: async (id: string): Promise<User> => ({ id, name: 'Ada Lovelace' }),
};
Object.assign(globalThis, application);

declare global {
  var fetchUser: typeof application.fetchUser;
  var createOrder: typeof application.createOrder;
  var loadUser: typeof application.loadUser;
  // Declared for the type check only.
  var url: string;
  var id: string;
  var key: string;
  var value: string;
  var ttl: number;
  var amount: number;
  var orderId: string;
  var order: { id: string; amount: number };
  var workflowId: string;
  var expectedVersion: number | null;
  var signal: AbortSignal;
  var pool: Pool;
  var admin: Pool | PoolClient;
  var db: Db;
  var snapshot: WorkflowSnapshot;
  var next: WorkflowSnapshot;
  var first: WorkflowSnapshot;
  var snapshots: PostgresLockingSnapshotStore;
  var devices: ProcessDefinition<JsonObject, 'started' | 'downloading', 'done' | 'failed'>;
  var tracerProvider: TracerProvider;
  var meterProvider: MeterProvider;
  var payments: { charge(data: JsonObject, options: { idempotencyKey: string; signal: AbortSignal }): Promise<void> };
  var carrier: { delivered(id: string): Promise<boolean> };
  var PGBOUNCER_URL: string;
  var DIRECT_SERVER_URL: string;
  function charge(order: { id: string; amount: number }): Promise<{ receipt: string }>;
  function writeReport(options: { fence: number; signal: AbortSignal }): Promise<void>;
  function writeGuardedBy(fence: number): void;
  function fetchRate(currency: string): Promise<number>;
  function readCounter(pool: Pool, id: string): Promise<{ value: number }>;
  function sendReboot(item: ProcessItem): Promise<boolean>;
}

/** go-go-scope is not on the npm registry (../types/go-go-scope.d.ts has its persistence types): its `scope()`, as the READMEs call it. */
declare module 'go-go-scope' {
  export function scope(options?: { persistence?: PersistenceProviders }): AsyncDisposable;
}

/**
 * LISTEN behind a transaction pooler. PgBouncer in transaction mode gives each transaction any
 * server session; a LISTEN sent through it stays on a pooled session, and the NOTIFYs of every
 * lock release then reach whichever client uses that session next. Stowage must notice the
 * pooler before sending one, report `wakeups: false`, and poll.
 *
 * The detector: plain pooler clients — an application's other connections, which never
 * LISTEN — run short transactions while the lock-safety check runs, and count the
 * notifications they receive. It is shown to see leaks by sending a raw LISTEN through the
 * pooler and NOTIFYs on its channel: the plain clients must then receive some.
 */
import pg from 'pg';
import type { Backend } from '../backends/types.ts';
import { APPLICATION_NAME } from '../backends/pg-admin.ts';
import { sleep } from '../util.ts';

export interface PlainClients {
  /** Stops the clients; returns how many transactions they ran and how many notifications they received. */
  stop(): Promise<{ transactions: number; notifications: number; channels: string[] }>;
}

/** `count` pooler clients, each running BEGIN; SELECT 1; COMMIT in a loop (a short pause between), counting notifications. */
export async function startPlainClients(url: string, count: number): Promise<PlainClients> {
  const clients = await Promise.all(
    Array.from({ length: count }, async () => {
      const client = new pg.Client({ connectionString: url, application_name: `${APPLICATION_NAME}-plain` });
      await client.connect();
      return client;
    }),
  );
  let transactions = 0;
  let notifications = 0;
  const channels = new Set<string>();
  let stopped = false;
  for (const client of clients) {
    client.on('notification', (message) => {
      notifications += 1;
      channels.add(message.channel);
    });
  }
  const loops = clients.map(async (client) => {
    while (!stopped) {
      await client.query('BEGIN');
      await client.query('SELECT 1');
      await client.query('COMMIT');
      transactions += 1;
      await sleep(1);
    }
  });
  return {
    stop: async () => {
      stopped = true;
      await Promise.all(loops);
      // Notifications that arrived with the last transactions are delivered by now.
      await Promise.all(clients.map((client) => client.end()));
      return { transactions, notifications, channels: [...channels] };
    },
  };
}

/** The detector against a deliberate leak: a raw LISTEN through the pooler, 100 NOTIFYs; returns what the plain clients saw. */
export async function rawListenLeaks(url: string, channel: string): Promise<number> {
  const plain = await startPlainClients(url, 3);
  const listener = new pg.Client({ connectionString: url, application_name: `${APPLICATION_NAME}-raw-listen` });
  const notifier = new pg.Client({ connectionString: url, application_name: `${APPLICATION_NAME}-raw-notify` });
  try {
    await listener.connect();
    await notifier.connect();
    await listener.query(`LISTEN "${channel}"`);
    for (let i = 0; i < 100; i++) {
      await notifier.query('SELECT pg_notify($1, $2)', [channel, String(i)]);
      await sleep(5);
    }
    await sleep(200);
  } finally {
    await listener.end().catch(() => undefined);
    await notifier.end().catch(() => undefined);
  }
  return (await plain.stop()).notifications;
}

/** `capabilities.wakeups` of a lock provider once `ready()` has run its detection (false expected behind a pooler). */
export async function wakeupsAfterReady(backend: Backend): Promise<boolean> {
  const locks = await backend.locks();
  try {
    await (locks as { ready?: () => Promise<void> }).ready?.();
    return locks.capabilities.wakeups;
  } finally {
    await locks.close();
  }
}

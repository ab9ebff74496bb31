import type { Db, MongoClient } from 'mongodb';

/** What every MongoDB view, check and adoption of the CLI works on: a database of the user's URL, the collection names, and the server's clock. */
export interface MongoSession {
  client: MongoClient;
  db: Db;
  url: string;
  collections: Record<string, string>;
  /** The server's time now (its `hello.localTime`; the client's where a server does not say). */
  now(): Promise<Date>;
}

import { StowageError } from '@stowage/core';
import type { Backend, OpenOptions } from './model.js';
import { registerSecret, redactUrl } from './redact.js';

export type { OpenOptions };

/** The backend a URL names: `postgres://` / `postgresql://` or `mongodb://` / `mongodb+srv://`. */
export async function openBackend(url: string, options: OpenOptions = {}): Promise<Backend> {
  registerSecret(url);
  const scheme = /^([a-z+]+):\/\//i.exec(url)?.[1]?.toLowerCase();
  if (scheme === 'postgres' || scheme === 'postgresql') {
    const { PostgresBackend } = await import('./postgres/backend.js');
    return PostgresBackend.open(url, options);
  }
  if (scheme === 'mongodb' || scheme === 'mongodb+srv') {
    const { MongoBackend } = await import('./mongo/backend.js');
    return MongoBackend.open(url, options);
  }
  throw new StowageError(
    'E_INVALID_OPTION',
    `cannot tell the database of ${redactUrl(url)}: give a postgres://, postgresql://, mongodb:// or mongodb+srv:// URL`,
  );
}

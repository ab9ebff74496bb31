import type { CommandStartedEvent, Document } from 'mongodb';

/** What a command asks of the server, without the driver's envelope (session, cluster time, batch sizes). */
export function essentials(event: CommandStartedEvent): Document {
  const { command, commandName } = event;
  const c = normalise(command) as Document;
  switch (commandName) {
    case 'update':
      return { update: (c.updates as Document[]).map(({ q, u, upsert, multi }) => ({ q, u, ...(upsert && { upsert }), ...(multi && { multi }) })) };
    case 'findAndModify':
      return { findAndModify: { q: c.query, u: c.update, ...(c.upsert && { upsert: true }), ...(c.new && { new: true }), ...(c.fields && { fields: c.fields }) } };
    case 'find':
      return { find: { filter: c.filter, ...(c.projection && { projection: c.projection }), ...(c.sort && { sort: c.sort }), ...(c.limit && { limit: c.limit }) } };
    case 'aggregate':
      return { aggregate: c.pipeline };
    case 'delete':
      return { delete: (c.deletes as Document[]).map(({ q, limit }) => ({ q, limit })) };
    default:
      return { [commandName]: true };
  }
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * What depends on the moment or is random becomes a placeholder, so that commands compare
 * exactly: version candidates (server time in µs) `'<version>'`, times of this century
 * `'<now>'` (the constants "forever" and the epoch stay as they are), generated owner tokens
 * `'<token>'`.
 */
function normalise(value: unknown): unknown {
  if (value instanceof Date) {
    const year = value.getUTCFullYear();
    return year > 2000 && year < 3000 ? '<now>' : value.toISOString();
  }
  if (typeof value === 'number' && value > 1e14) return '<version>';
  if (typeof value === 'string' && UUID.test(value)) return '<token>';
  if (value instanceof Map) return normalise(Object.fromEntries(value));
  if (Array.isArray(value)) return value.map(normalise);
  if (value !== null && typeof value === 'object' && value.constructor === Object) {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, normalise(item)]));
  }
  return value;
}

// go-go-scope's MongoDB persistence page: its code samples are not part of the seed text, so
// this is not a verbatim copy. It follows the page's "Basic Usage" as go-go-scope's adapter
// documents it (`new MongoDBAdapter(db, { keyPrefix: 'myapp:' })` and
// `new MongoDBIdempotencyAdapter(db)`), with stowage's one call in their place, and calls
// each method the page lists, with the arguments it describes.
import { MongoClient } from 'mongodb';
import { goGoScopePersistence } from '@stowage/mongo';

const client = new MongoClient(process.env.MONGODB_URI!);
const db = client.db('myapp');
const persistence = goGoScopePersistence(db, { keyPrefix: 'myapp:' });
await persistence.connect(); // creates the collections and indexes (go_goscope_locks, …)

// await using s = scope({ persistence }) — go-go-scope then calls these providers:
const { lock, cache, circuitBreaker, idempotency } = persistence;

// Lock Provider: acquire(key, ttl, owner?), extend(key, ttl, owner), forceRelease(key)
const handle = await lock.acquire('resource:123', 30000, 'worker-1');
const extended = await lock.extend('resource:123', 30000, 'worker-1');
const heldElsewhere = await lock.acquire('resource:123', 30000, 'worker-2'); // null: already locked
await lock.forceRelease('resource:123');

// Cache Provider: get, set(key, value, ttl?), delete, has, clear, keys(pattern?)
await cache.set('user:1', { name: 'Ada' }, 60000);
await cache.set('user:2', { name: 'Grace' });
const user = await cache.get<{ name: string }>('user:1');
const hasUser = await cache.has('user:2');
// The page's example pattern 'user:.*' is a regular expression; a string pattern is a glob in
// stowage (go-go-scope's own MongoDB adapter also escapes the dot), so pass a RegExp:
const userKeys = await cache.keys(/^user:.*/); // changed: was keys('user:.*')
await cache.delete('user:2');

// Circuit Breaker: getState, setState, recordFailure(key, maxFailures), recordSuccess
const failures = await circuitBreaker.recordFailure('payments-api', 3);
await circuitBreaker.setState('payments-api', { state: 'half-open', failureCount: failures, lastFailureTime: Date.now() });
const halfOpen = await circuitBreaker.getState('payments-api');
await circuitBreaker.recordSuccess('payments-api');
const closed = await circuitBreaker.getState('payments-api');

// Idempotency (MongoDBIdempotencyAdapter): get, set(key, value, ttl?), delete
await idempotency.set('charge:order-1', [undefined, { chargeId: 'ch_1' }], 3600000);
const cached = await idempotency.get<[undefined, { chargeId: string }]>('charge:order-1');

await cache.clear();
export { client, db, persistence, handle, extended, heldElsewhere, user, hasUser, userKeys, failures, halfOpen, closed, cached };

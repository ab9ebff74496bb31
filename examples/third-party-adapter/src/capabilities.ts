import type { Capabilities } from '@stowage/core';

/**
 * What this adapter can honestly claim. The conformance suite reads it and skips (and
 * reports) the cases for what is missing: SQLite pushes no changes, has no background TTL
 * sweeper and cannot wake a waiting lock acquisition, so waiting acquisitions poll.
 */
export const SQLITE_CAPABILITIES: Capabilities = Object.freeze({
  serverClock: true, // expiry is computed in SQL (unixepoch), never from the caller's Date
  fencing: true,
  ttlIndex: false,
  changeFeed: false,
  wakeups: false,
  transactions: true,
  crossProcess: true, // a database file is shared by every process that opens it
});

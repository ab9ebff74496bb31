import type { ClaimRequest } from '@stowage/core';
import type { Collection } from 'mongodb';
import { later } from '../dialects/dialect.js';
import { isDuplicateKeyError } from '../errors.js';
import type { ClaimTicketDocument, ProcessVersionDocument, VersionKey } from './documents.js';

/**
 * A claim where single-document updates are not atomic (FerretDB 1.x runs an update as a read
 * followed by a separate write, so two claimers could both "win" a conditional update): read
 * the version, insert a ticket naming the free lease seen (only one worker can: the ticket's
 * `_id` is unique), then take the lease. A lease extended or released since is a different
 * ticket. A ticket blocks for one lease length: if its claimer died before taking the lease,
 * the next claimer inserts the next generation. A claimer retrying after an error reuses its
 * own ticket. Dates come from `now`, the server's clock as this process measures it.
 */
export async function claimWithTicket(
  collection: Collection<ProcessVersionDocument>,
  tickets: Collection<ClaimTicketDocument>,
  now: Date,
  filter: VersionKey & { state: string; current: true },
  request: ClaimRequest,
): Promise<ProcessVersionDocument | null> {
  const seen = await collection.findOne(filter);
  if (!seen || (seen.leaseUntil !== null && seen.leaseUntil > now)) return null;
  const previous = seen.leaseOwner === null ? 'unclaimed' : `${seen.leaseOwner}@${seen.leaseUntil?.getTime() ?? ''}`;
  const last = await tickets.find({ of: filter._id, previous }).sort({ generation: -1 }).limit(1).next();
  const mine = last !== null && last.owner === request.owner;
  if (last !== null && !mine && last.until > now) return null;
  if (!mine) {
    const generation = last === null ? 0 : last.generation + 1;
    try {
      await tickets.insertOne({
        _id: `${filter._id}#${previous}#${generation}`,
        of: filter._id,
        previous,
        generation,
        owner: request.owner,
        at: now,
        until: later(now, request.lease),
      });
    } catch (error) {
      if (isDuplicateKeyError(error)) return null;
      throw error;
    }
  }
  return collection.findOneAndUpdate(
    { ...filter, leaseOwner: seen.leaseOwner, leaseUntil: seen.leaseUntil },
    { $set: { leaseOwner: request.owner, leaseUntil: later(now, request.lease), attempts: seen.attempts + 1 } },
    { returnDocument: 'after' },
  );
}

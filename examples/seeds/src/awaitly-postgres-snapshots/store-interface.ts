// awaitly-postgres docs (snapshot store), "Store Interface": the interface verbatim (its
// WorkflowSnapshot imported), and what `postgres()` returns checked against it by `tsc`.
import { postgres } from '@stowage/postgres';
import type { WorkflowSnapshot } from '@stowage/core';

interface SnapshotStore {
  save(id: string, snapshot: WorkflowSnapshot): Promise<void>;
  load(id: string): Promise<WorkflowSnapshot | null>;
  delete(id: string): Promise<void>;
  list(options?: { prefix?: string; limit?: number }): Promise<Array<{ id: string; updatedAt: string }>>;
  close(): Promise<void>;
}

/** Compiles only if the store `postgres()` returns implements the docs' interface. */
export function asTheDocsInterface(url: string): SnapshotStore {
  return postgres(url);
}

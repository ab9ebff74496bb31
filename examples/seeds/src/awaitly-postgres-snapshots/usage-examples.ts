// awaitly-postgres docs (snapshot store), "Usage Examples": verbatim apart from the import (and
// the export). It continues the quick start: `store` and `collector` are the quick start's.
import { collector, store } from './quick-start.changed.ts';

// Save snapshot
await store.save('wf-123', collector.getResumeState());

// Load snapshot (returns null if not found)
const snapshot = await store.load('wf-123');

// Delete snapshot
await store.delete('wf-123');

// List recent workflows
const workflows = await store.list({ limit: 100 });
// [{ id: 'wf-123', updatedAt: '2024-01-15T10:30:00Z' }, ...]

// List with prefix filter
const orderWorkflows = await store.list({ prefix: 'orders:', limit: 50 });

// Clean shutdown
await store.close();

export { snapshot, workflows, orderWorkflows };

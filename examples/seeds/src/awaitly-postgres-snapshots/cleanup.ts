// awaitly-postgres docs (snapshot store), "Cleanup": verbatim apart from the import (and the export).
// Type-checks, but throws a TypeError at run time once a saved ResumeState is in the table (see the README).
import { store } from './later-process.ts';

const completed = await store.list({ limit: 1000 });
for (const { id } of completed) {
  const snapshot = await store.load(id);
  if (snapshot?.execution.status === 'completed') {
    await store.delete(id);
  }
}

export { completed };

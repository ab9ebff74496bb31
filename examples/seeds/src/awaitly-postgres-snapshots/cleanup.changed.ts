// awaitly-postgres docs (snapshot store), "Cleanup", with one line changed: a saved ResumeState
// (the quick start's) has no `execution`, so the status is read with `?.` there too.
import { store } from './later-process.ts';

const completed = await store.list({ limit: 1000 });
for (const { id } of completed) {
  const snapshot = await store.load(id);
  if (snapshot?.execution?.status === 'completed') { // changed: was snapshot?.execution.status
    await store.delete(id);
  }
}

export { completed };

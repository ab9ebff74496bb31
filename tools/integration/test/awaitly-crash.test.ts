/**
 * The published awaitly's `durable.run` crashing right after a step, on every backend of
 * ./backends.ts and on both kinds of stowage store it takes (the snapshot table or collection,
 * and awaitly's key-value persistence): every kind of step result everyday code produces —
 * plain, void (`ok(undefined)`), an object with an `undefined` member, a `Date`, `NaN`, and a
 * thrown error — must be saved, so that the run after the crash replays the step instead of
 * running its side effect again. awaitly swallows a failed save (`persist_error`), so a store
 * that refused one of these would turn each crash into a repeated side effect, silently.
 *
 * The crash is an abandoned run: the step after the one under test never settles, so the run
 * stops where a killed process would (its snapshot saved after the step, nothing after it),
 * and a new store object on the same database runs the workflow again. The abandoned run is
 * still registered in this process's awaitly, so the second run passes `allowConcurrent`
 * (which only skips that in-process check; these stores take no lease).
 *
 * The table of side-effect counts is printed at the end.
 */
import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type { SnapshotStore, WorkflowSnapshot } from '@stowage/core';
import { ok } from 'awaitly';
import { durable } from 'awaitly/durable';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKENDS, type Namespace } from './backends.ts';

interface StepKind {
  name: string;
  /** The step's result: its value, or a throw. */
  run(): unknown;
  /** What the workflow returns once the step is replayed: what awaitly-postgres gives back (`JSON.stringify` of the snapshot). */
  replayed: unknown;
}

const AT = new Date('2024-01-15T10:30:00.123Z');

const STEP_KINDS: StepKind[] = [
  { name: 'plain', run: () => ({ charged: 42 }), replayed: { charged: 42 } },
  { name: 'void', run: () => undefined, replayed: undefined },
  { name: 'undefined member', run: () => ({ receipt: 'r-1', coupon: undefined }), replayed: { receipt: 'r-1' } },
  { name: 'Date', run: () => AT, replayed: AT.toISOString() },
  { name: 'NaN', run: () => Number.NaN, replayed: null },
  {
    name: 'thrown error',
    run: () => {
      throw new TypeError('card declined');
    },
    replayed: 'error',
  },
];

const STORE_KINDS: { name: string; open(namespace: Namespace): Promise<SnapshotStore<WorkflowSnapshot>> }[] = [
  { name: 'snapshot store', open: async (namespace) => namespace.snapshots() },
  { name: 'key-value persistence', open: (namespace) => namespace.keyValuePersistence() },
];

/** backend / store -> step kind -> how many times the charge ran. */
const table = new Map<string, Map<string, number | string>>();

interface Attempt {
  kind: StepKind;
  store: SnapshotStore<WorkflowSnapshot>;
  id: string;
  /** How many times the charge ran, over every attempt. */
  effects: { charges: number };
  /** Saves awaitly reported as failed (`persist_error`), over every attempt. */
  persistErrors: unknown[];
  /** Set for the attempt that crashes: called when `ship` starts, which then never settles. */
  onCrash?: () => void;
}

/** The workflow: `charge` (the step under test), then `ship` (where the crashing attempt stops). */
function runCheckout({ kind, store, id, effects, persistErrors, onCrash }: Attempt) {
  const deps = {
    charge: async () => {
      effects.charges++;
      return ok(kind.run());
    },
    ship: () => (onCrash ? new Promise<never>(() => onCrash()) : Promise.resolve(ok('shipped'))),
  };
  return durable.run(
    deps,
    async ({ step, deps }) => {
      const charged = await step('charge', () => deps.charge(), { key: 'charge' });
      await step('ship', () => deps.ship(), { key: 'ship' });
      return charged;
    },
    {
      id,
      store,
      allowConcurrent: onCrash === undefined,
      onEvent: (event) => {
        if (event.type === 'persist_error') persistErrors.push(event.error);
      },
    },
  );
}

for (const backend of BACKENDS) {
  describe(`awaitly durable.run crashing after each kind of step result, on ${backend.name}`, () => {
    let started: Awaited<ReturnType<typeof backend.start>>;
    beforeAll(async () => {
      started = await backend.start();
    });
    afterAll(async () => {
      await started?.stop();
    });

    for (const storeKind of STORE_KINDS) {
      it(`${storeKind.name}: every completed step's side effect ran exactly once`, async (context) => {
        if (!started) return context.skip(`${backend.name} is not available here (outside CI only)`);
        const namespace = started.namespace();
        const counts = new Map<string, number | string>();
        table.set(`${backend.name} / ${storeKind.name}`, counts);
        const failures: string[] = [];
        await Promise.all(
          STEP_KINDS.map(async (kind) => {
            const attempt = { kind, id: `crash-${randomUUID()}`, effects: { charges: 0 }, persistErrors: [] as unknown[] };
            // The first run: the charge, its snapshot saved, then the crash (a thrown charge ends the run instead).
            const before = await storeKind.open(namespace);
            const stopped = await new Promise<'crashed' | 'ended'>((resolve, reject) => {
              runCheckout({ ...attempt, store: before, onCrash: () => resolve('crashed') }).then(() => resolve('ended'), reject);
            });
            expect(stopped).toBe(kind.replayed === 'error' ? 'ended' : 'crashed');
            await before.close();

            // "After the restart": a new store object on the same database runs it again.
            const after = await storeKind.open(namespace);
            try {
              const result = await runCheckout({ ...attempt, store: after });
              const charges = attempt.effects.charges;
              counts.set(kind.name, charges);
              if (charges !== 1) failures.push(`${kind.name}: the charge ran ${charges} times`);
              if (kind.replayed === 'error') {
                if (result.ok) failures.push(`${kind.name}: the recorded failure was not replayed`);
              } else if (!result.ok) {
                failures.push(`${kind.name}: the run after the crash failed: ${JSON.stringify(result.error)}`);
              } else if (!isDeepStrictEqual(result.value, kind.replayed)) {
                failures.push(`${kind.name}: replayed ${String(result.value)}, not ${String(kind.replayed)}`);
              }
              if (attempt.persistErrors.length > 0) failures.push(`${kind.name}: saves refused: ${attempt.persistErrors.map(String).join('; ')}`);
            } finally {
              await after.close();
            }
          }),
        );
        expect(failures).toEqual([]);
      });
    }
  });
}

afterAll(() => {
  const header = ['backend / store', ...STEP_KINDS.map((kind) => kind.name)];
  const rows = [...table].map(([name, counts]) => [name, ...STEP_KINDS.map((kind) => String(counts.get(kind.name) ?? '-'))]);
  const lines = [header, header.map(() => '---'), ...rows].map((cells) => `| ${cells.join(' | ')} |`);
  console.log(`[awaitly crash] charges per step kind (1 = exactly once):\n${lines.join('\n')}`);
});

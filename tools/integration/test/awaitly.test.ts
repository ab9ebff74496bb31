/**
 * awaitly (the published package, pinned) as a real client of stowage stores, on every
 * backend of ./backends.ts:
 *
 * - `durable.run` (awaitly/durable): the checkout of the seeds completes and cleans up; a run
 *   that failed after `fetch-user` resumes from the snapshot in a fresh store instance (a new
 *   process, as far as the store can tell) without running `fetch-user` again; and a store
 *   created with `lock` makes durable.run turn away a run while another owner holds the lease.
 * - the resume-state flow of seed 003 (awaitly/workflow): `createWorkflow` with a
 *   `createResumeStateCollector`, the collected state saved and loaded back, and the workflow
 *   resumed from it without re-running its steps.
 *
 * This file is type-checked with `tsc --strict` (the package's typecheck script): every store
 * is passed to awaitly as stowage returns it, with no casts.
 */
import { randomUUID } from 'node:crypto';
import { err, ok } from 'awaitly';
import { durable, isConcurrentExecution, type DurableOptions } from 'awaitly/durable';
import {
  createResumeStateCollector,
  createWorkflow,
  deserializeResumeState,
  isResumeState,
  toResumeState,
  isWorkflowCancelled,
  serializeResumeState,
} from 'awaitly/workflow';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKENDS, type Namespace } from './backends.ts';

interface User {
  id: string;
  name: string;
}

/** The seeds' step functions, counting their calls; `createOrder` can be told to fail. */
function checkoutDeps(options: { failCreateOrder?: boolean } = {}) {
  const calls = { fetchUser: 0, createOrder: 0 };
  const deps = {
    fetchUser: async (id: string) => {
      calls.fetchUser++;
      return ok<User>({ id, name: 'Ada' });
    },
    createOrder: async (user: User) => {
      calls.createOrder++;
      if (options.failCreateOrder) return err('PAYMENT_DECLINED' as const);
      return ok({ orderId: `order-for-${user.id}`, total: 42 });
    },
  };
  return { calls, deps };
}

type CheckoutDeps = ReturnType<typeof checkoutDeps>['deps'];

/** The seeds' checkout on durable.run. `options.store` is where stowage meets awaitly's types. */
function runCheckout(deps: CheckoutDeps, options: DurableOptions) {
  return durable.run(
    deps,
    async ({ step, deps }) => {
      const user = await step('fetchUser', () => deps.fetchUser('123'), { key: 'fetch-user' });
      return step('createOrder', () => deps.createOrder(user), { key: 'create-order' });
    },
    options,
  );
}

for (const backend of BACKENDS) {
  describe(`awaitly on ${backend.name}`, () => {
    let started: Awaited<ReturnType<typeof backend.start>>;
    let namespace: Namespace;

    beforeAll(async () => {
      started = await backend.start();
      if (started) {
        console.log(`[awaitly] ${backend.name}: ${started.label}`);
        namespace = started.namespace();
      }
    });
    afterAll(async () => {
      await started?.stop();
    });

    const needsBackend = (context: { skip(note?: string): never }) => {
      if (!started) context.skip(`${backend.name} is not available here (outside CI only)`);
    };

    it('durable.run: the checkout completes and its state is removed', async (context) => {
      needsBackend(context);
      const store = namespace.snapshots();
      const { calls, deps } = checkoutDeps();
      const id = `checkout-${randomUUID()}`;
      try {
        const result = await durable.run(
          deps,
          async ({ step, deps }) => {
            const user = await step('fetchUser', () => deps.fetchUser('123'), { key: 'fetch-user' });
            return step('createOrder', () => deps.createOrder(user), { key: 'create-order' });
          },
          { id, store }, // the stowage store, passed as it is
        );
        expect(result).toEqual({ ok: true, value: { orderId: 'order-for-123', total: 42 } });
        expect(calls).toEqual({ fetchUser: 1, createOrder: 1 });
        expect(await store.load(id)).toBeNull();
        expect(await durable.hasState(store, id)).toBe(false);
      } finally {
        await store.close();
      }
    });

    it('durable.run: stopped after fetch-user, then resumed by a new store instance without re-running it', async (context) => {
      needsBackend(context);
      const id = `checkout-${randomUUID()}`;
      const first = namespace.snapshots();
      const interrupted = checkoutDeps();
      // A graceful shutdown right after fetch-user's snapshot was saved (the process-level
      // crash is in examples/checkout-workflow).
      const shutdown = new AbortController();
      const stopped = await runCheckout(interrupted.deps, {
        id,
        store: first,
        signal: shutdown.signal,
        metadata: { attempt: 1 },
        onEvent: (event) => {
          if (event.type === 'persist_success' && event.stepKey === 'fetch-user') shutdown.abort('shutting down');
        },
      });
      expect(stopped.ok).toBe(false);
      if (!stopped.ok) expect(isWorkflowCancelled(stopped.cause)).toBe(true);
      expect(interrupted.calls).toEqual({ fetchUser: 1, createOrder: 0 });
      await first.close();

      // "After the restart": another store object on the same database.
      const second = namespace.snapshots();
      try {
        const saved = await second.load(id);
        expect(saved?.execution.status).toBe('running');
        expect(Object.keys(saved?.steps ?? {})).toEqual(['fetch-user']);
        expect(saved?.metadata?.attempt).toBe(1);
        expect((await durable.listPending(second)).map((item) => item.id)).toContain(id);

        const retry = checkoutDeps();
        const resumed = await runCheckout(retry.deps, { id, store: second });
        expect(resumed).toEqual({ ok: true, value: { orderId: 'order-for-123', total: 42 } });
        expect(retry.calls).toEqual({ fetchUser: 0, createOrder: 1 });
        expect(await second.load(id)).toBeNull();
      } finally {
        await second.close();
      }
    });

    it('durable.run: a failed step is saved and replayed, not retried (awaitly semantics the store must keep)', async (context) => {
      needsBackend(context);
      const id = `checkout-${randomUUID()}`;
      const store = namespace.snapshots();
      try {
        const failing = checkoutDeps({ failCreateOrder: true });
        const failed = await runCheckout(failing.deps, { id, store });
        expect(failed).toMatchObject({ ok: false, error: 'PAYMENT_DECLINED' });
        const saved = await store.load(id);
        expect(saved?.steps['create-order']).toMatchObject({ ok: false, error: 'PAYMENT_DECLINED', meta: { origin: 'result' } });

        const again = checkoutDeps();
        expect(await runCheckout(again.deps, { id, store })).toMatchObject({ ok: false, error: 'PAYMENT_DECLINED' });
        expect(again.calls).toEqual({ fetchUser: 0, createOrder: 0 });
        expect(await durable.deleteState(store, id)).toBe(true);
        expect(await store.load(id)).toBeNull();
      } finally {
        await store.close();
      }
    });

    it('durable.run with a locking store: a lease held elsewhere turns the run away, its release lets it through', async (context) => {
      needsBackend(context);
      // Two store objects on one database: "another process" and this one.
      const elsewhere = namespace.lockingSnapshots();
      const here = namespace.lockingSnapshots();
      const id = `checkout-${randomUUID()}`;
      try {
        const lease = await elsewhere.tryAcquire(id, { ttlMs: 30_000 });
        expect(lease).not.toBeNull();

        const { calls, deps } = checkoutDeps();
        const run = () => runCheckout(deps, { id, store: here, lockTtlMs: 5_000 });

        const turnedAway = await run();
        expect(turnedAway.ok).toBe(false);
        if (!turnedAway.ok) {
          expect(isConcurrentExecution(turnedAway.error)).toBe(true);
          if (isConcurrentExecution(turnedAway.error)) expect(turnedAway.error.reason).toBe('cross-process');
        }
        expect(calls).toEqual({ fetchUser: 0, createOrder: 0 });

        await elsewhere.release(id, lease!.ownerToken);
        const result = await run();
        expect(result.ok).toBe(true);
        expect(calls).toEqual({ fetchUser: 1, createOrder: 1 });
        // durable.run released its own lease at the end: the other owner can take it now.
        const again = await elsewhere.tryAcquire(id, { ttlMs: 1_000 });
        expect(again).not.toBeNull();
        await elsewhere.release(id, again!.ownerToken);
      } finally {
        await here.close();
        await elsewhere.close();
      }
    });

    it('resume state (seed 003): createWorkflow + createResumeStateCollector, saved, loaded, resumed', async (context) => {
      needsBackend(context);
      const id = `checkout-${randomUUID()}`;
      const store = namespace.resumeStates();
      const { calls, deps } = checkoutDeps();
      const collector = createResumeStateCollector();
      const workflow = createWorkflow('checkout', deps, { onEvent: collector.handleEvent });
      const checkout = (resumeState?: ReturnType<typeof deserializeResumeState>) =>
        workflow.run(
          async ({ step, deps }) => {
            const user = await step('fetchUser', () => deps.fetchUser('123'), { key: 'fetch-user' });
            return step('createOrder', () => deps.createOrder(user), { key: 'create-order' });
          },
          { resumeState },
        );
      try {
        const first = await checkout();
        expect(first).toEqual({ ok: true, value: { orderId: 'order-for-123', total: 42 } });
        expect(calls).toEqual({ fetchUser: 1, createOrder: 1 });

        // The quick start's line, as written: the collector's state itself (its steps are a Map).
        await store.save(id, collector.getResumeState());
        const savedState = await store.load(id);
        expect(isResumeState(savedState)).toBe(true);
        expect([...(toResumeState(savedState as never)?.steps.keys() ?? [])]).toEqual(['fetch-user', 'create-order']);
        const resumed = await checkout(await store.loadResumeState(id));
        expect(resumed).toEqual(first);
        expect(calls).toEqual({ fetchUser: 1, createOrder: 1 });

        // What is stored is awaitly's own JSON form, so a state awaitly serialized itself (as
        // awaitly's adapters store it) reads back the same way.
        await store.save(`${id}-serialized`, serializeResumeState(collector.getResumeState()) as never);
        const fromSerialized = await store.loadResumeState(`${id}-serialized`);
        expect(fromSerialized).toEqual(deserializeResumeState(serializeResumeState(collector.getResumeState())));
        expect(await checkout(fromSerialized)).toEqual(first);
        expect(calls).toEqual({ fetchUser: 1, createOrder: 1 });
        expect(await store.loadResumeState(`${id}-missing`)).toBeUndefined();
      } finally {
        await store.close();
      }
    });

    it('resume state (seed 003) with a void step and a Date: store.save(id, collector.getResumeState()) saves, and the resumed run re-runs nothing', async (context) => {
      needsBackend(context);
      const id = `notify-${randomUUID()}`;
      const store = namespace.snapshots();
      const calls = { notify: 0, stamp: 0 };
      const deps = {
        notify: async () => {
          calls.notify++;
          return ok(undefined);
        },
        stamp: async () => {
          calls.stamp++;
          return ok(new Date('2024-01-15T10:30:00.123Z'));
        },
      };
      const collector = createResumeStateCollector();
      const workflow = createWorkflow('notify', deps, { onEvent: collector.handleEvent });
      const run = (resumeState?: ReturnType<typeof deserializeResumeState>) =>
        workflow.run(
          async ({ step, deps }) => {
            await step('notify', () => deps.notify(), { key: 'notify' });
            return step('stamp', () => deps.stamp(), { key: 'stamp' });
          },
          { resumeState },
        );
      try {
        expect((await run()).ok).toBe(true);
        await store.save(id, collector.getResumeState());
        const resumed = await run(await store.loadResumeState(id));
        // What JSON keeps of a Date, as awaitly's own adapters give it back.
        expect(resumed).toEqual({ ok: true, value: '2024-01-15T10:30:00.123Z' });
        expect(calls).toEqual({ notify: 1, stamp: 1 });
      } finally {
        await store.close();
      }
    });
  });
}

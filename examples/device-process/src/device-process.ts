/**
 * The device process of the blog post "State machine using MongoDB change streams": a firmware
 * downgrade of a customer's IoT device that may take days, because the device is not always
 * online. Five states with work to do, each run by its own worker process (the seed's
 * StatefulSets), then `done`; `failed` is where an item goes after too many failures.
 *
 *   started -> downloading -> installing -> rebooting -> verifying -> done
 *
 * Every handler's side effect ("send the download command to the device", …) is recorded
 * under the handler's idempotency key, so a redelivery after a crash never repeats it.
 */
import { defineProcess, type HandlerContext, type ProcessItem } from '@stowage/core';
import type pg from 'pg';

export interface Device {
  [field: string]: string;
  user: string;
  firmware: string;
}

export const DEVICE_STATES = ['started', 'downloading', 'installing', 'rebooting', 'verifying'] as const;
export type DeviceState = (typeof DEVICE_STATES)[number];

export const PROCESS_NAME = 'device-downgrade';

/** The example's tables, all named after one run id so that runs never share state. */
export function tableNames(run: string) {
  return {
    items: `device_items_${run}`,
    transitions: `device_transitions_${run}`,
    cursors: `device_cursors_${run}`,
    effects: `device_effects_${run}`,
  };
}

/**
 * Side effects on the "device", at most once per idempotency key: the row's primary key is
 * the key, so a second delivery of the same stay finds it there and does nothing.
 */
export class DeviceEffects {
  readonly #pool: pg.Pool;
  readonly #table: string;

  constructor(pool: pg.Pool, table: string) {
    this.#pool = pool;
    this.#table = `"${table}"`;
  }

  createTable(): Promise<unknown> {
    return this.#pool.query(
      `CREATE TABLE IF NOT EXISTS ${this.#table} (key TEXT PRIMARY KEY, device TEXT NOT NULL, step TEXT NOT NULL, at TIMESTAMPTZ NOT NULL DEFAULT now())`,
    );
  }

  /** Performs the step's effect unless it was already performed for this key; true when it ran now. */
  async apply(key: string, device: string, step: string): Promise<boolean> {
    const { rowCount } = await this.#pool.query(`INSERT INTO ${this.#table} (key, device, step) VALUES ($1, $2, $3) ON CONFLICT (key) DO NOTHING`, [
      key,
      device,
      step,
    ]);
    return rowCount === 1;
  }

  /** How many times each (device, step) effect was applied. */
  async counts(): Promise<{ device: string; step: string; count: number }[]> {
    const { rows } = await this.#pool.query(`SELECT device, step, count(*)::int AS count FROM ${this.#table} GROUP BY device, step`);
    return rows;
  }
}

export type CallListener = (call: { device: string; state: string; key: string; attempt: number; applied: boolean }) => void;

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const work = () => pause(40 + Math.floor(Math.random() * 60));

/**
 * The process definition. `onCall` hears about every handler call (the worker prints it, so
 * the demo can count redeliveries).
 */
export function deviceProcess(effects: DeviceEffects, onCall: CallListener = () => undefined) {
  const step = async (item: ProcessItem<Device>, context: HandlerContext, effect: string): Promise<boolean> => {
    const applied = await effects.apply(context.idempotencyKey, item.id, effect);
    onCall({ device: item.id, state: item.state, key: context.idempotencyKey, attempt: context.attempt, applied });
    await work();
    return applied;
  };
  return defineProcess({
    name: PROCESS_NAME,
    initial: 'started',
    lease: 3000,
    retry: { maxAttempts: 5, backoff: { initial: 100, factor: 2, max: 1000 } },
    states: {
      started: {
        handler: async (item: ProcessItem<Device>, context) => {
          await step(item, context, 'register downgrade');
          return 'downloading';
        },
      },
      downloading: {
        concurrency: 3,
        handler: async (item: ProcessItem<Device>, context) => {
          await step(item, context, `download firmware ${item.data.firmware}`);
          return { to: 'installing', data: { ...item.data, downloadedBy: context.worker } };
        },
      },
      installing: {
        concurrency: 3,
        handler: async (item: ProcessItem<Device>, context) => {
          await step(item, context, 'install');
          return 'rebooting';
        },
      },
      rebooting: {
        concurrency: 3,
        handler: async (item: ProcessItem<Device>, context) => {
          // First call sends the reboot; the device is then offline for a while: come back later.
          const sentNow = await step(item, context, 'reboot');
          return sentNow ? { wait: 150 } : 'verifying';
        },
      },
      verifying: {
        concurrency: 3,
        handler: async (item: ProcessItem<Device>, context) => {
          await step(item, context, 'verify');
          // A flaky check: every third device fails its first attempt and is retried with backoff.
          if (context.attempt === 1 && Number(item.id.slice(-2)) % 3 === 0) throw new Error('device did not answer the version check');
          return 'done';
        },
      },
    },
    terminal: ['done', 'failed'],
  });
}

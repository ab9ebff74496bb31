import { StowageError } from '../errors.js';
import { pageSizeOf } from '../adapter/options.js';
import { describeValue } from '../keys.js';
import type { JsonObject } from '../json.js';
import type {
  ListProcessItemsOptions,
  ProcessBackend,
  ProcessDefinition,
  ProcessItem,
  BoundProcess,
} from '../contracts/process.js';
import { DEFAULT_ITEM_LIST_LIMIT } from './validation.js';
import { EngineWorker } from './worker.js';

/**
 * Binds a process definition (from `defineProcess`) to a backend: start items, read them and
 * their history, and create workers.
 *
 * ```ts
 * const devices = bindProcess(backend, deviceProcess);
 * await devices.start('device-42', { firmware: '1.2.0' });
 * await devices.worker({ name: 'worker-0', cursors: kv }).run(); // until SIGTERM/SIGINT
 * ```
 */
export function bindProcess<TData extends JsonObject, TActive extends string, TTerminal extends string>(
  backend: ProcessBackend,
  definition: ProcessDefinition<TData, TActive, TTerminal>,
): BoundProcess<TData, TActive, TTerminal> {
  if (backend === null || typeof backend !== 'object' || typeof backend.openFeed !== 'function') {
    throw new StowageError('E_INVALID_OPTION', 'backend must be a ProcessBackend');
  }
  if (definition === null || typeof definition !== 'object' || !Array.isArray(definition.activeStates)) {
    throw new StowageError('E_INVALID_OPTION', 'definition must come from defineProcess()');
  }
  const name = definition.name;
  return {
    definition,
    backend,
    async start(id, data, options) {
      const state = options?.state ?? definition.initial;
      if (!(definition.activeStates as readonly string[]).includes(state)) {
        throw new StowageError('E_INVALID_OPTION', `process "${name}" has no state with a handler named ${describeValue(state)}`);
      }
      const { item, created } = await backend.createItem({ process: name, id, state, data });
      return { item: item as ProcessItem<TData>, created };
    },
    async get(id) {
      return (await backend.getItem(name, id)) as ProcessItem<TData> | null;
    },
    async list(options: ListProcessItemsOptions<TActive | TTerminal> = {}) {
      const items = await backend.listItems({
        process: name,
        ...(options.state !== undefined && { state: options.state }),
        ...(options.after !== undefined && { after: options.after }),
        limit: options.limit ?? DEFAULT_ITEM_LIST_LIMIT,
      });
      return items as ProcessItem<TData>[];
    },
    async *scan(options = {}) {
      const pageSize = pageSizeOf(options);
      for (let after: string | undefined; ; ) {
        const page = await backend.listItems({
          process: name,
          ...(options.state !== undefined && { state: options.state }),
          ...(after !== undefined && { after }),
          limit: pageSize,
        });
        yield* page as ProcessItem<TData>[];
        if (page.length < pageSize) return;
        after = page.at(-1)!.id;
      }
    },
    history: (id) => backend.history(name, id),
    worker: (options) => new EngineWorker(backend, definition as unknown as ProcessDefinition, options),
  };
}

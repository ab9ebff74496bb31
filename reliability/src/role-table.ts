/**
 * Each role a worker process can play, by name, loaded lazily so a worker process loads only the
 * check whose role it runs. Only the worker process's entry (worker.ts) reads this table.
 */
import type { Role, RoleName } from './workers.ts';

export const ROLES: { readonly [name in RoleName]: () => Promise<Role> } = {
  'lock-contender': () => import('./checks/lock-safety.ts').then((m) => m.lockContender as Role),
  'cas-writer': () => import('./checks/lost-updates.ts').then((m) => m.casWriter as Role),
  'lock-holder': () => import('./checks/crash-recovery.ts').then((m) => m.lockHolder as Role),
  'snapshot-writer': () => import('./checks/crash-recovery.ts').then((m) => m.snapshotWriter as Role),
  charger: () => import('./checks/crash-recovery.ts').then((m) => m.charger as Role),
  'leak-cycles': () => import('./checks/resource-leaks.ts').then((m) => m.leakCycles as Role),
  'hostile-corpus': () => import('./checks/hostile-input.ts').then((m) => m.hostileCorpus as Role),
  'connections-client': () => import('./checks/connections.ts').then((m) => m.connectionsClient as Role),
  'failover-load': () => import('./checks/failover-load.ts').then((m) => m.failoverLoad as Role),
};

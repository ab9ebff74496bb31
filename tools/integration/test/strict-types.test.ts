/**
 * `tsc --strict` (skipLibCheck off) on the programs in ../fixtures/strict, each handing a
 * snapshot store to awaitly's `durable.run`:
 *
 * - stowage.ts: every stowage store, as the adapters return them (memory, postgres(),
 *   createPostgresPersistence, mongo(), createMongoPersistence, createStatePersistence over
 *   each KeyValueStore, with and without `lock`). Compiles, with no casts.
 * - awaitly-mongo.ts: awaitly's own published MongoDB adapter, awaitly-mongo 37.0.0 (installed
 *   as a devDependency; it declares a peer `awaitly ^6.2.0`, but 1.35.0 is the only awaitly
 *   version on npm). Fails: its declarations import types that awaitly/durable does not export.
 * - awaitly-mongo-unchecked.ts: with skipLibCheck it compiles only because those types become
 *   `any`: assigning a loaded snapshot to a `number` is accepted.
 * - awaitly-mongo-declared-shape.ts: its declared store interface, with the imported type names
 *   taken from where awaitly does export them. Fails: `load` may return a ResumeState.
 * - go-go-scope.ts: `goGoScopePersistence(...)` of memory, Postgres and MongoDB as go-go-scope's
 *   `PersistenceProviders` and `PersistenceAdapter` (../types/go-go-scope.d.ts). Compiles, with no casts.
 *
 * (There is no awaitly-postgres package on npm, so nothing is claimed about it.)
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const fixtures = fileURLToPath(new URL('../fixtures/strict/', import.meta.url));
const tsc = fileURLToPath(new URL('../node_modules/typescript/bin/tsc', import.meta.url));
const STRICT = [
  '--strict',
  '--noEmit',
  '--target', 'es2022',
  '--lib', 'es2024,esnext.disposable',
  '--module', 'nodenext',
  '--moduleResolution', 'nodenext',
  '--types', 'node',
];

async function compile(file: string, extra: string[] = []): Promise<{ code: number; output: string }> {
  try {
    const { stdout } = await run(process.execPath, [tsc, ...STRICT, ...extra, file], { cwd: fixtures });
    return { code: 0, output: stdout };
  } catch (error) {
    const failure = error as { code: number; stdout: string };
    return { code: failure.code, output: failure.stdout };
  }
}

describe('tsc --strict with durable.run', () => {
  it('accepts every stowage store as it is', async () => {
    expect(await compile('stowage.ts')).toEqual({ code: 0, output: '' });
  });

  it("rejects awaitly's published awaitly-mongo 37.0.0", async () => {
    const { code, output } = await compile('awaitly-mongo.ts');
    expect(code).not.toBe(0);
    expect(output).toContain("awaitly-mongo/dist/index.d.ts");
    expect(output).toContain(`error TS2305: Module '"awaitly/durable"' has no exported member 'StoreLoadResult'.`);
  });

  it('compiles awaitly-mongo 37.0.0 under skipLibCheck only because its store types decay to any', async () => {
    expect(await compile('awaitly-mongo-unchecked.ts', ['--skipLibCheck'])).toEqual({ code: 0, output: '' });
    expect(await compile('awaitly-mongo.ts', ['--skipLibCheck'])).toEqual({ code: 0, output: '' });
  });

  it("rejects awaitly-mongo's declared store shape even with its imports resolved", async () => {
    const { code, output } = await compile('awaitly-mongo-declared-shape.ts');
    expect(code).not.toBe(0);
    expect(output).toContain("error TS2322: Type 'MongoStore' is not assignable to type 'SnapshotStore'.");
    expect(output).toContain("Type 'ResumeState' is missing the following properties from type 'WorkflowSnapshot'");
  });
});

describe('tsc --strict with go-go-scope', () => {
  it("accepts goGoScopePersistence of every backend as go-go-scope's PersistenceProviders", async () => {
    expect(await compile('go-go-scope.ts')).toEqual({ code: 0, output: '' });
  });
});

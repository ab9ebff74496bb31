/**
 * The samples `tsc --strict` refuses as written (excluded from this package's typecheck, see
 * tsconfig.json), each with the error the README explains. Their changed versions are part of
 * the package's typecheck, and so are every other sample (Cleanup included: it type-checks).
 */
import { execFile } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
const STRICT = ['--noEmit', '--strict', '--skipLibCheck', '--allowImportingTsExtensions', '--target', 'es2022', '--lib', 'es2024,esnext.disposable'];
const MODULES = ['--module', 'nodenext', '--moduleResolution', 'nodenext', '--types', 'node'];

const REFUSED = {
  // awaitly 1.35.0's durable.run passes one argument, `{ step, deps, ctx }`.
  'src/awaitly-mongo/quick-start.ts': ['(13,3): error TS2345', 'Target signature provides too few arguments'],
  'src/awaitly-postgres-kv/quick-start.ts': ['(13,3): error TS2345', 'Target signature provides too few arguments'],
  // `load` is typed as the store's snapshot type; `workflow.run` wants a ResumeState.
  'src/awaitly-postgres-snapshots/quick-start.ts': ['(23,16): error TS2769', "Type 'WorkflowSnapshot' is not assignable to type 'ResumeState'"],
  // `new MongoClient(url)` wants a string; `process.env.MONGODB_URI` may be undefined.
  'src/awaitly-mongo/existing-client.ts': ['(5,32): error TS2345', "Argument of type 'string | undefined' is not assignable to parameter of type 'string'"],
  'src/awaitly-mongo/existing-database.ts': ['(5,32): error TS2345', "Argument of type 'string | undefined' is not assignable to parameter of type 'string'"],
};

describe('tsc --strict on the samples it refuses as written', () => {
  it('refuses each with the error the README explains, and nothing else', async () => {
    const files = Object.keys(REFUSED);
    const output = await run(process.execPath, [tsc, ...STRICT, ...MODULES, ...files], { cwd: root }).then(
      () => '',
      (failure: { stdout: string }) => failure.stdout,
    );
    const errors = output.split('\n').filter((line) => /error TS\d+/.test(line));
    for (const [file, [where, message]] of Object.entries(REFUSED)) {
      const errorsOfFile = errors.filter((line) => line.startsWith(file));
      expect(errorsOfFile[0], file).toContain(`${file}${where}`);
      expect(output.slice(output.indexOf(`${file}${where}`)), file).toContain(message);
    }
    expect(errors.every((line) => files.some((file) => line.startsWith(file)))).toBe(true);
  });
});

/**
 * The consumer type-check matrix: ../fixtures/consumer/consumer.ts (every public entry point,
 * with assertions on the types a user relies on) compiles with skipLibCheck off, `strict`, and
 * lib es2022 (no newer lib than `target` needs), under each module setting a TypeScript service
 * may have, with the oldest supported TypeScript (5.4: the declarations use `NoInfer`) and the
 * latest on npm (the version this repository builds with is in between, and strict-types.test.ts
 * runs it with nodenext):
 *
 * | setting | module | moduleResolution | the fixture is |
 * | --- | --- | --- | --- |
 * | commonjs | commonjs | node10 (default up to TS 6; TS 7 removed it and uses bundler) | CommonJS |
 * | node16-cjs | node16 | node16 | CommonJS (`"type": "commonjs"`) |
 * | node16-esm | node16 | node16 | ESM (consumer.mts) |
 * | bundler | esnext | bundler | ESM |
 *
 * node10 reads neither `exports` nor `.d.cts` maps by condition: it finds `@stowage/core/adapter`
 * and the other subpaths only through core's `typesVersions`.
 */
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const integration = fileURLToPath(new URL('../', import.meta.url));
const fixture = join(integration, 'fixtures', 'consumer');
const work = join(integration, '.tmp', 'consumer-types');

const COMPILERS = [
  { name: 'TypeScript 5.4 (oldest supported)', pkg: 'typescript-5.4', node10: true },
  { name: 'TypeScript latest (7.x)', pkg: 'typescript-latest', node10: false },
] as const;

const SETTINGS = [
  { name: 'commonjs', module: 'commonjs', resolution: 'node10', file: 'consumer.ts' },
  { name: 'node16-cjs', module: 'node16', resolution: 'node16', file: 'consumer.ts' },
  { name: 'node16-esm', module: 'node16', resolution: 'node16', file: 'consumer.mts' },
  { name: 'bundler', module: 'esnext', resolution: 'bundler', file: 'consumer.ts' },
] as const;

describe.each(COMPILERS)('$name', ({ pkg, node10 }) => {
  const tsc = join(integration, 'node_modules', pkg, 'bin', 'tsc');

  it.concurrent.each(SETTINGS)('compiles a consumer with $name, skipLibCheck off', async (setting) => {
    const dir = join(work, `${pkg}-${setting.name}`);
    mkdirSync(dir, { recursive: true });
    // A copy in a CommonJS package (consumer.ts) or as an ES module (consumer.mts); the packages
    // resolve from tools/integration/node_modules, as a user's from theirs.
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ private: true, type: 'commonjs' }));
    copyFileSync(join(fixture, 'consumer.ts'), join(dir, setting.file));
    const compilerOptions: Record<string, unknown> = {
      noEmit: true,
      strict: true,
      skipLibCheck: false,
      target: 'es2022',
      lib: ['es2022'],
      types: ['node'],
      module: setting.module,
    };
    // TS 7 removed node10; a CommonJS project there gets its default (bundler).
    if (setting.resolution !== 'node10' || node10) compilerOptions.moduleResolution = setting.resolution;
    writeFileSync(join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions, files: [setting.file] }));
    const output = await run(process.execPath, [tsc, '-p', join(dir, 'tsconfig.json'), '--pretty', 'false'], { cwd: dir }).then(
      ({ stdout }) => stdout,
      (error: { stdout: string; stderr: string }) => error.stdout + error.stderr,
    );
    expect(output.trim()).toBe('');
  });
});

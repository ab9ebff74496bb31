import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { expect, it } from 'vitest';

/**
 * The conformance suite judges adapters, so it must never lean on one: nothing under
 * src/conformance may import the in-memory adapter (src/memory, `@stowage/core/memory`).
 * A case that needs a second contract (cursors for workers) takes it from the adapter's
 * context, or skips.
 */
const src = resolve(import.meta.dirname, '..', 'src');
const conformance = join(src, 'conformance');
const memory = join(src, 'memory');
// `import … from '…'`, `export … from '…'`, `import '…'` and `import('…')`.
const SPECIFIERS = /(?:^|[\s;])(?:import|export)\b[^'"]*?\bfrom\s*['"]([^'"]+)['"]|\bimport\s*\(?\s*['"]([^'"]+)['"]/g;

function sourceFiles(directory: string): string[] {
  return readdirSync(directory, { withFileTypes: true }).flatMap((entry) => {
    const path = join(directory, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

function importsOf(file: string): string[] {
  const source = readFileSync(file, 'utf8');
  return [...source.matchAll(SPECIFIERS)].map((match) => (match[1] ?? match[2])!);
}

it('finds the imports it checks (the pattern reads this suite)', () => {
  const index = join(conformance, 'index.ts');
  expect(importsOf(index)).toEqual(expect.arrayContaining(['./harness.js', './types.js', './cases/kv/index.js']));
  expect(importsOf(join(conformance, 'harness.ts'))).toContain('vitest');
});

it('nothing under src/conformance imports the in-memory adapter', () => {
  const files = sourceFiles(conformance);
  expect(files.length).toBeGreaterThan(5);
  const offenders: string[] = [];
  for (const file of files) {
    for (const specifier of importsOf(file)) {
      const target = specifier.startsWith('.') ? resolve(dirname(file), specifier) : specifier;
      const intoMemory = specifier.startsWith('.') ? !relative(memory, target).startsWith('..') : /^@stowage\/core\/memory\b/.test(target);
      if (intoMemory) offenders.push(`${relative(src, file)} imports ${specifier}`);
    }
  }
  expect(offenders).toEqual([]);
});

#!/usr/bin/env node
/**
 * Lists each name an entry point of @stowage/core exports and where it is imported outside
 * packages/core: which packages, examples, the bench and the reliability battery use it.
 * An export nobody outside core imports is a candidate to keep internal.
 *
 *   node tools/entry-exports.mjs                      # @stowage/core/adapter
 *   node tools/entry-exports.mjs @stowage/core         # the root entry
 *   node tools/entry-exports.mjs @stowage/core/adapter --unused   # only the unused names
 *
 * Imports are read from source with the TypeScript parser: `import { a }`, `import type { a }`,
 * `export { a } from` and `import * as ns` followed by `ns.a`, in .ts/.mts/.cts/.js/.mjs files.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(fileURLToPath(new URL('..', import.meta.url)));
const ts = createRequire(join(root, 'package.json'))('typescript');

const entries = {
  '@stowage/core': 'packages/core/src/index.ts',
  '@stowage/core/adapter': 'packages/core/src/adapter/index.ts',
  '@stowage/core/memory': 'packages/core/src/memory/index.ts',
  '@stowage/core/conformance': 'packages/core/src/conformance/index.ts',
  '@stowage/core/telemetry': 'packages/core/src/telemetry/index.ts',
  '@stowage/core/go-go-scope': 'packages/core/src/go-go-scope/index.ts',
};
// Where "used outside core" is looked for. tools/ is reported too (the consumer type fixture).
const consumers = ['packages/postgres', 'packages/mongo', 'packages/cli', 'examples', 'bench', 'reliability', 'tools'];

const args = process.argv.slice(2);
const specifier = args.find((a) => !a.startsWith('--')) ?? '@stowage/core/adapter';
const onlyUnused = args.includes('--unused');
const entryFile = entries[specifier];
if (entryFile === undefined) {
  console.error(`unknown entry ${specifier}; one of ${Object.keys(entries).join(', ')}`);
  process.exit(2);
}

/** Every exported name of the entry, through `export *` and re-exports, by the type checker. */
function exportedNames(file) {
  const program = ts.createProgram([join(root, file)], {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    noEmit: true,
    skipLibCheck: true,
  });
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(join(root, file));
  const symbol = checker.getSymbolAtLocation(source);
  return checker
    .getExportsOfModule(symbol)
    .map((s) => s.getName())
    .sort();
}

function* codeFiles(dir) {
  let names;
  try {
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    if (name === 'node_modules' || name === 'dist' || name.startsWith('.')) continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* codeFiles(path);
    else if (/\.(m|c)?(t|j)sx?$/.test(name) && !name.endsWith('.d.ts')) yield path;
  }
}

/** name -> set of files importing it from `specifier`. */
function importsOf(spec) {
  const uses = new Map();
  const note = (name, file) => {
    if (!uses.has(name)) uses.set(name, new Set());
    uses.get(name).add(relative(root, file));
  };
  for (const dir of consumers) {
    for (const file of codeFiles(join(root, dir))) {
      const text = readFileSync(file, 'utf8');
      if (!text.includes(spec)) continue;
      const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
      const namespaces = new Set();
      for (const stmt of sf.statements) {
        const from = stmt.moduleSpecifier;
        if (!from || !ts.isStringLiteral(from) || from.text !== spec) continue;
        if (ts.isImportDeclaration(stmt)) {
          const bindings = stmt.importClause?.namedBindings;
          if (bindings && ts.isNamedImports(bindings)) {
            for (const el of bindings.elements) note((el.propertyName ?? el.name).text, file);
          } else if (bindings && ts.isNamespaceImport(bindings)) {
            namespaces.add(bindings.name.text);
          }
        } else if (ts.isExportDeclaration(stmt)) {
          if (stmt.exportClause && ts.isNamedExports(stmt.exportClause)) {
            for (const el of stmt.exportClause.elements) note((el.propertyName ?? el.name).text, file);
          } else {
            note('*', file);
          }
        }
      }
      if (namespaces.size > 0) {
        const visit = (node) => {
          if (ts.isPropertyAccessExpression(node) && ts.isIdentifier(node.expression) && namespaces.has(node.expression.text)) {
            note(node.name.text, file);
          }
          if (ts.isQualifiedName(node) && ts.isIdentifier(node.left) && namespaces.has(node.left.text)) {
            note(node.right.text, file);
          }
          ts.forEachChild(node, visit);
        };
        visit(sf);
      }
    }
  }
  return uses;
}

const names = exportedNames(entryFile);
const uses = importsOf(specifier);
const where = (files) => [...new Set([...files].map((f) => f.split('/').slice(0, f.startsWith('packages/') ? 2 : 1).join('/')))].sort();

let unused = 0;
for (const name of names) {
  const files = uses.get(name);
  if (files === undefined) unused += 1;
  if (onlyUnused && files !== undefined) continue;
  console.log(`${name.padEnd(32)} ${files === undefined ? '-- unused outside core' : where(files).join(', ')}`);
}
const unknown = [...uses.keys()].filter((n) => n !== '*' && !names.includes(n));
console.log(`\n${specifier}: ${names.length} exports, ${unused} unused outside packages/core`);
if (uses.has('*')) console.log(`note: re-exported wholesale (export *) by ${[...uses.get('*')].join(', ')}`);
if (unknown.length > 0) {
  console.log(`imported but not exported: ${unknown.join(', ')}`);
  process.exitCode = 1;
}

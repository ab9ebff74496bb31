#!/usr/bin/env node
/**
 * Finds import cycles between a package's own files: the strongly connected components (Tarjan)
 * of the graph of relative imports. Every kind of import counts — `import`, `import type`,
 * `export … from`, and `import('./…')` with a literal path — because a cycle through types alone
 * still ties two files together for a reader.
 *
 *   node tools/import-cycles.mjs                 # packages/*\/src and reliability/src
 *   node tools/import-cycles.mjs packages/core   # one or more roots
 *
 * Prints each cycle's files and exits 1 if there is one.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(fileURLToPath(new URL('..', import.meta.url)));
const ts = createRequire(join(root, 'package.json'))('typescript');

const given = process.argv.slice(2);
const roots =
  given.length > 0
    ? given.map((r) => (existsSync(join(root, r, 'src')) ? join(r, 'src') : r))
    : [...readdirSync(join(root, 'packages')).map((p) => `packages/${p}/src`), 'reliability/src'];

function* sourceFiles(dir) {
  for (const name of readdirSync(dir)) {
    if (name === 'node_modules' || name === 'dist') continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* sourceFiles(path);
    else if (/\.(m|c)?ts$/.test(name) && !name.endsWith('.d.ts')) yield path;
  }
}

/** `./x.js` → the source file it names (`./x.ts`, or `./x/index.ts`), or undefined. */
function resolveImport(from, specifier) {
  const base = resolve(dirname(from), specifier);
  const candidates = [base.replace(/\.(m|c)?js$/, (ext) => ext.replace('js', 'ts')), base, `${base}.ts`, join(base, 'index.ts')];
  return candidates.find((c) => existsSync(c) && statSync(c).isFile());
}

function relativeImports(file) {
  const sf = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const found = [];
  const visit = (node) => {
    let spec;
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier)) {
      spec = node.moduleSpecifier.text;
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword && node.arguments[0] && ts.isStringLiteralLike(node.arguments[0])) {
      spec = node.arguments[0].text;
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument) && ts.isStringLiteral(node.argument.literal)) {
      spec = node.argument.literal.text; // import('./x.js').Type in a type position
    }
    if (spec?.startsWith('.')) {
      const target = resolveImport(file, spec);
      if (target) found.push(target);
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return found;
}

/** Tarjan's strongly connected components; returns those that are cycles. */
function cycles(graph) {
  let index = 0;
  const indices = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const result = [];
  const connect = (v) => {
    indices.set(v, index);
    low.set(v, index);
    index += 1;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!indices.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v), indices.get(w)));
      }
    }
    if (low.get(v) === indices.get(v)) {
      const component = [];
      let w;
      do {
        w = stack.pop();
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || graph.get(v)?.has(v)) result.push(component.sort());
    }
  };
  for (const v of graph.keys()) if (!indices.has(v)) connect(v);
  return result;
}

let found = 0;
for (const dir of roots) {
  const graph = new Map();
  for (const file of sourceFiles(join(root, dir))) graph.set(file, new Set(relativeImports(file)));
  const components = cycles(graph);
  found += components.length;
  console.log(`${dir}: ${graph.size} files, ${components.length === 0 ? 'no import cycle' : `${components.length} cycle(s)`}`);
  for (const component of components) {
    console.log(`  cycle of ${component.length}:`);
    for (const file of component) {
      const inCycle = [...graph.get(file)].filter((t) => component.includes(t)).map((t) => relative(dirname(file), t));
      console.log(`    ${relative(root, file)} -> ${inCycle.join(', ')}`);
    }
  }
}
process.exitCode = found > 0 ? 1 : 0;

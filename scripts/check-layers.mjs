#!/usr/bin/env node
// Checks that src/ imports one way (README.md, "Code layout"):
//   base (errors.ts, options.ts, libc.ts) ← proc ← sweep ← containment ← outcome ← ledger
//     ← session ← sandbox | guard | adapters (peers: none imports another) ← recover ← cli ← index.ts
// A file may import its own layer or a lower one. Every `import … from`, `export … from`,
// `import x = require()`, dynamic `import()`, `import('…')` type, `require()` (also through
// `createRequire()`) and `/// <reference path>` of every .ts, .mts, .cts and .tsx under the
// source root is read with the TypeScript parser (comments and strings are not imports); the
// package imported by its own name is src/index.ts, and a computed specifier is an offence
// (except in COMPUTED_IMPORT_ALLOWED: a loader of callers' modules).
// Usage: node scripts/check-layers.mjs [SRC_DIR]   (default: ./src)
// Exit 0 when every import goes down or sideways within a layer; else 1, one line per offence:
//   src/sweep/x.ts:3 imports ../session/tag.js (layer sweep → higher layer session)
// A file the script cannot place (a new top-level folder or file) is an offence too: add it
// to LAYERS below, and to README.md's "Code layout", on purpose.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/** Each layer: its rank, and the top-level entries of src/ that belong to it. */
const LAYERS = [
  { name: 'base', rank: 0, entries: ['errors.ts', 'options.ts', 'libc.ts'] },
  { name: 'proc', rank: 1, entries: ['proc'] },
  { name: 'sweep', rank: 2, entries: ['sweep'] },
  { name: 'containment', rank: 3, entries: ['containment'] },
  { name: 'outcome', rank: 4, entries: ['outcome'] },
  { name: 'ledger', rank: 5, entries: ['ledger'] },
  { name: 'session', rank: 6, entries: ['session'] },
  // Peers: each may import below rank 7, none another.
  { name: 'sandbox', rank: 7, entries: ['sandbox'] },
  { name: 'guard', rank: 7, entries: ['guard'] },
  { name: 'adapters', rank: 7, entries: ['adapters'] },
  { name: 'recover', rank: 8, entries: ['recover'] },
  { name: 'cli', rank: 9, entries: ['cli'] },
  { name: 'index', rank: 10, entries: ['index.ts'] },
];

/** The layer of a path relative to the source root (`sweep/loop.ts`), or undefined. */
function layerOf(rel) {
  const top = rel.split(sep)[0];
  return LAYERS.find((l) => l.entries.includes(top));
}

export function listTs(dir) {
  const out = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) out.push(...listTs(path));
    else if (SOURCE.test(e.name)) out.push(path);
  }
  return out.sort();
}

/** Every source file TypeScript compiles here: .ts, .mts, .cts, .tsx (not .d.ts declarations). */
const SOURCE = /^(?!.*\.d\.[mc]?ts$).*\.([mc]?ts|tsx)$/;
/** The package's own name: `import … from 'tether'` inside src/ is an import of index.ts. */
const PACKAGE_NAME = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).name;

/**
 * Every module specifier in `text`, with the 1-based line it is on: imports and exports,
 * `import x = require()`, `import()` and `import('…')` types, `require('…')` calls (also through
 * `createRequire(…)`), and `/// <reference path>`. A dynamic `import()` or `require()` whose
 * argument is not a string literal cannot be checked: `specifier` is undefined.
 */
export function importsOf(file, text) {
  const kind = file.endsWith('.tsx') ? ts.ScriptKind.TSX : ts.ScriptKind.TS;
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, kind);
  const found = [];
  const lineOf = (node) => source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1;
  const add = (node, dynamic = false) => {
    if (node && ts.isStringLiteralLike(node)) found.push({ specifier: node.text, line: lineOf(node) });
    else if (dynamic && node) found.push({ specifier: undefined, line: lineOf(node) });
  };
  const isRequire = (callee) =>
    (ts.isIdentifier(callee) && callee.text === 'require') ||
    (ts.isCallExpression(callee) &&
      ts.isIdentifier(callee.expression) &&
      callee.expression.text === 'createRequire');
  const visit = (node) => {
    if (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) add(node.moduleSpecifier);
    else if (ts.isImportEqualsDeclaration(node) && ts.isExternalModuleReference(node.moduleReference)) {
      add(node.moduleReference.expression);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      add(node.arguments[0], true);
    } else if (ts.isCallExpression(node) && isRequire(node.expression)) {
      add(node.arguments[0], true);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      add(node.argument.literal);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  for (const ref of source.referencedFiles) {
    found.push({ specifier: ref.fileName, line: source.getLineAndCharacterOfPosition(ref.pos).line + 1 });
  }
  return found;
}

/**
 * Files (relative to the source root) allowed one computed `import()`: each loads a caller's
 * module by path (never a file of src/), which the layers cannot name.
 */
const COMPUTED_IMPORT_ALLOWED = new Set([join('ledger', 'store-module.ts')]);

/** The offences in the tree at `srcDir`, as report lines (paths relative to the cwd). */
export function checkLayers(srcDir) {
  const root = resolve(srcDir);
  const problems = [];
  const show = (path) => relative(process.cwd(), path) || path;
  for (const file of listTs(root)) {
    const from = layerOf(relative(root, file));
    if (!from) {
      problems.push(
        `${show(file)}: not in any layer (a new top-level entry of ${show(root)}: add it to scripts/check-layers.mjs)`,
      );
      continue;
    }
    for (const { specifier, line } of importsOf(file, readFileSync(file, 'utf8'))) {
      if (specifier === undefined) {
        if (COMPUTED_IMPORT_ALLOWED.has(relative(root, file))) continue;
        problems.push(
          `${show(file)}:${line} imports a computed specifier (cannot be checked: use a string literal)`,
        );
        continue;
      }
      const own = specifier === PACKAGE_NAME || specifier.startsWith(`${PACKAGE_NAME}/`);
      if (!specifier.startsWith('.') && !own) continue; // node:, other packages
      // The package by its own name is its public API, src/index.ts; ESM TypeScript names the
      // emitted file: `../errors.js` is src/errors.ts (.mjs → .mts, .cjs → .cts).
      const target = own
        ? join(root, 'index.ts')
        : resolve(
            dirname(file),
            specifier
              .replace(/\.js$/, '.ts')
              .replace(/\.mjs$/, '.mts')
              .replace(/\.cjs$/, '.cts'),
          );
      const rel = relative(root, target);
      if (rel.startsWith('..') || rel === '') continue; // outside the source root
      const to = layerOf(rel);
      const at = `${show(file)}:${line} imports ${specifier}`;
      if (!to) problems.push(`${at} (layer ${from.name} → ${rel}, which is in no layer)`);
      else if (to.rank > from.rank) problems.push(`${at} (layer ${from.name} → higher layer ${to.name})`);
      else if (to.rank === from.rank && to !== from)
        problems.push(`${at} (layer ${from.name} → peer layer ${to.name})`);
    }
  }
  return problems;
}

// Run as a script (scripts/shape.mjs imports listTs and importsOf without running it).
if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const problems = checkLayers(process.argv[2] ?? 'src');
  for (const p of problems) console.error(p);
  if (problems.length > 0) {
    console.error(`check-layers: ${problems.length} import(s) against the layers`);
    process.exit(1);
  }
}

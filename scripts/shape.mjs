#!/usr/bin/env node
// The shape of the code, measured (issue "the session by phase"): the longest files and
// functions of src/ (TypeScript) and native/ (C), the import circles of src/, and the runtime
// values each entry point of the package exports. Run it before and after a move.
//   node scripts/shape.mjs            a report on stdout
//   node scripts/shape.mjs --json     the same as one JSON object
//   node scripts/shape.mjs --check    exit 1 when src/ has an import circle (npm run lint runs it)
//   --root DIR                        measure the checkout at DIR
// Lines are physical lines, a function's from its first line to its closing brace (a nested
// function counts inside its parent and on its own). Circles count type-only imports too: a
// type shared both ways belongs in a file of its own. The exports are read from dist/ (run
// `npm run build` first); a missing dist/ is said, not guessed.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import ts from 'typescript';
import { importsOf, listTs } from './check-layers.mjs';

// `--root DIR` measures another checkout (the tests measure a tree of their own).
const rootAt = process.argv.indexOf('--root');
const ROOT = resolve(
  rootAt > 0 ? (process.argv[rootAt + 1] ?? '') : join(dirname(new URL(import.meta.url).pathname), '..'),
);
const SRC = join(ROOT, 'src');
const NATIVE = join(ROOT, 'native');
/** How many of the longest files and functions a report lists. */
const TOP = 8;
/** The bound the session's phases keep (issue: no function in src/session/ over 60 lines). */
const SESSION_FUNCTION_LINES = 60;

const rel = (path) => relative(ROOT, path);
const linesOf = (text) => text.split('\n').length - (text.endsWith('\n') ? 1 : 0);

/** Every function-like node of a TypeScript file: its name (or `(anonymous)`), line, length. */
function tsFunctions(file, text) {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const line = (pos) => source.getLineAndCharacterOfPosition(pos).line + 1;
  const found = [];
  const nameOf = (node) => {
    if (node.name && ts.isIdentifier(node.name)) return node.name.text;
    if (node.name && ts.isPrivateIdentifier(node.name)) return node.name.text;
    if (ts.isConstructorDeclaration(node)) return 'constructor';
    const parent = node.parent;
    if (parent && ts.isVariableDeclaration(parent) && ts.isIdentifier(parent.name)) return parent.name.text;
    if (parent && ts.isPropertyAssignment(parent) && ts.isIdentifier(parent.name)) return parent.name.text;
    if (parent && ts.isPropertyDeclaration(parent) && ts.isIdentifier(parent.name)) return parent.name.text;
    return '(anonymous)';
  };
  const visit = (node) => {
    if (
      (ts.isFunctionDeclaration(node) ||
        ts.isMethodDeclaration(node) ||
        ts.isConstructorDeclaration(node) ||
        ts.isGetAccessorDeclaration(node) ||
        ts.isSetAccessorDeclaration(node) ||
        ts.isFunctionExpression(node) ||
        ts.isArrowFunction(node)) &&
      node.body
    ) {
      let name = nameOf(node);
      const cls = ts.isClassLike(node.parent) && node.parent.name ? node.parent.name.text : undefined;
      if (cls) name = `${cls}.${name}`;
      const first = line(node.getStart(source));
      found.push({ file: rel(file), name, line: first, lines: line(node.getEnd()) - first + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/**
 * The function definitions of a C file: a top-level `{` whose statement began at column 0 with
 * a name followed by `(` (not a struct, enum, union or initializer). Comments, strings and
 * character literals are blanked first, so their braces do not count.
 */
function cFunctions(file, text) {
  const code = text
    .replace(/\/\*[\s\S]*?\*\//g, (m) => m.replace(/[^\n]/g, ' '))
    .replace(/\/\/[^\n]*/g, (m) => ' '.repeat(m.length))
    .replace(/"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'/g, (m) => ' '.repeat(m.length));
  const lines = code.split('\n');
  const found = [];
  let depth = 0;
  let head = ''; // the text since the last top-level `;` or `}`
  let headLine = 0;
  let open; // { name, line } of the function whose body is open
  for (let i = 0; i < lines.length; i++) {
    const text = lines[i];
    if (depth === 0 && /^\s*#/.test(text)) continue; // preprocessor
    for (const ch of text) {
      if (depth === 0) {
        if (ch === '{') {
          const m = /([A-Za-z_]\w*)\s*\([^;{}]*\)\s*$/.exec(head.trim());
          const isType = /^\s*(typedef\b|struct\b|enum\b|union\b|static\s+const\b|const\b)/.test(head) && !m;
          open = m && !/=\s*$/.test(head) && !isType ? { name: m[1], line: headLine + 1 } : undefined;
          depth = 1;
          continue;
        }
        if (ch === ';') {
          head = '';
          continue;
        }
        if (head.trim() === '' && ch.trim() !== '') headLine = i;
        head += ch;
      } else if (ch === '{') depth += 1;
      else if (ch === '}') {
        depth -= 1;
        if (depth === 0) {
          if (open)
            found.push({ file: rel(file), name: open.name, line: open.line, lines: i + 1 - open.line + 1 });
          open = undefined;
          head = '';
        }
      }
    }
    if (depth === 0) head += '\n';
  }
  return found;
}

/** The strongly connected components of more than one file (Tarjan), each sorted, as paths. */
function circles(graph) {
  let index = 0;
  const stack = [];
  const on = new Set();
  const idx = new Map();
  const low = new Map();
  const out = [];
  const connect = (v) => {
    idx.set(v, index);
    low.set(v, index);
    index += 1;
    stack.push(v);
    on.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        connect(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const component = [];
      let w;
      do {
        w = stack.pop();
        on.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1) out.push(component.sort());
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) connect(v);
  return out;
}

/** src/'s import graph: file → the files of src/ it imports (relative specifiers, type-only too). */
function importGraph() {
  const graph = new Map();
  for (const file of listTs(SRC)) {
    const targets = new Set();
    for (const { specifier } of importsOf(file, readFileSync(file, 'utf8'))) {
      if (!specifier?.startsWith('.')) continue;
      const target = resolve(dirname(file), specifier.replace(/\.js$/, '.ts'));
      if (target.startsWith(SRC) && existsSync(target)) targets.add(rel(target));
    }
    graph.set(rel(file), [...targets]);
  }
  return graph;
}

/** Runtime values exported by each entry point of package.json's `exports` (dist/ must be built). */
async function exportedValues() {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
  const out = {};
  for (const [entry, target] of Object.entries(pkg.exports ?? {})) {
    if (entry.includes('*')) continue; // files, not a module
    const path = join(ROOT, typeof target === 'string' ? target : target.default);
    if (!existsSync(path)) {
      out[entry] = { error: `${rel(path)} is not built (npm run build)` };
      continue;
    }
    const names = Object.keys(await import(pathToFileURL(path).href)).sort();
    out[entry] = { count: names.length, names };
  }
  return out;
}

const listC = (dir) =>
  existsSync(dir)
    ? readdirSync(dir)
        .filter((n) => /\.[ch]$/.test(n))
        .map((n) => join(dir, n))
    : [];

async function measure({ withExports }) {
  const tsFiles = listTs(SRC);
  const cFiles = listC(NATIVE);
  const files = [...tsFiles, ...cFiles].map((f) => ({
    file: rel(f),
    lines: linesOf(readFileSync(f, 'utf8')),
  }));
  const functions = [
    ...tsFiles.flatMap((f) => tsFunctions(f, readFileSync(f, 'utf8'))),
    ...cFiles.flatMap((f) => cFunctions(f, readFileSync(f, 'utf8'))),
  ];
  const longest = (list, where) =>
    list
      .filter((x) => x.file.startsWith(where))
      .sort((a, b) => b.lines - a.lines)
      .slice(0, TOP);
  const session = functions.filter((f) => f.file.startsWith('src/session/'));
  return {
    files: { src: longest(files, 'src/'), native: longest(files, 'native/') },
    functions: { src: longest(functions, 'src/'), native: longest(functions, 'native/') },
    session: {
      sessionTsLines: files.find((f) => f.file === 'src/session/session.ts')?.lines ?? null,
      functionsOver: session
        .filter((f) => f.lines > SESSION_FUNCTION_LINES)
        .sort((a, b) => b.lines - a.lines),
      bound: SESSION_FUNCTION_LINES,
    },
    circles: circles(importGraph()),
    ...(withExports ? { exports: await exportedValues() } : {}),
  };
}

function print(shape) {
  const row = (x) => `  ${String(x.lines).padStart(5)}  ${x.file}${x.name ? `:${x.line} ${x.name}` : ''}`;
  const w = (s) => process.stdout.write(`${s}\n`);
  w('longest files, src/:');
  for (const x of shape.files.src) w(row(x));
  w('longest files, native/:');
  for (const x of shape.files.native) w(row(x));
  w('longest functions, src/:');
  for (const x of shape.functions.src) w(row(x));
  w('longest functions, native/:');
  for (const x of shape.functions.native) w(row(x));
  const s = shape.session;
  w(
    `src/session/: session.ts ${s.sessionTsLines} lines; ${s.functionsOver.length} function(s) over ${s.bound} lines`,
  );
  for (const x of s.functionsOver) w(row(x));
  w(`import circles in src/: ${shape.circles.length}`);
  for (const c of shape.circles) w(`  ${c.join(' ↔ ')}`);
  if (shape.exports) {
    w('runtime values exported, per entry point:');
    for (const [entry, e] of Object.entries(shape.exports)) w(`  ${entry}: ${e.error ?? e.count}`);
  }
}

const args = process.argv.slice(2).filter((a, i, all) => a !== '--root' && all[i - 1] !== '--root');
for (const a of args) {
  if (!['--json', '--check'].includes(a)) {
    console.error(`shape: unknown argument ${JSON.stringify(a)} (accepted: --json, --check, --root DIR)`);
    process.exit(2);
  }
}
if (!existsSync(SRC)) {
  console.error(`shape: no src/ under ${ROOT}`);
  process.exit(2);
}
if (args.includes('--check')) {
  const found = circles(importGraph());
  for (const c of found) console.error(`import circle: ${c.join(' ↔ ')}`);
  if (found.length > 0) {
    console.error(
      `shape: ${found.length} import circle(s) in src/ (move the shared names to a file of their own)`,
    );
    process.exit(1);
  }
} else {
  const shape = await measure({ withExports: true });
  if (args.includes('--json')) process.stdout.write(`${JSON.stringify(shape, null, 2)}\n`);
  else print(shape);
}

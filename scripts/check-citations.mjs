#!/usr/bin/env node
// Checks that the repository cites only what it holds: no comment, docs page or message names
// a document that lives outside it — the lifecycle ADR and its amendment ("ADR-127 §2"), the
// shared design notes ("design.md §4") and platform notes ("notes/peers-and-platform.md"), or a
// tracker item ("issue 3 item 2"). Decisions are
// cited as `decisions.md D<n>` (docs/decisions.md); everything else points to docs/ or stands
// alone.
// Usage: node scripts/check-citations.mjs [ROOT]   (default: the current directory)
// Exit 0 when none is found; else 1, one line per hit: `path:line: text`.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';

/** What is searched, relative to ROOT: folders (recursively) and single files. */
const SEARCHED = [
  'src',
  'native',
  'test',
  'bench',
  'stress',
  'scripts',
  'examples',
  'bin',
  'docs',
  'README.md',
];
const EXTENSIONS = /\.([mc]?[tj]s|tsx|c|h|sh|md|json)$/;
/** Never searched: the two files that spell the patterns out (build output is not in SEARCHED). */
const SKIPPED = new Set(['check-citations.mjs', 'check-citations.test.ts']);

/** Each outside citation, as it is written in this repository's history. */
const OUTSIDE = [
  { what: 'the lifecycle ADR', pattern: /\bADR[-_ ]?\d+/i },
  { what: 'its amendment', pattern: /\bamendment §/i },
  { what: 'the shared design notes', pattern: /\bdesign\.md\b/i },
  { what: 'the shared notes', pattern: /(^|[\s(`])(\.\.\/shared\/|notes\/[\w-]+\.md)/ },
  // "issue 3", "issue #3", "issues 9–12"; not English such as "the issue 2 times".
  { what: 'a tracker item', pattern: /\bissues? #?\d+(?!\s+times\b)/i },
];

function* files(path) {
  let stat;
  try {
    stat = statSync(path);
  } catch {
    return; // a folder this checkout does not have (examples/ is optional)
  }
  if (stat.isFile()) {
    if (EXTENSIONS.test(path)) yield path;
    return;
  }
  for (const entry of readdirSync(path)) {
    if (!SKIPPED.has(entry)) yield* files(join(path, entry));
  }
}

const root = process.argv[2] ?? process.cwd();
const hits = [];
for (const top of SEARCHED) {
  for (const file of files(join(root, top))) {
    const lines = readFileSync(file, 'utf8').split('\n');
    lines.forEach((line, i) => {
      const found = OUTSIDE.find((o) => o.pattern.test(line));
      if (found) hits.push(`${relative(root, file)}:${i + 1}: cites ${found.what}: ${line.trim()}`);
    });
  }
}
for (const hit of hits) process.stdout.write(`${hit}\n`);
if (hits.length > 0) {
  process.stdout.write(
    `${hits.length} citation(s) of documents outside the repository: cite docs/decisions.md (D<n>) or docs/, or let the sentence stand alone\n`,
  );
  process.exitCode = 1;
}

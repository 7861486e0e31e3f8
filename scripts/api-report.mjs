// The API report: every name each entry point of package.json's `exports` makes public, with its
// type, written by @microsoft/api-extractor into etc/<name>.api.md (`.` → tether.api.md,
// `./ledger` → tether-ledger.api.md). A change to a report is a reviewed change of the surface.
//
//   node scripts/api-report.mjs            exit 1 when a report differs from the surface (npm run lint)
//   node scripts/api-report.mjs --update   rewrite the reports (npm run api)
//   --root DIR   the checkout to read (default: this one)
//   --dts DIR    read the .d.ts files already in DIR instead of emitting them
//
// The .d.ts files come from `tsc -p tsconfig.json --emitDeclarationOnly` into build/api/dts/,
// incremental (build/api/dts.tsbuildinfo): the check reads the source as it is now, not a dist/
// built before the last edit. Settings shared by every entry point are in api-extractor.json.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const args = process.argv.slice(2);
let root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
let dtsDir;
let update = false;
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  if (a === '--update') update = true;
  else if (a === '--root' && args[i + 1]) root = resolve(args[++i]);
  else if (a === '--dts' && args[i + 1]) dtsDir = resolve(args[++i]);
  else {
    console.error(
      `api-report: unknown argument ${JSON.stringify(a)} (accepted: --update, --root DIR, --dts DIR)`,
    );
    process.exit(2);
  }
}

const REPORT_FOLDER = join(root, 'etc');
const TEMP_FOLDER = join(root, 'build/api/temp');

/** Each entry point with types: its `exports` key, its .d.ts under dist/ and its report's name. */
function entryPoints(pkg) {
  const entries = [];
  for (const [key, target] of Object.entries(pkg.exports ?? {})) {
    if (typeof target !== 'object' || typeof target.types !== 'string') continue; // ./schemas/*: JSON
    const dts = target.types.replace(/^\.\/dist\//, '');
    const suffix = key === '.' ? '' : `-${key.replace(/^\.\//, '').replaceAll('/', '-')}`;
    entries.push({ key, dts, report: `${pkg.name}${suffix}` });
  }
  return entries;
}

/** Emits src/'s declarations into build/api/dts/; returns the folder. */
function emitDeclarations() {
  const out = join(root, 'build/api/dts');
  const tsc = join(root, 'node_modules/typescript/bin/tsc');
  const r = spawnSync(
    process.execPath,
    [
      tsc,
      ...['-p', join(root, 'tsconfig.json'), '--emitDeclarationOnly', '--declaration'],
      ...['--declarationMap', 'false', '--sourceMap', 'false', '--outDir', out],
      ...['--incremental', '--tsBuildInfoFile', join(root, 'build/api/dts.tsbuildinfo')],
    ],
    { cwd: root, encoding: 'utf8' },
  );
  if (r.status !== 0) {
    console.error(`api-report: tsc could not emit the declarations:\n${r.stdout}${r.stderr}`);
    process.exit(2);
  }
  return out;
}

// The lines of `after` not in `before` (+) and of `before` not in `after` (−), in order.
function lineDiff(before, after) {
  const had = new Set(before.split('\n'));
  const has = new Set(after.split('\n'));
  return [
    ...before
      .split('\n')
      .filter((l) => l.trim() && !has.has(l))
      .map((l) => `  - ${l}`),
    ...after
      .split('\n')
      .filter((l) => l.trim() && !had.has(l))
      .map((l) => `  + ${l}`),
  ];
}

const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const entries = entryPoints(pkg);
const dts = dtsDir ?? emitDeclarations();
const { CompilerState, Extractor, ExtractorConfig } = createRequire(join(root, 'package.json'))(
  '@microsoft/api-extractor',
);

const configPath = join(root, 'api-extractor.json');
const base = ExtractorConfig.loadFile(configPath);
const configs = entries.map((e) =>
  ExtractorConfig.prepare({
    configObject: {
      ...base,
      projectFolder: root,
      mainEntryPointFilePath: join(dts, e.dts),
      apiReport: { ...base.apiReport, reportFileName: e.report },
    },
    configObjectFullPath: configPath,
    packageJsonFullPath: join(root, 'package.json'),
  }),
);
// One TypeScript program for every entry point: the .d.ts files are read once.
const compilerState = CompilerState.create(configs[0], {
  additionalEntryPoints: configs.map((c) => c.mainEntryPointFilePath),
});

if (update) mkdirSync(REPORT_FOLDER, { recursive: true });
const problems = [];
for (const [i, e] of entries.entries()) {
  const config = configs[i];
  const reportPath = config.reportFilePath;
  const before = existsSync(reportPath) ? readFileSync(reportPath, 'utf8') : undefined;
  const result = Extractor.invoke(config, {
    localBuild: update,
    compilerState,
    messageCallback(message) {
      // Errors are said here; the findings about the surface are in the report, and a report
      // that differs is said below.
      if (message.logLevel === 'error') {
        problems.push(`${e.key}: ${message.formatMessageWithLocation(root)}`);
      }
      message.handled = true;
    },
  });
  const name = relative(root, reportPath);
  if (update) {
    if (result.apiReportChanged) console.log(`api-report: wrote ${name} (${e.key})`);
    continue;
  }
  if (before === undefined) {
    problems.push(`${e.key}: ${name} is missing; \`npm run api\` writes it`);
  } else if (result.apiReportChanged) {
    const after = readFileSync(config.reportTempFilePath, 'utf8');
    problems.push(
      [
        `${e.key}: the surface differs from ${name} (the surface now: ${relative(root, config.reportTempFilePath)}):`,
        ...lineDiff(before, after),
      ].join('\n'),
    );
  }
}

// A report whose entry point is gone is a surface removed without review.
const expected = new Set(configs.map((c) => c.reportFilePath));
for (const file of existsSync(REPORT_FOLDER) ? readdirSync(REPORT_FOLDER) : []) {
  if (!file.endsWith('.api.md') || expected.has(join(REPORT_FOLDER, file))) continue;
  if (update) {
    rmSync(join(REPORT_FOLDER, file));
    console.log(`api-report: deleted etc/${file} (no entry point of package.json's exports)`);
    continue;
  }
  problems.push(`etc/${file} reports no entry point of package.json's exports; delete it or add the entry`);
}

if (problems.length > 0) {
  console.error(problems.join('\n'));
  if (!update) {
    console.error(
      `api-report: the public surface changed without its report (${relative(root, TEMP_FOLDER)}/ holds the new ones).\n` +
        'If the change is meant, run `npm run api` and commit etc/: the diff is the review of the surface.',
    );
  }
  process.exit(1);
}
if (!update) console.log(`api-report: ${entries.length} entry points match etc/`);

// native/tether.h is the one record of the contract between the native library and its binding:
// this test reads it and fails on a drift — a tp_* function declared otherwise than
// src/proc/native.ts's koffi table (NATIVE_FUNCTIONS) says, a constant of the binding (`TP`) or
// of the JS path (READ_BUFFER_BYTES, PF_KTHREAD, the walk's record fields…) other than the
// header's, a tp_* function defined in native/*.c but not declared there (docs/decisions.md D22).
// The compiler holds the C side to the header (scan.c and spool.c include it); this holds the
// TypeScript side.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ENVIRON_BYTE_BUDGET, ENVIRON_TIME_BUDGET_MS } from '../../src/proc/environ.js';
import { NATIVE_FUNCTIONS, NATIVE_STRUCTS, TP } from '../../src/proc/native.js';
import { READ_BUFFER_BYTES } from '../../src/proc/read.js';
import { PF_KTHREAD } from '../../src/proc/stat.js';
import { WALK_RECORD } from '../../src/proc/table.js';
import { TAG_HEX_DIGITS, TAG_PREFIX } from '../../src/proc/tag.js';
import { ROOT } from '../support/paths.js';

const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');
const withoutComments = (text: string) => text.replace(/\/\*[\s\S]*?\*\//g, ' ').replace(/\/\/[^\n]*/g, '');

// An integer expression of the header: digits, hex, + - * and parentheses, an L suffix.
function evaluate(expr: string, known: Map<string, number | string>): number | string {
  const text = expr.trim();
  if (/^"[^"]*"$/.test(text)) return text.slice(1, -1);
  const plain = text.replace(/\b(\d+)L\b/g, '$1').replace(/\b[A-Z_][A-Z0-9_]*\b/g, (name) => {
    const value = known.get(name);
    if (typeof value !== 'number')
      throw new Error(`premise broken: ${name} in "${text}" is not a known number`);
    return String(value);
  });
  if (!/^[\d\sxa-fA-F()*+-]+$/.test(plain))
    throw new Error(`premise broken: "${text}" is not an integer expression`);
  return Function(`return (${plain});`)() as number;
}

/** Every `#define NAME value` and every enumerator of `text`, in order. */
function constantsOf(text: string, prefix: string): Map<string, number | string> {
  const code = withoutComments(text);
  const found = new Map<string, number | string>();
  const pattern = new RegExp(`^#define (${prefix}\\w*) (.+)$|enum\\s*\\w*\\s*\\{([^}]*)\\}`, 'gm');
  for (const m of code.matchAll(pattern)) {
    if (m[1] !== undefined) {
      found.set(m[1], evaluate(m[2] as string, found));
      continue;
    }
    let next = 0;
    for (const item of (m[3] as string).split(',')) {
      const [name, expr] = item.split('=').map((s) => s.trim());
      if (!name?.startsWith(prefix)) continue;
      const value = expr === undefined ? next : (evaluate(expr, found) as number);
      found.set(name, value);
      next = value + 1;
    }
  }
  return found;
}

// A C type in koffi's words, as NATIVE_FUNCTIONS writes it: a C string stays `const char *`, a
// pointer to a struct is that struct's pointer, any other pointer is `void *`.
function koffiType(cType: string): string {
  const type = cType.replace(/\s+/g, ' ').replace(/ \*/g, ' *').trim();
  if (type === 'const char *') return type;
  const struct = /^(?:const )?struct (\w+) \*$/.exec(type);
  if (struct && struct[1] !== 'pollfd') return `${struct[1]} *`;
  return type.endsWith('*') ? 'void *' : type;
}

/** The tp_* declarations of the header as koffi rows: `[result, ...parameters]`. */
function declarationsOf(text: string): Map<string, string[]> {
  const code = withoutComments(text).replace(/^#.*$/gm, '');
  const found = new Map<string, string[]>();
  for (const m of code.matchAll(/([\w *]+?)\s*\b(tp_\w+)\s*\(([^)]*)\)\s*;/g)) {
    const params = (m[3] as string).split(',').map((p) =>
      p
        .trim()
        .replace(/\b\w+$/, '')
        .replace(/\s*\*\s*$/, ' *'),
    );
    found.set(m[2] as string, [koffiType(m[1] as string), ...params.map(koffiType)]);
  }
  return found;
}

/** The `struct tp_* { … };` of the header, each member `[name, koffi type]` in order. */
function structsOf(text: string): Map<string, string[][]> {
  const found = new Map<string, string[][]>();
  for (const m of withoutComments(text).matchAll(/struct (tp_\w+) \{([^}]*)\};/g)) {
    const members = (m[2] as string)
      .split(';')
      .map((line) => line.trim())
      .filter(Boolean)
      .flatMap((line) => {
        const [, type, names] = /^(.*?[\s*])(\w+(?:\s*,\s*\w+)*)$/.exec(line) ?? [];
        if (type === undefined || names === undefined)
          throw new Error(`premise broken: member "${line}" not read`);
        return names.split(',').map((name) => [name.trim(), koffiType(type.trim().replace(/\s*\*$/, ' *'))]);
      });
    found.set(m[1] as string, members);
  }
  return found;
}

const header = read('native/tether.h');
const constants = constantsOf(header, 'TP_');

// The JS path's constants the native reads mirror: [header name, JS value, where]. Those private
// to their module (details.ts STATUS_READ_BYTES, table.ts W_*) are read from its source.
function jsMirrors(): [string, number | string, string][] {
  const details = read('src/proc/details.ts');
  const statusBytes = Number(/const STATUS_READ_BYTES = ([\d_]+);/.exec(details)?.[1]?.replace(/_/g, ''));
  const fields = [...read('src/proc/table.ts').matchAll(/^const (W_\w+) = (\d+);$/gm)];
  if (fields.length < 10) throw new Error('premise broken: no W_* field read from src/proc/table.ts');
  return [
    ['TP_READ_BUFFER_BYTES', READ_BUFFER_BYTES, 'READ_BUFFER_BYTES (src/proc/read.ts)'],
    ['TP_ENVIRON_BYTE_BUDGET', ENVIRON_BYTE_BUDGET, 'ENVIRON_BYTE_BUDGET (src/proc/environ.ts)'],
    ['TP_ENVIRON_TIME_BUDGET_MS', ENVIRON_TIME_BUDGET_MS, 'ENVIRON_TIME_BUDGET_MS (src/proc/environ.ts)'],
    ['TP_STATUS_READ_BYTES', statusBytes, 'STATUS_READ_BYTES (src/proc/details.ts)'],
    ['TP_PF_KTHREAD', PF_KTHREAD, 'PF_KTHREAD (src/proc/stat.ts)'],
    ['TP_TAG_PREFIX', TAG_PREFIX, 'TAG_PREFIX (src/proc/tag.ts)'],
    ['TP_TAG_HEX_DIGITS', TAG_HEX_DIGITS, 'TAG_HEX_DIGITS (src/proc/tag.ts)'],
    ['TP_WALK_RECORD', WALK_RECORD, 'WALK_RECORD (src/proc/table.ts)'],
    ...fields.map(([, name, value]): [string, number, string] => [
      `TP_${name}`,
      Number(value),
      `${name} (src/proc/table.ts)`,
    ]),
  ];
}

describe('native/tether.h against its binding', () => {
  it('declares each tp_* function as the koffi table does, and no other', () => {
    const declared = declarationsOf(header);
    expect(declared.size, 'premise broken: no tp_* declaration read from native/tether.h').toBeGreaterThan(
      10,
    );
    const table = Object.fromEntries(Object.entries(NATIVE_FUNCTIONS).map(([name, row]) => [name, [...row]]));
    expect(table, 'src/proc/native.ts NATIVE_FUNCTIONS differs from native/tether.h').toEqual(
      Object.fromEntries(declared),
    );
  });

  it('lays out each struct as the koffi table does, member by member', () => {
    const declared = structsOf(header);
    expect(declared.size, 'premise broken: no struct read from native/tether.h').toBeGreaterThan(3);
    const table = Object.fromEntries(
      Object.entries(NATIVE_STRUCTS).map(([name, members]) => [name, members.map((m) => [...m])]),
    );
    expect(table, 'src/proc/native.ts NATIVE_STRUCTS differs from native/tether.h').toEqual(
      Object.fromEntries(declared),
    );
  });

  it('declares every tp_* function native/scan.c and native/spool.c define', () => {
    const declared = declarationsOf(header);
    for (const file of ['native/scan.c', 'native/spool.c']) {
      const code = withoutComments(read(file));
      const defined = [...code.matchAll(/^[a-z][\w ]*?\**\s*\b(tp_\w+)\(/gm)].map((m) => m[1] as string);
      expect(defined.length, `premise broken: no tp_* function read from ${file}`).toBeGreaterThan(0);
      for (const name of defined)
        expect(declared.has(name), `${file} defines ${name}, not in tether.h`).toBe(true);
    }
  });

  it('gives every constant the value the binding reads (TP)', () => {
    const binding = new Map(Object.entries(TP).map(([name, value]) => [`TP_${name}`, value]));
    for (const [name, value] of binding) {
      expect(constants.get(name), `src/proc/native.ts TP.${name.slice(3)} is not tether.h's ${name}`).toEqual(
        value,
      );
    }
  });

  it('gives the JS path the same sizes, budgets, flags, tag and walk records', () => {
    for (const [name, value, where] of jsMirrors()) {
      expect(constants.get(name), `${where} is not tether.h's ${name}`).toBe(value);
    }
  });

  it('has no constant that neither the binding nor the JS path is checked against', () => {
    const checked = new Set([
      ...Object.keys(TP).map((name) => `TP_${name}`),
      ...jsMirrors().map(([name]) => name),
    ]);
    expect([...constants.keys()].filter((name) => !checked.has(name))).toEqual([]);
  });

  it('gives native/spool.c its stages and results (TP_SPOOL_*) from the header, with no copy of its own', () => {
    const spool = read('native/spool.c');
    expect(spool, 'native/spool.c does not include tether.h').toMatch(/^#include "tether\.h"/m);
    expect(
      [...constantsOf(spool, '').keys()],
      "native/spool.c spells constants of its own beside tether.h's",
    ).toEqual([]);
    const used = new Set(withoutComments(spool).match(/\bTP_SPOOL_\w+/g));
    expect(used.size, 'premise broken: native/spool.c uses no TP_SPOOL_* constant').toBeGreaterThan(5);
  });
});

// Fuzz of the two parsers tether trusts with a command's end: the completion-line stripper and
// the sweep-output parser. Seeded loops: a failure names its case number and reproduces.
import { describe, expect, it } from 'vitest';
import {
  CompletionStripper,
  completionLine,
  createNonce,
  StartStripper,
  startLine,
  stripCompletion,
} from '../../src/sandbox/completion.js';
import { parseSweepOutput } from '../../src/sandbox/sweep-output.js';
import { below, prng } from './prng.js';

const NONCE = createNonce();

function randomBytes(random: () => number, n: number): Buffer {
  // Biased towards the bytes that matter: newlines, the marker's letters, digits, spaces.
  const alphabet = Buffer.from('\n\n tether-end exit refused 0123456789abcdef\0\xff');
  const out = Buffer.alloc(n);
  for (let i = 0; i < n; i++)
    out[i] = random() < 0.8 ? (alphabet[below(random, alphabet.length)] as number) : below(random, 256);
  return out;
}

// Pieces that look like the line but are not it: another nonce, a cut tail, a bad status.
function decoy(random: () => number): string {
  const other = createNonce();
  return [
    `\ntether-end ${other} exit 0\n`,
    `\ntether-end ${NONCE} exit 256\n`,
    `\ntether-end ${NONCE} exit x\n`,
    `\ntether-end ${NONCE} exi`,
    `tether-end ${NONCE} `,
    `\ntether-end ${NONCE.slice(0, 31)} exit 0\n`,
  ][below(random, 6)] as string;
}

function feed(stdout: Buffer, random: () => number): { out: Buffer; completion: unknown } {
  const s = new CompletionStripper(NONCE);
  const parts: Buffer[] = [];
  for (let i = 0; i < stdout.length; ) {
    const n = 1 + below(random, 40);
    parts.push(s.push(stdout.subarray(i, i + n)));
    i += n;
  }
  parts.push(s.end());
  return { out: Buffer.concat(parts), completion: s.completion };
}

describe('the completion-line stripper', () => {
  it('gives back the command bytes exactly and the status, over 3000 random outputs and chunkings', () => {
    const random = prng(42);
    for (let c = 0; c < 3000; c++) {
      let body = randomBytes(random, below(random, 300));
      if (random() < 0.3) body = Buffer.concat([body, Buffer.from(decoy(random), 'latin1')]);
      // The real nonce never occurs in the command's bytes by chance (128 random bits).
      const real = new RegExp(
        `tether-end ${NONCE} (?:exit (?:\\d|\\d\\d|1\\d\\d|2[0-4]\\d|25[0-5])|refused \\d+ \\d+)\\n`,
      );
      if (real.test(body.toString('latin1'))) continue;
      const mode = below(random, 3); // 0 no line; 1 line last; 2 line then a leftover's bytes
      const status = below(random, 256);
      const after = mode === 2 ? randomBytes(random, below(random, 50)) : Buffer.alloc(0);
      const stdout =
        mode === 0 ? body : Buffer.concat([body, Buffer.from(completionLine(NONCE, status)), after]);
      const { out, completion } = feed(stdout, random);
      if (mode === 0) {
        expect(completion, `case ${c}: a line found where none was`).toBeUndefined();
        expect(out.equals(stdout), `case ${c}: bytes changed without a line`).toBe(true);
      } else {
        expect(completion, `case ${c}: the line was missed`).toEqual({ kind: 'exit', status });
        expect(out.equals(Buffer.concat([body, after])), `case ${c}: not byte-exact`).toBe(true);
      }
    }
  });

  it('never finds a line in a strict prefix of the line', () => {
    const line = Buffer.from(completionLine(NONCE, 0));
    for (let n = 0; n < line.length; n++) {
      const { out, completion } = feed(Buffer.concat([Buffer.from('out'), line.subarray(0, n)]), prng(n));
      expect(completion, `prefix of ${n} bytes`).toBeUndefined();
      expect(out.length).toBe(3 + n);
    }
  });

  it('passes each complete line at once: a newline is never held back', () => {
    const s = new CompletionStripper(NONCE);
    expect(s.push(Buffer.from('step 1: building\n')).toString()).toBe('step 1: building\n');
    expect(s.push(Buffer.from('a\n\n')).toString()).toBe('a\n\n');
    // Only what could begin the line is held: a partial marker at the end of an unfinished line.
    expect(s.push(Buffer.from('partial tether-e')).toString()).toBe('partial ');
    expect(s.push(Buffer.from('nd of nothing\n')).toString()).toBe('tether-end of nothing\n');
    expect(s.push(Buffer.from(`last${completionLine(NONCE, 0)}`)).toString()).toBe('last');
    expect([s.end().length, s.completion]).toEqual([0, { kind: 'exit', status: 0 }]);
  });

  it("reads the helper's childless end, and nothing else after the status", () => {
    for (let seed = 0; seed < 20; seed++) {
      const { out, completion } = feed(Buffer.from(`out tether-end ${NONCE} exit 3 childless\n`), prng(seed));
      expect([out.toString(), completion]).toEqual(['out ', { kind: 'exit', status: 3, childless: true }]);
    }
    for (const tail of [
      'exit 3 childles',
      'exit 3 childless ',
      'exit 3  childless',
      'exit 3 kids',
      'exit childless',
    ]) {
      const text = `tether-end ${NONCE} ${tail}\n`;
      const { out, completion } = feed(Buffer.from(text), prng(1));
      expect([out.toString(), completion], tail).toEqual([text, undefined]);
    }
  });

  it('reads a refusal', () => {
    const { completion } = feed(Buffer.from(`tether-end ${NONCE} refused 10 20\n`), prng(1));
    expect(completion).toEqual({ kind: 'refused', received: 10, expected: 20 });
  });
});

const TAG = 'TETHER_SESSION_0123456789abcdef0123456789abcdef';

interface Model {
  text: string;
  stopped: number[];
  survivors: number[];
  complete: boolean;
}

// A valid output of the sweep program, from a random model of what it found and did.
function validOutput(random: () => number): Model {
  const lines = [`tether-sweep 2 begin ${TAG}`, `reader ${random() < 0.5 ? 'grep-z' : 'tr'}`];
  const n = below(random, 6);
  const stopped: number[] = [];
  const survivors: number[] = [];
  const ends: string[] = [];
  for (let i = 0; i < n; i++) {
    const pid = 2 + below(random, 100000);
    const start = below(random, 1e9);
    const by = random() < 0.5 ? 'carrier -' : `descendant ${2 + below(random, 1000)}`;
    lines.push(`found ${pid} ${start} ${below(random, 1000)} ${below(random, 2000)} ${by}`);
    lines.push(`comm ${pid} ${start} a (b) c`, `cmdline ${pid} ${start} sleep 30 `);
    lines.push(`signal ${pid} ${start} TERM`);
    if (random() < 0.3) lines.push(`signal ${pid} ${start} KILL`);
    const survived = random() < 0.2;
    (survived ? survivors : stopped).push(pid);
    ends.push(`end ${pid} ${start} ${survived ? 'survived-kill' : 'gone'}`);
  }
  if (random() < 0.2) lines.push('warning UNSETTLED some may still run');
  lines.push(`phase TERM 0 ${below(random, 5000)} ${1 + below(random, 100)} two-empty-scans`);
  lines.push(...ends);
  const complete = random() < 0.9;
  lines.push(
    `done ${TAG} ${below(random, 200)} ${below(random, 9000)} ${complete ? 1 : 0} ${lines.length} ${NONCE}`,
  );
  return { text: `${lines.join('\n')}\n`, stopped, survivors, complete };
}

describe("the wrapper's start announcement", () => {
  it('is removed byte-exact before the command bytes, over 2000 random outputs and chunkings; absent, nothing is removed', () => {
    const random = prng(7);
    const other = startLine(createNonce());
    for (let c = 0; c < 2000; c++) {
      let body = randomBytes(random, below(random, 200));
      // Look-alikes: another nonce's announcement, a cut one.
      if (random() < 0.3) body = Buffer.concat([Buffer.from(other), body]);
      if (random() < 0.2)
        body = Buffer.concat([body, Buffer.from(startLine(NONCE).slice(0, below(random, 46)))]);
      const announced = random() < 0.7;
      const status = below(random, 256);
      const stdout = Buffer.concat([
        Buffer.from(announced ? startLine(NONCE) : ''),
        body,
        Buffer.from(completionLine(NONCE, status)),
      ]);
      const start = new StartStripper(NONCE);
      const lines = new CompletionStripper(NONCE);
      const parts: Buffer[] = [];
      for (let i = 0; i < stdout.length; ) {
        const n = 1 + below(random, 40);
        parts.push(lines.push(start.push(stdout.subarray(i, i + n))));
        i += n;
      }
      parts.push(lines.push(start.end()), lines.end());
      expect(start.announced, `case ${c}`).toBe(announced);
      expect(Buffer.concat(parts).equals(body), `case ${c}`).toBe(true);
      expect(lines.completion, `case ${c}`).toEqual({ kind: 'exit', status });
      const whole = stripCompletion(stdout, NONCE);
      expect(whole.stdout.equals(body), `case ${c}`).toBe(true);
    }
  });
});

describe('the sweep-output parser', () => {
  it('reads 500 random valid outputs, and no strict prefix of any is finished', () => {
    const random = prng(7);
    for (let c = 0; c < 500; c++) {
      const m = validOutput(random);
      const p = parseSweepOutput(m.text, TAG, NONCE);
      expect([p.reached, p.finished, p.problems], `case ${c}`).toEqual([true, true, []]);
      expect(p.report.complete).toBe(m.complete);
      expect(p.report.stopped.map((r) => r.pid)).toEqual(m.stopped);
      expect(p.report.survivors.map((r) => r.pid)).toEqual(m.survivors);
      expect(p.report.ok).toBe(m.complete && m.survivors.length === 0);
      for (let cut = 0; cut < m.text.length; cut += 1 + below(random, 40)) {
        const q = parseSweepOutput(m.text.slice(0, cut), TAG, NONCE);
        expect(q.finished, `case ${c}: a prefix of ${cut} bytes read as finished`).toBe(false);
        expect(q.report.complete).toBe(false);
        expect(q.report.ok).toBe(false);
      }
    }
  });

  it('never throws and never reads a mangled output as finished unless its last line is a well-formed done', () => {
    const random = prng(99);
    for (let c = 0; c < 2000; c++) {
      const bytes = Buffer.from(validOutput(random).text, 'latin1');
      const edits = 1 + below(random, 4);
      let text = bytes.toString('latin1');
      for (let e = 0; e < edits; e++) {
        const at = below(random, text.length + 1);
        const what = below(random, 4);
        if (what === 0) text = text.slice(0, at) + text.slice(at + 1 + below(random, 20));
        else if (what === 1)
          text = text.slice(0, at) + String.fromCharCode(below(random, 256)) + text.slice(at + 1);
        else if (what === 2) text = `${text}junk ${below(random, 10)}\n`;
        else
          text =
            text.slice(0, at) + randomBytes(random, below(random, 10)).toString('latin1') + text.slice(at);
      }
      const p = parseSweepOutput(text, TAG, NONCE);
      if (p.finished) {
        const last = text.split('\n').at(-2) ?? '';
        expect(last, `case ${c}: finished without a done line last`).toMatch(
          new RegExp(`^done ${TAG} \\d+ \\d+ [01] \\d+ ${NONCE}$`),
        );
        expect(text.endsWith('\n')).toBe(true);
      }
    }
  });

  it('an output without its header never reached the target; one with a foreign tag neither', () => {
    expect(parseSweepOutput('', TAG, NONCE).reached).toBe(false);
    expect(parseSweepOutput('nsenter: cannot open /proc/1/ns/ipc\n', TAG, NONCE).reached).toBe(false);
    const other = 'TETHER_SESSION_ffffffffffffffffffffffffffffffff';
    expect(
      parseSweepOutput(
        `tether-sweep 2 begin ${other}\nreader tr\ndone ${other} 1 1 1 2 ${NONCE}\n`,
        TAG,
        NONCE,
      ).reached,
    ).toBe(false);
  });
  it("reads a done line only with the run's nonce and the count of the lines before it", () => {
    const random = prng(21);
    for (let c = 0; c < 200; c++) {
      const m = validOutput(random);
      const lines = m.text.split('\n');
      const done = lines.at(-2) as string;
      const fields = done.split(' ');
      const body = lines.slice(0, -2);
      const variants: [string, string][] = [
        ['another nonce', [...fields.slice(0, 6), createNonce()].join(' ')],
        ['no nonce (version 1)', fields.slice(0, 5).join(' ')],
        ['a count one too many', [...fields.slice(0, 5), String(Number(fields[5]) + 1), NONCE].join(' ')],
        ['a count one too few', [...fields.slice(0, 5), String(Number(fields[5]) - 1), NONCE].join(' ')],
      ];
      for (const [what, line] of variants) {
        const p = parseSweepOutput(`${[...body, line].join('\n')}\n`, TAG, NONCE);
        expect(p.finished, `case ${c}: ${what} read as finished`).toBe(false);
        expect(p.report.ok).toBe(false);
      }
      // A line written into the program's stdout by another process, anywhere after the header.
      const at = 1 + below(random, body.length);
      const injected = [...body.slice(0, at), 'warning COARSE_SLEEP x', ...body.slice(at), done];
      expect(
        parseSweepOutput(`${injected.join('\n')}\n`, TAG, NONCE).finished,
        `case ${c}: an injected line`,
      ).toBe(false);
      // A line taken out of it (read through /proc/PID/fd/1 by another process), header kept.
      const gone = 1 + below(random, body.length - 1);
      const taken = [...body.slice(0, gone), ...body.slice(gone + 1), done];
      expect(parseSweepOutput(`${taken.join('\n')}\n`, TAG, NONCE).finished, `case ${c}: a taken line`).toBe(
        false,
      );
    }
  });

  it("a forger's answer (phase, end gone, done without the nonce) is not finished", () => {
    const text = [
      `tether-sweep 2 begin ${TAG}`,
      'reader grep-z',
      'found 40 5000 1 0 carrier -',
      'comm 40 5000 sh',
      'cmdline 40 5000 sh forger',
      'signal 40 5000 TERM',
      'phase TERM 0 10 1 two-empty-scans',
      'end 40 5000 gone',
      `done ${TAG} 2 10 1`,
    ].join('\n');
    const p = parseSweepOutput(`${text}\n`, TAG, NONCE);
    expect([p.reached, p.finished, p.report.ok]).toEqual([true, false, false]);
    expect(p.report.stopped).toEqual([]);
  });

  it('an end said twice for one member is malformed', () => {
    const text = [
      `tether-sweep 2 begin ${TAG}`,
      'found 40 5000 1 0 carrier -',
      'end 40 5000 gone',
      'end 40 5000 survived-kill',
    ];
    const p = parseSweepOutput(`${[...text, `done ${TAG} 2 10 1 4 ${NONCE}`].join('\n')}\n`, TAG, NONCE);
    expect(p.finished).toBe(false);
  });

  it('names a program that found no nonce on its stdin: not reached, nothing signalled', () => {
    const p = parseSweepOutput(`tether-sweep 2 no-nonce ${TAG}\n`, TAG, NONCE);
    expect([p.reached, p.noNonce, p.finished]).toEqual([false, true, false]);
  });
});

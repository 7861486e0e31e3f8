// What a tick reads before its walk (docs/guard.md, "Inputs"): the allow file's patterns and the
// registrations, each within its bounds (src/guard/input-file.ts). One that cannot be read this
// tick (a FIFO put in its place, a file over the cap, a read past its deadline) leaves the last
// good read in force, and the tick says so.
import { type Registration, registrationsPath } from '../containment/guard-registrations.js';
import type { GuardSettings } from './options.js';
import { type Pattern, readAllowFile } from './patterns.js';
import { readRegistrations } from './registrations.js';
import type { TickResult } from './tick-result.js';

/** One tick's inputs: the patterns in force (`allowPatterns` first) and the registrations. */
export interface TickInputs {
  patterns: Pattern[];
  entries: Registration[];
}

/**
 * The reader of a guard's inputs, called once a tick: it adds to `result` the problems of what
 * it read (`problems`) and an `INPUT_REFUSED` warning for a file it could not read, naming what
 * applies instead. Remembers each file's last good read across ticks. Never throws.
 */
export function inputReader(settings: GuardSettings): (result: TickResult) => Promise<TickInputs> {
  let lastPatterns: { patterns: Pattern[]; tick: number } | undefined;
  let lastRegistrations: { entries: Registration[]; tick: number } | undefined;
  const { allowFile, stateDir: dir } = settings;

  const readPatterns = async (result: TickResult): Promise<Pattern[]> => {
    const patterns = [...settings.patterns];
    if (allowFile === undefined) return patterns;
    const file = await readAllowFile(allowFile);
    if (file.read === 'ok') {
      lastPatterns = { patterns: file.patterns, tick: result.tick };
      patterns.push(...file.patterns);
      result.problems.push(...file.problems);
    } else if (file.read === 'missing') {
      lastPatterns = undefined;
      result.problems.push({
        source: allowFile,
        message: `cannot read the allow file (${file.why}): its patterns do not apply`,
      });
    } else {
      if (lastPatterns) patterns.push(...lastPatterns.patterns);
      result.warnings.push({
        code: 'INPUT_REFUSED',
        message: `allow file ${allowFile} refused: ${file.why}: ${lastPatterns ? `the ${lastPatterns.patterns.length} patterns read at tick ${lastPatterns.tick} still apply` : 'no pattern of it applies'}`,
      });
    }
    return patterns;
  };

  const readEntries = async (result: TickResult): Promise<Registration[]> => {
    const regs = await readRegistrations(dir);
    if (regs.read !== 'refused') {
      lastRegistrations = { entries: regs.entries, tick: result.tick };
      result.problems.push(...regs.problems);
      return regs.entries;
    }
    const entries = lastRegistrations?.entries ?? [];
    result.warnings.push({
      code: 'INPUT_REFUSED',
      message: `registrations file ${registrationsPath(dir)} refused: ${regs.why}: ${lastRegistrations ? `the ${entries.length} registrations read at tick ${lastRegistrations.tick} still apply until they expire` : 'no registration applies'}`,
    });
    return entries;
  };

  return async (result) => {
    const patterns = await readPatterns(result);
    const entries = await readEntries(result);
    return { patterns, entries };
  };
}

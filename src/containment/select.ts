// Which containment layers a session asks for (decisions.md D9).
import { TetherError } from '../errors.js';

/**
 * The layers, strongest last: `env-tag` (decisions.md D9: always on — the tag also serves attribution,
 * nesting and the sandbox mode), `subreaper` (the helper), `cgroup` (a cgroup v2 per session;
 * needs the helper to join it before exec), `pid-namespace` (opt-in; needs the helper too).
 */
export type ContainmentLayer = 'env-tag' | 'subreaper' | 'cgroup' | 'pid-namespace';

/**
 * `auto` (the default): env tag + helper + cgroup when writable; a layer that cannot be had is
 * skipped and said (a `NO_HELPER` warning, a cgroup note). An explicit list: every layer named
 * must be had, or the spawn throws `CONTAINMENT_UNAVAILABLE`.
 */
export type Containment = 'auto' | readonly ContainmentLayer[];

export const CONTAINMENT_LAYERS: readonly ContainmentLayer[] = [
  'env-tag',
  'subreaper',
  'cgroup',
  'pid-namespace',
];

/** What a session will try, and what it must get. */
export interface ContainmentPlan {
  helper: 'off' | 'try' | 'required';
  cgroup: 'off' | 'try' | 'required';
  pidns: boolean;
}

/** Validates `containment`. Throws `INVALID_OPTION` naming the accepted values. */
export function planContainment(containment: unknown = 'auto'): ContainmentPlan {
  if (containment === 'auto') return { helper: 'try', cgroup: 'try', pidns: false };
  const accepted = `'auto' or a list of ${CONTAINMENT_LAYERS.map((l) => `'${l}'`).join(', ')}`;
  if (!Array.isArray(containment) || containment.length === 0) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid containment: ${JSON.stringify(containment)} (expected ${accepted})`,
    );
  }
  for (const layer of containment) {
    if (!CONTAINMENT_LAYERS.includes(layer)) {
      throw new TetherError(
        'INVALID_OPTION',
        `invalid containment layer ${JSON.stringify(layer)} (expected ${accepted})`,
      );
    }
  }
  const has = (l: ContainmentLayer) => containment.includes(l);
  const needsHelper = has('cgroup') || has('pid-namespace');
  return {
    helper: has('subreaper') || needsHelper ? 'required' : 'off',
    cgroup: has('cgroup') ? 'required' : 'off',
    pidns: has('pid-namespace'),
  };
}

/** Older CLI spellings of a layer, still accepted with a warning: the one name is the library's. */
const OLD_SPELLINGS: Readonly<Record<string, ContainmentLayer>> = { pidns: 'pid-namespace' };

/**
 * Parses a CLI option such as `--containment`: `auto`, or a comma list of layers, spelled as the
 * library spells them (`env-tag`, `subreaper`, `cgroup`, `pid-namespace`). An older spelling
 * (`pidns`) is taken as the layer it names and reported through `onOldSpelling` (default: one
 * `tether: warning:` line on stderr). Throws `INVALID_OPTION` naming `option` and the accepted values.
 */
export function parseContainment(
  option: string,
  text: string,
  onOldSpelling: (message: string) => void = (m) => process.stderr.write(`tether: warning: ${m}\n`),
): Containment {
  if (text.trim() === 'auto') return 'auto';
  const layers = text.split(',').map((s) => {
    const t = s.trim();
    const layer = OLD_SPELLINGS[t];
    if (layer === undefined) return t;
    onOldSpelling(`${option} ${t} is spelled ${layer} now (${t} is still accepted)`);
    return layer;
  });
  const unknown = layers.find((l) => !CONTAINMENT_LAYERS.includes(l as ContainmentLayer));
  if (unknown !== undefined) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ${option} ${JSON.stringify(text)}: ${JSON.stringify(unknown)} is not a layer (expected auto, or a comma list of ${CONTAINMENT_LAYERS.join(', ')})`,
    );
  }
  return layers as ContainmentLayer[];
}

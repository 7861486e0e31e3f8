// Recovery (docs/ledger.md, "Recover"): sessions whose supervisor died, swept and recorded.

export { CGROUP_MIN_AGE_MS, type RemovedCgroup } from '../containment/stale-cgroups.js';
export { removeStaleCgroups } from './cgroups.js';
export { channelTrust, defaultChannelsFile, readChannelsFile } from './channel-trust.js';
export { type KeptEnd, keptSubtrees } from './kept.js';
export { type RecoveredSession, type RecoverOptions, type RecoverResult, recover } from './recover.js';
export type { WouldStop } from './would-stop.js';

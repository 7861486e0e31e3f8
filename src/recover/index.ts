// Recovery (docs/ledger.md, "Recover"): sessions whose supervisor died, swept and recorded.
export { channelTrust, defaultChannelsFile, readChannelsFile } from './channel-trust.js';
export { type KeptEnd, keptSubtrees } from './kept.js';
export { type RecoveredSession, type RecoverOptions, type RecoverResult, recover } from './recover.js';

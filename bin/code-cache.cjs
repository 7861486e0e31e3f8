// The file format of the CLI's code cache (docs/cli.md, "Start-up"), shared by bin/tether.cjs,
// which reads it, and scripts/build-cli.mjs, which checks it:
//
//   bytes 0–3   "TCC1"
//   bytes 4–7   CRC-32 of the bundle's bytes the cache was made from (uint32, little-endian)
//   bytes 8–11  CRC-32 of the V8 data that follows (uint32, little-endian)
//   bytes 12–   V8's cached data (vm.Script's createCachedData)
//
// V8 checks cached data against its own version, its flags and the source's length only, and
// Node 20's V8 does not check the data itself: data for another text of the same length runs
// that text's bytecode, and data damaged in place can crash or hang the process. So nothing
// reaches V8 unless both CRCs match.
'use strict';
const zlib = require('node:zlib');

const MAGIC = Buffer.from('TCC1', 'latin1');
const HEADER = 12;

/**
 * V8's data from the cache file's bytes `file` for the bundle's bytes `bundle`, or the reason it
 * cannot be used: 'unverifiable' (a Node before 20.15: no zlib.crc32), 'foreign' (not this
 * format, or damaged), 'other-bundle' (made from another text).
 */
function cachedData(file, bundle) {
  if (typeof zlib.crc32 !== 'function') return { problem: 'unverifiable' };
  if (file.length <= HEADER || !file.subarray(0, 4).equals(MAGIC)) return { problem: 'foreign' };
  const data = file.subarray(HEADER);
  if (file.readUInt32LE(8) !== zlib.crc32(data)) return { problem: 'foreign' };
  if (file.readUInt32LE(4) !== zlib.crc32(bundle)) return { problem: 'other-bundle' };
  return { data };
}

/** The cache file's bytes for V8's `data`, made from the bundle's bytes `bundle`. Throws without zlib.crc32. */
function cacheFile(data, bundle) {
  const header = Buffer.alloc(HEADER);
  MAGIC.copy(header, 0);
  header.writeUInt32LE(zlib.crc32(bundle), 4);
  header.writeUInt32LE(zlib.crc32(data), 8);
  return Buffer.concat([header, data]);
}

module.exports = { cachedData, cacheFile };

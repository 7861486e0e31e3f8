// Details read once per found process, for the report: cmdline and real uid.
import { readText } from './read.js';

/** `/proc/<pid>/cmdline` with NULs as spaces; '' for a zombie or a kernel thread, undefined when gone. */
export function readCmdline(procRoot: string, pid: number): string | undefined {
  const text = readText(`${procRoot}/${pid}/cmdline`);
  if (text === undefined) return undefined;
  return text.replace(/\0+$/, '').replaceAll('\0', ' ');
}

/** Real uid from the `Uid:` line of `/proc/<pid>/status` (proc(5)); undefined when gone. */
export function readUid(procRoot: string, pid: number): number | undefined {
  const text = readText(`${procRoot}/${pid}/status`);
  const match = text?.match(/^Uid:\s+(\d+)/m);
  return match ? Number(match[1]) : undefined;
}

// `stripFinalNewline` and `lines`, execa's: the output's last newline (`\n` or `\r\n`) dropped
// (default), or the output split into its lines, each without its newline unless
// `stripFinalNewline: false`. A last line with no newline is a line; nothing after the last
// newline is not.

/** How `spawn()` shapes a buffered output: execa's `stripFinalNewline` and `lines`. */
export interface LineOptions {
  stripFinalNewline: boolean;
  /** Split into lines: only for text (a string), as execa's binary encodings ignore it. */
  lines: boolean;
}

/** `value` shaped by `options`: stripped, split, or as it is. */
export function shapeLines(value: string | Buffer, options: LineOptions): string | Buffer | string[] {
  if (options.lines && typeof value === 'string') return splitLines(value, !options.stripFinalNewline);
  return options.stripFinalNewline ? stripFinalNewline(value) : value;
}

/** `value` without its last `\n` or `\r\n`, if it ends with one (strings and bytes alike). */
export function stripFinalNewline<T extends string | Buffer>(value: T): T {
  const n = value.length;
  const at = (i: number) => (typeof value === 'string' ? value.charCodeAt(i) : value[i]);
  if (n === 0 || at(n - 1) !== 0x0a) return value;
  const cut = n >= 2 && at(n - 2) === 0x0d ? n - 2 : n - 1;
  return (typeof value === 'string' ? value.slice(0, cut) : value.subarray(0, cut)) as T;
}

/** The lines of `text`: split after each `\n`, kept with it when `keepNewlines`. */
export function splitLines(text: string, keepNewlines: boolean): string[] {
  const lines: string[] = [];
  let start = 0;
  for (let end = text.indexOf('\n'); end !== -1; end = text.indexOf('\n', start)) {
    const line = text.slice(start, end + 1);
    lines.push(keepNewlines ? line : stripFinalNewline(line));
    start = end + 1;
  }
  if (start < text.length) lines.push(text.slice(start));
  return lines;
}

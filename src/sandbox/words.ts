// Shell-like word splitting for command prefixes given as one string (`--via`, `--shell`,
// `--allow-channel`, the lines of recover's channels file).
import { TetherError } from '../errors.js';

/**
 * Splits a prefix as a shell would split plain words: blanks separate, '…' and "…" quote,
 * a backslash escapes the next character. Throws `INVALID_OPTION` naming `option` for no words,
 * an unbalanced quote, or a first word starting with `-` (an option's left-out value took the
 * next argument: `--shell -- CMD`).
 */
export function splitWords(option: string, text: string): string[] {
  const words: string[] = [];
  let word = '';
  let inWord = false;
  let quote: "'" | '"' | null = null;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i] as string;
    if (quote) {
      if (ch === quote) quote = null;
      else if (ch === '\\' && quote === '"' && i + 1 < text.length) word += text[++i];
      else word += ch;
    } else if (ch === "'" || ch === '"') {
      quote = ch;
      inWord = true;
    } else if (ch === '\\' && i + 1 < text.length) {
      word += text[++i];
      inWord = true;
    } else if (/\s/.test(ch)) {
      if (inWord) words.push(word);
      word = '';
      inWord = false;
    } else {
      word += ch;
      inWord = true;
    }
  }
  if (quote) {
    throw new TetherError('INVALID_OPTION', `invalid ${option} ${JSON.stringify(text)}: unbalanced ${quote}`);
  }
  if (inWord) words.push(word);
  // An option whose value was left out takes the next argument: `--shell -- CMD` would run `--`.
  if (words[0]?.startsWith('-')) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ${option} ${JSON.stringify(text)}: a program name cannot start with '-' (was the value of ${option} left out?)`,
    );
  }
  if (words.length === 0) {
    throw new TetherError(
      'INVALID_OPTION',
      `invalid ${option} ${JSON.stringify(text)}: expected ${option === '--shell' ? "the target's shell as words, such as 'sh' or 'busybox sh'" : "a command prefix such as 'docker exec -i ID'"}`,
    );
  }
  return words;
}

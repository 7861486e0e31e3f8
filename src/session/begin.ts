// A session's begin, once, at its first command — once the helper is spawned and before the
// payload's go, or before a direct spawn: its live-session registration, which lets recover and
// a guard tell this live session from an orphan carrying its tag (src/containment/
// live-session.ts), and its ledger record's begin (src/session/record.ts).
import { type Registered, registerSession, sessionsDir } from '../containment/live-session.js';
import type { SessionTag } from '../proc/tag.js';
import type { SweepWarning } from '../sweep/report.js';
import type { SessionRecorder } from './record.js';

/** The begin of one session; `registration` is removed at its end. */
export class SessionBegin {
  /** The live-session registration, once written (removed at the session's end). */
  registration: Registered | undefined;
  private registrationTried = false;

  constructor(
    private readonly tag: SessionTag,
    private readonly procRoot: string,
    /** The session's notes: a registration that cannot be written is one. */
    private readonly notes: string[],
    /** The session's warnings: a begin that fails unawaited is one (LEDGER_WRITE_FAILED). */
    private readonly warnings: SweepWarning[],
    private readonly recorder: SessionRecorder | undefined,
    /** The record's begin is written synchronously, and what it throws stops the start. */
    private readonly ledgerRequired: boolean,
  ) {}

  /**
   * Registers the session and begins its record with `argv`, each once. With `ledgerRequired`
   * throws the ledger's error (nothing may start); otherwise a failed begin is not awaited: a
   * `LEDGER_WRITE_FAILED` warning of the session says so.
   */
  run(argv: string[]): void {
    this.register();
    if (!this.recorder || this.recorder.begun) return;
    if (this.ledgerRequired) this.recorder.beginSync(argv);
    else this.recorder.beginUnawaited(argv, this.warnings);
  }

  // A failure is a note: the helper, when there is one, is still seen.
  private register(): void {
    if (this.registrationTried) return;
    this.registrationTried = true;
    const dir = sessionsDir();
    try {
      this.registration = registerSession(this.tag.name, dir, this.procRoot);
    } catch (error) {
      this.notes.push(
        `live-session registration: could not be written in ${dir} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}): recover and the guard see this session only by its helper`,
      );
    }
  }
}

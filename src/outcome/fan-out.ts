// fanOut(): run branches side by side under one cancellation, and never join over a branch
// whose end is unknown. docs/outcomes.md "Fan-out".
import { TetherError, type TetherErrorCode } from '../errors.js';
import { checkMs } from '../options.js';
import { isAmbiguousEffect, readSafely } from './classify.js';
import { branchGraceMs } from './grace.js';
import { classify, isTetherCode, rank } from './precedence.js';

/** What a failing branch does to its siblings (docs/outcomes.md "Policies"). */
export type FanOutPolicy = 'fail-fast' | 'wait-all' | 'best-effort';
/** Every policy, the default (`'fail-fast'`) first. */
export const FAN_OUT_POLICIES: readonly FanOutPolicy[] = ['fail-fast', 'wait-all', 'best-effort'];

/** One branch: started with the fan-out's signal, which aborts on every cancellation. */
export type Branch<T> = (signal: AbortSignal) => PromiseLike<T> | T;

/**
 * Why the branches were aborted: the caller's `signal`, a sibling's failure under fail-fast,
 * the `timeoutMs` deadline, `stop(reason)`, or a branch that rejected with an ambiguous effect.
 */
export type CancelCause = 'signal' | 'sibling' | 'timeout' | 'stop' | 'ambiguous';

/** How one branch ended: its value, its rejection, or abandoned (still pending when the grace ended). */
export type BranchOutcome<T> =
  | { index: number; status: 'fulfilled'; value: T }
  | { index: number; status: 'rejected'; reason: unknown }
  | { index: number; status: 'abandoned'; reason: TetherError }
  | { index: number; status: 'pending' };

/** Events of a fan-out, delivered synchronously through `onEvent` (a listener's throw is ignored). */
export type FanOutEvent =
  | { type: 'branch_settled'; index: number; status: 'fulfilled' | 'rejected'; error?: unknown }
  | { type: 'fanout_cancel'; cause: CancelCause; reason: unknown; graceMs: number; pending: number[] }
  /** `error`: `AMBIGUOUS_EFFECT` whose `cause` is a `BRANCH_UNDECIDED` naming the branch and the grace. */
  | { type: 'branch_abandoned'; index: number; error: TetherError };

/** Options of `fanOut()`. */
export interface FanOutOptions {
  /** Default `'fail-fast'`. */
  policy?: FanOutPolicy;
  /** Ms an aborted branch has to settle; default `TETHER_BRANCH_CANCEL_GRACE`, else 5000. */
  graceMs?: number;
  /** Aborting it cancels the fan-out (`CANCELLED`). */
  signal?: AbortSignal;
  /** Ms after which the fan-out is cancelled (`TIMED_OUT`). */
  timeoutMs?: number;
  onEvent?: (event: FanOutEvent) => void;
}

/** What every branch did, in branch order: `results[i]` its value, `errors[i]` its rejection. */
export interface FanOutResult<T> {
  results: (T | undefined)[];
  errors: unknown[];
  outcomes: BranchOutcome<T>[];
}

/**
 * The rejection of a fan-out: `code` the winner (`PRECEDENCE`) of its failures and its cancel —
 * `AMBIGUOUS_EFFECT` when a branch was abandoned or rejected with one, `TIMED_OUT` / `CANCELLED`
 * for a deadline / the caller, else the strongest tether code of the failed branches
 * (`COMMAND_FAILED` when none has one); `cause` the deciding error (the lowest branch index
 * that has the code, or the caller's reason). `results`, `errors`, `outcomes` in branch order.
 */
export class FanOutError<T = unknown> extends TetherError implements FanOutResult<T> {
  readonly results: (T | undefined)[];
  readonly errors: unknown[];
  readonly outcomes: BranchOutcome<T>[];
  /** What aborted the branches, when something did. */
  readonly cancelledBy?: CancelCause;
  constructor(
    code: TetherErrorCode,
    message: string,
    cause: unknown,
    outcomes: BranchOutcome<T>[],
    cancelledBy?: CancelCause,
  ) {
    super(code, message, { cause });
    this.name = 'FanOutError';
    this.outcomes = outcomes;
    this.results = outcomes.map((o) => (o.status === 'fulfilled' ? o.value : undefined));
    this.errors = outcomes.map((o) => ('reason' in o ? o.reason : undefined));
    if (cancelledBy !== undefined) this.cancelledBy = cancelledBy;
  }
}

/** A running fan-out: `await` it for its `FanOutResult`, or `stop(reason)` it. */
export interface FanOut<T> extends PromiseLike<FanOutResult<T>> {
  readonly promise: Promise<FanOutResult<T>>;
  /** Cancels the fan-out (`CANCELLED`, `cause` the reason) unless it has settled. */
  stop(reason?: unknown): void;
}

/**
 * Runs every branch at once, each with one shared AbortSignal. Every cancellation (the caller's
 * `signal`, a sibling's failure under `'fail-fast'`, `timeoutMs`, `stop(reason)`, a branch that
 * rejected with an ambiguous effect) aborts every branch and gives them `graceMs`; a branch still
 * pending then is abandoned (`branch_abandoned`) and the fan-out rejects `AMBIGUOUS_EFFECT` at
 * once, without waiting for it — under every policy. Policies: `'fail-fast'` stops the others on
 * the first failure; `'wait-all'` lets every branch end and rejects if one failed;
 * `'best-effort'` lets every branch end and resolves with what it has. A caller's signal aborted
 * before the call starts no branch. Throws `INVALID_OPTION` (naming the option and what it
 * accepts) before any branch starts. Leaves no timer and no listener on `signal` once settled.
 */
export function fanOut<T>(branches: readonly Branch<T>[], options: FanOutOptions = {}): FanOut<T> {
  const run = new FanOutRun(branches, checkFanOut(branches, options), options);
  run.start();
  const { promise } = run;
  return {
    promise,
    stop: (reason?: unknown) => run.startCancel('stop', reason),
    // biome-ignore lint/suspicious/noThenProperty: a FanOut is awaitable, like a Subprocess.
    then: (onFulfilled, onRejected) => promise.then(onFulfilled, onRejected),
  };
}

/** One fan-out's state: the branches' outcomes, the cancel and its grace, the settling. */
class FanOutRun<T> {
  readonly promise: Promise<FanOutResult<T>>;
  private readonly n: number;
  private readonly outcomes: BranchOutcome<T>[];
  private readonly controller = new AbortController();
  /** Branches that failed before any cancel: their own failures. */
  private readonly beforeCancel = new Set<number>();
  private cancel: { cause: CancelCause; reason: unknown } | undefined;
  private pending: number;
  private done = false;
  private graceTimer: NodeJS.Timeout | undefined;
  private deadline: NodeJS.Timeout | undefined;
  private settle!: { resolve: (r: FanOutResult<T>) => void; reject: (e: unknown) => void };
  private readonly onParentAbort = () => this.startCancel('signal', this.signal?.reason);
  private readonly signal: AbortSignal | undefined;
  private readonly onEvent: FanOutOptions['onEvent'];

  constructor(
    private readonly branches: readonly Branch<T>[],
    private readonly checked: ReturnType<typeof checkFanOut>,
    options: FanOutOptions,
  ) {
    // Read once, as the call gave them: a caller's later change to `options` changes nothing.
    this.signal = options.signal;
    this.onEvent = options.onEvent;
    this.n = branches.length;
    this.pending = this.n;
    this.outcomes = branches.map((_, index) => ({ index, status: 'pending' }));
    this.promise = new Promise<FanOutResult<T>>((resolve, reject) => {
      this.settle = { resolve, reject };
    });
  }

  /** Starts every branch — none under a caller's signal that is already aborted. */
  start(): void {
    const { signal } = this;
    const { timeoutMs } = this.checked;
    if (signal?.aborted) {
      this.cancel = { cause: 'signal', reason: signal.reason };
      const reason = abortReason('signal', signal.reason);
      for (let i = 0; i < this.n; i++) this.outcomes[i] = { index: i, status: 'rejected', reason };
      this.pending = 0;
      this.finish();
      return;
    }
    signal?.addEventListener('abort', this.onParentAbort, { once: true });
    if (timeoutMs !== undefined)
      this.deadline = setTimeout(() => this.startCancel('timeout', timeoutMs), timeoutMs);
    this.branches.forEach((branch, i) => {
      // The start and the adoption both inside one executor: a branch that throws, or returns a
      // promise whose `constructor` or `then` getter throws, is a rejected branch (never a
      // synchronous throw after its siblings started). A fresh native promise: nothing of the
      // branch's value is called here but its `then`, by the resolve function.
      new Promise<T>((resolve) => resolve(branch(this.controller.signal))).then(
        (value) => this.onSettled(i, { index: i, status: 'fulfilled', value }),
        (reason: unknown) => this.onSettled(i, { index: i, status: 'rejected', reason }),
      );
    });
    if (this.n === 0) this.finish();
  }

  /** Every cancellation, whatever its cause: abort all branches once, then the grace. */
  startCancel(cause: CancelCause, reason: unknown): void {
    if (this.cancel || this.done) return;
    const { graceMs } = this.checked;
    this.cancel = { cause, reason };
    clearTimeout(this.deadline);
    this.signal?.removeEventListener('abort', this.onParentAbort);
    this.emit({ type: 'fanout_cancel', cause, reason, graceMs, pending: this.pendingIndexes() });
    this.controller.abort(abortReason(cause, reason));
    if (this.pending === 0) this.finish();
    else this.graceTimer = setTimeout(() => this.abandonPending(), graceMs);
  }

  private emit(event: FanOutEvent): void {
    try {
      this.onEvent?.(event);
    } catch {
      // A listener cannot stop a fan-out.
    }
  }

  // The grace is over: what is still pending may still be doing its work.
  private abandonPending(): void {
    const { graceMs } = this.checked;
    for (const i of this.pendingIndexes()) {
      const undecided = new TetherError(
        'BRANCH_UNDECIDED',
        `branch ${i} was still pending ${graceMs} ms after its abort`,
      );
      const error = new TetherError(
        'AMBIGUOUS_EFFECT',
        `branch ${i} is undecided: it did not settle within the ${graceMs} ms grace of the cancel (${this.cancel?.cause}), and may still be running`,
        { cause: undecided },
      );
      this.outcomes[i] = { index: i, status: 'abandoned', reason: error };
      this.emit({ type: 'branch_abandoned', index: i, error });
    }
    this.finish();
  }

  private onSettled(i: number, outcome: BranchOutcome<T>): void {
    if (this.done) return; // settled after an abandon: the fan-out already said it is undecided
    this.outcomes[i] = outcome;
    this.pending -= 1;
    if (outcome.status === 'rejected') {
      this.emit({ type: 'branch_settled', index: i, status: 'rejected', error: outcome.reason });
      if (!this.cancel) this.beforeCancel.add(i);
      if (isAmbiguousEffect(outcome.reason)) this.startCancel('ambiguous', outcome.reason);
      else if (this.checked.policy === 'fail-fast') this.startCancel('sibling', outcome.reason);
    } else {
      this.emit({ type: 'branch_settled', index: i, status: 'fulfilled' });
    }
    if (this.pending === 0 && !this.done) this.finish();
  }

  private finish(): void {
    if (this.done) return;
    this.done = true;
    clearTimeout(this.graceTimer);
    clearTimeout(this.deadline);
    this.signal?.removeEventListener('abort', this.onParentAbort);
    const { policy } = this.checked;
    const { outcomes, n } = this;
    const verdict = decide(policy, outcomes, this.beforeCancel, this.cancel);
    if (verdict === undefined) {
      this.settle.resolve({
        results: outcomes.map((o) => (o.status === 'fulfilled' ? o.value : undefined)),
        errors: outcomes.map((o) => ('reason' in o ? o.reason : undefined)),
        outcomes,
      });
    } else {
      const message = `${policy} fan-out of ${n} branch${n === 1 ? '' : 'es'}: ${verdict.message}`;
      this.settle.reject(new FanOutError(verdict.code, message, verdict.cause, outcomes, this.cancel?.cause));
    }
  }

  private pendingIndexes(): number[] {
    return this.outcomes.filter((o) => o.status === 'pending').map((o) => o.index);
  }
}

// The reason the branches' signal carries: TIMED_OUT or CANCELLED for a deadline or the caller
// (the caller's reason as `cause`); an AbortError naming the branch for a sibling's end, which
// carries no code, so that a branch rethrowing it states nothing above the failure it follows.
function abortReason(cause: CancelCause, reason: unknown): unknown {
  if (cause === 'timeout')
    return new TetherError('TIMED_OUT', `the fan-out's deadline of ${reason} ms passed`);
  if (cause === 'signal' || cause === 'stop') {
    const by = cause === 'signal' ? "the caller's signal" : 'stop()';
    return new TetherError('CANCELLED', `the fan-out was cancelled by ${by}`, { cause: reason });
  }
  const why =
    cause === 'sibling' ? 'a sibling branch failed (fail-fast)' : "a sibling branch's effect is ambiguous";
  return new DOMException(`the fan-out stops its branches: ${why}`, 'AbortError');
}

interface Verdict {
  code: TetherErrorCode;
  message: string;
  cause: unknown;
}

/**
 * Pure: how a fan-out whose branches are all decided (or abandoned) ends — undefined to resolve.
 * An ambiguous branch (the lowest index) decides first; then a cancel by the caller or the
 * deadline, unless a branch's failure outranks it; then the branches' failures (best-effort
 * ignores them), the strongest code first, then the lowest index. A rejection after the cancel
 * that only says the branch was stopped (an `AbortError`, `CANCELLED`, `TIMED_OUT`) is the
 * cancel's consequence, not a failure: a branch's own failure is counted in any completion order.
 */
export function decide<T>(
  policy: FanOutPolicy,
  outcomes: readonly BranchOutcome<T>[],
  beforeCancel: ReadonlySet<number>,
  cancel: { cause: CancelCause; reason: unknown } | undefined,
): Verdict | undefined {
  const ambiguous = outcomes.find(
    (o) => o.status === 'abandoned' || (o.status === 'rejected' && isAmbiguousEffect(o.reason)),
  );
  if (ambiguous && 'reason' in ambiguous) {
    const what =
      ambiguous.status === 'abandoned' ? 'was abandoned undecided' : 'rejected with an ambiguous effect';
    return {
      code: 'AMBIGUOUS_EFFECT',
      message: `branch ${ambiguous.index} ${what}; never retry it`,
      cause: ambiguous.reason,
    };
  }
  const external =
    cancel && (cancel.cause === 'signal' || cancel.cause === 'stop' || cancel.cause === 'timeout');
  const cancelCode: TetherErrorCode | undefined = external
    ? cancel.cause === 'timeout'
      ? 'TIMED_OUT'
      : 'CANCELLED'
    : undefined;
  const counted: { index: number; code: string | undefined; reason: unknown }[] = [];
  for (const o of outcomes) {
    if (o.status !== 'rejected') continue;
    const code = classify(o.reason);
    const stopped = code === 'CANCELLED' || code === 'TIMED_OUT' || isAbortError(o.reason);
    if (beforeCancel.has(o.index) || !cancel || !stopped)
      counted.push({ index: o.index, code, reason: o.reason });
  }
  if (policy === 'best-effort' && !cancelCode) return undefined;
  let best: TetherErrorCode | undefined = cancelCode;
  for (const c of counted) if (isTetherCode(c.code) && rank(c.code) < rank(best)) best = c.code;
  if (best !== undefined && best === cancelCode && !counted.some((c) => c.code === best)) {
    const what =
      cancel?.cause === 'timeout'
        ? `its deadline of ${cancel.reason} ms passed`
        : `it was cancelled (${cancel?.cause})`;
    return { code: best, message: what, cause: cancel?.cause === 'timeout' ? undefined : cancel?.reason };
  }
  if (counted.length === 0) return undefined;
  const code = best ?? 'COMMAND_FAILED';
  const decider = counted.find((c) => c.code === code) ?? counted[0];
  const failed = counted.map((c) => c.index).join(', ');
  return { code, message: `branch ${decider?.index} failed (failed: ${failed})`, cause: decider?.reason };
}

function isAbortError(error: unknown): boolean {
  return typeof error === 'object' && error !== null && readSafely(error, 'name') === 'AbortError';
}

function checkFanOut<T>(branches: readonly Branch<T>[], options: FanOutOptions) {
  const invalid = (message: string) => new TetherError('INVALID_OPTION', message);
  if (!Array.isArray(branches) || branches.some((b) => typeof b !== 'function')) {
    throw invalid('invalid branches: expected an array of functions (signal: AbortSignal) => Promise');
  }
  if (typeof options !== 'object' || options === null) throw invalid('invalid options: expected an object');
  const policy = options.policy ?? 'fail-fast';
  if (!FAN_OUT_POLICIES.includes(policy)) {
    throw invalid(
      `invalid policy: ${JSON.stringify(policy)} (expected one of ${FAN_OUT_POLICIES.map((p) => `'${p}'`).join(', ')})`,
    );
  }
  const { signal, onEvent } = options;
  // An AbortSignal, or one of another realm or a polyfill: `aborted` and the two listener methods.
  const s = signal as Partial<AbortSignal> | null | undefined;
  const signalLike =
    typeof s === 'object' &&
    s !== null &&
    'aborted' in s &&
    typeof s.addEventListener === 'function' &&
    typeof s.removeEventListener === 'function';
  if (signal !== undefined && !signalLike) {
    throw invalid(
      'invalid signal: expected an AbortSignal (AbortController.signal, AbortSignal.timeout(ms))',
    );
  }
  if (onEvent !== undefined && typeof onEvent !== 'function')
    throw invalid('invalid onEvent: expected a function');
  const timeoutMs = options.timeoutMs === undefined ? undefined : checkMs('timeoutMs', options.timeoutMs);
  return { policy, graceMs: branchGraceMs(options.graceMs), timeoutMs };
}

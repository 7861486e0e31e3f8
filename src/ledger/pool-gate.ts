// The Postgres store's queue for its pool (docs/ledger.md, "The stores"): at most `size`
// operations hold a connection, the others wait here in order, each for at most its deadline.
// pg's own pool times a wait for a free connection with the same `connectionTimeoutMillis` as a
// connection attempt, and a caller could not tell "all 4 were busy" from "the server cannot be
// reached"; behind this gate pg's deadline times only a real connection attempt.

/** Why a wait at the gate ended without a place: its deadline, with what it waited behind. */
export interface GateTimeout {
  waitedMs: number;
  /** Operations that held the places when the deadline came. */
  holding: number;
  /** Operations still waiting, this one included. */
  waiting: number;
}

interface Waiter {
  admit: () => void;
  fail: (err: unknown) => void;
}

// A FIFO of at most `size` holders.
export class PoolGate {
  private holding = 0;
  private readonly waiters: Waiter[] = [];

  constructor(readonly size: number) {}

  /**
   * Resolves with `leave` (call it once, when the connection went back to the pool) as soon as
   * a place is free, in the order of arrival. Rejects with `late(…)`'s error after `ms`
   * (0: none), and with `signal`'s reason when it aborts first. The deadline is judged after
   * the I/O that arrived meanwhile: a timer that fires late because the event loop was blocked
   * (a synchronous spawn, a long scan) does not fail a wait that a connection just ended.
   */
  enter(ms: number, late: (t: GateTimeout) => Error, signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.holding < this.size && this.waiters.length === 0) {
      this.holding += 1;
      return Promise.resolve(this.leaver());
    }
    const started = performance.now();
    return new Promise((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        const i = this.waiters.indexOf(waiter);
        if (i >= 0) this.waiters.splice(i, 1);
      };
      const waiter: Waiter = {
        admit: () => {
          done();
          this.holding += 1;
          resolve(this.leaver());
        },
        fail: (err) => {
          done();
          reject(err);
        },
      };
      const onAbort = () => waiter.fail(signal?.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      if (ms > 0)
        timer = setTimeout(
          () =>
            setImmediate(() => {
              if (!this.waiters.includes(waiter)) return;
              const waitedMs = Math.round(performance.now() - started);
              waiter.fail(late({ waitedMs, holding: this.holding, waiting: this.waiters.length }));
            }),
          ms,
        );
      this.waiters.push(waiter);
    });
  }

  /** Operations waiting for a place. */
  get queued(): number {
    return this.waiters.length;
  }

  // Gives the place back once, to the first waiter if any.
  private leaver(): () => void {
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.holding -= 1;
      this.waiters[0]?.admit();
    };
  }
}

// Ground truth for the adapters' tests: a port is free when a connect() to it is refused.
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import type { Identity } from '../../src/index.js';
import { identityOf } from '../support/proc.js';
import { started, waitFor } from '../support/zoo.js';

/** How a connect() to 127.0.0.1:`port` ends: `connected`, or the errno (`ECONNREFUSED`: nothing listens). */
export function connectOutcome(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    socket.once('connect', () => {
      socket.destroy();
      resolve('connected');
    });
    socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
  });
}

/**
 * Waits for tcp-server.mjs to have written its pidfile and port, and takes its identity (kept in
 * `started`, so that the test's cleanup ends it should the code under test not).
 */
export async function serverIn(pidfile: string): Promise<{ identity: Identity; port: number }> {
  await waitFor(`a server in ${pidfile}`, () => {
    try {
      return (
        readFileSync(pidfile, 'latin1').includes('setsid-server') &&
        readFileSync(`${pidfile}.port`, 'latin1') !== ''
      );
    } catch {
      return false;
    }
  });
  const [pid, startTime] = readFileSync(pidfile, 'latin1').trim().split(/\s+/).map(Number);
  const identity = identityOf(pid as number);
  if (!identity || identity.startTime !== startTime)
    throw new Error(`premise broken: the server pid ${pid} was gone before the test looked`);
  started.push(identity);
  return { identity, port: Number(readFileSync(`${pidfile}.port`, 'latin1')) };
}

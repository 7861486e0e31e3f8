// Network helpers for tests.
import { createServer } from 'node:net';

/** A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick, released). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

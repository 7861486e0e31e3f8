// Exit 0 when TCP PORT on 127.0.0.1 can be bound (nothing holds it), 1 otherwise: node port-free.mjs PORT [--quiet]
import { createServer } from 'node:net';

const port = Number(process.argv[2] ?? 47811);
const quiet = process.argv.includes('--quiet');
const probe = createServer();
probe.once('error', () => {
  if (!quiet) console.log(`port ${port} is still held: something the agent started is running`);
  process.exit(1);
});
probe.listen(port, '127.0.0.1', () => {
  if (!quiet) console.log(`port ${port} is free: nothing the agent started is left`);
  probe.close(() => process.exit(0));
});

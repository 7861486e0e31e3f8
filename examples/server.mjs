// A real HTTP server, the kind of thing an agent starts and forgets: node server.mjs PORT
import { createServer } from 'node:http';

const port = Number(process.argv[2] ?? 47811);
createServer((_req, res) => res.end(`hello from pid ${process.pid}\n`)).listen(port, '127.0.0.1', () => {
  console.log(`server: listening on 127.0.0.1:${port} (pid ${process.pid})`);
});

#!/bin/sh
# An "agent" that does what agents do: starts a server in the background with nohup and setsid,
# checks it answers, and returns — leaving the server running. Run it under `tether run`.
port=${1:-47811}
here=$(cd "$(dirname "$0")" && pwd)
nohup setsid node "$here/server.mjs" "$port" >/tmp/tether-example-server.log 2>&1 &
for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
  node "$here/port-free.mjs" "$port" --quiet || break
  sleep 0.1
done
node -e "fetch('http://127.0.0.1:$port/').then(r => r.text()).then(t => process.stdout.write('agent: server answered: ' + t))"
echo "agent: done, returning (the server keeps running in its own POSIX session)"

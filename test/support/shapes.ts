// The leak shapes of the zoo: one fixture each, and how the sweep must find what it leaves.
import { environOf, hasEntry, stateOf } from './proc.js';
import type { Recorded, Shape } from './zoo.js';

// The premise of a shape whose process drops the tag: it does not carry it. The pid a script
// records is its fork, which carries the tag until `env -i` (or the title rewrite) has run:
// looked at again, up to 2 s, before the fixture is called broken.
function withoutTag(label: string) {
  return (recorded: Recorded[], entry: string) => {
    const pause = new Int32Array(new SharedArrayBuffer(4));
    for (const r of recorded.filter((x) => x.label === label)) {
      let carries = hasEntry(environOf(r.identity.pid), entry);
      for (let i = 0; i < 100 && carries; i++) {
        Atomics.wait(pause, 0, 0, 20);
        carries = hasEntry(environOf(r.identity.pid), entry);
      }
      if (carries) throw new Error(`fixture: ${label} pid ${r.identity.pid} still carries ${entry}`);
    }
  };
}

export const SHAPES: Shape[] = [
  { name: 'nohup … &', script: 'nohup.sh', how: 'a carrier of the tag (nohup keeps the environment)' },
  { name: 'setsid', script: 'setsid.sh', how: 'a carrier of the tag (setsid keeps the environment)' },
  {
    name: 'setsid -f',
    script: 'setsid-fork.sh',
    how: 'a carrier of the tag (setsid -f forks with the environment)',
  },
  {
    name: 'classic double-fork daemon (closed fds, chdir /)',
    script: 'daemon.sh',
    how: 'a carrier of the tag (a double fork keeps the environment)',
  },
  {
    name: 'a process that ignores TERM',
    script: 'ignore-term.sh',
    how: 'a carrier, then killed in the KILL phase',
    endedBy: { 'ignores-term': 'SIGKILL' },
  },
  {
    name: 'a SIGSTOPped process',
    script: 'stopped.sh',
    how: 'a carrier, sent TERM then CONT',
    verify: (recorded) => {
      for (const r of recorded) {
        for (let i = 0; i < 100 && stateOf(r.identity.pid) !== 'T'; i++)
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
        if (stateOf(r.identity.pid) !== 'T') throw new Error(`fixture: pid ${r.identity.pid} is not stopped`);
      }
    },
  },
  {
    name: 'a process whose leader thread exited while another thread runs',
    script: 'thread-leader.sh',
    how: 'a carrier, its environ read through a live thread (task/<tid>/environ)',
    verify: (recorded) => {
      for (const r of recorded) {
        for (let i = 0; i < 100 && stateOf(r.identity.pid) !== 'Z'; i++)
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
        if (stateOf(r.identity.pid) !== 'Z')
          throw new Error(`fixture: leader ${r.identity.pid} has not exited`);
      }
    },
  },
  {
    name: 'a child with a cleared environment (env -i) under a live carrier',
    script: 'cleared-env.sh',
    how: 'a descendant of its carrier parent',
    // The point is the child: found through its parent, itself a carrier. (The payload above
    // it has been reaped before the sweep begins, and no round uses a walk made before that.)
    foundBy: { 'cleared-env': ['descendant'], carrier: ['carrier'] },
    verify: withoutTag('cleared-env'),
  },
  {
    name: 'a child that overwrote its environ with a title, under a live carrier',
    script: 'scrubbed-environ.sh',
    how: 'a descendant of its carrier parent',
    foundBy: { 'scrubbed-environ': ['descendant'], carrier: ['carrier'] },
    verify: (recorded, entry) => {
      for (let i = 0; i < 100; i++) {
        const r = recorded.find((x) => x.label === 'scrubbed-environ');
        if (r && !hasEntry(environOf(r.identity.pid), entry)) return;
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 10);
      }
      withoutTag('scrubbed-environ')(recorded, entry);
    },
  },
  {
    name: 'a fork storm that keeps forking for 2 s during the sweep',
    script: 'storm.sh',
    graceMs: 2500,
    endedBy: { storm: 'SIGKILL' },
    how: 'a carrier (the storm ignores TERM and is killed in the KILL phase; each child carries the tag)',
  },
  {
    name: '100 busy loops in two process groups',
    script: 'busy.sh',
    how: 'a carrier or a descendant of its group leader',
  },
  {
    name: "a leftover holding the payload's stdout",
    script: 'stdout-holder.sh',
    how: 'a carrier (the output cap must not hold the sweep)',
  },
  {
    name: 'a process that switched to another uid (65534)',
    script: 'other-uid.sh',
    how: 'a carrier (root reads and signals another uid)',
  },
  {
    name: 'a process that re-execs itself in a loop',
    script: 'reexec.sh',
    how: 'a carrier (exec keeps pid, start time and environment)',
  },
];

# tether sweep under the helper (docs/sandbox.md, "The helper answers the sweep"), the first part
# of the sweep exec when the session's commands ran under a pushed helper; sweep.sh follows it in
# the same program:
#   sh -c "$PROGRAM" tether-sweep --helper PATH TAG GRACE_MS KILL_AFTER_MS INTERVAL_MS [WORD…]
#   (stdin: NONCE\n)
# The helper at PATH (pushed and checked by pushHelper: PATH ends in helper-<sha256>) answers the
# sweep itself (native/helper-sweep.c): the same rounds and records as sweep.sh, written by a
# process that is non-dumpable before it reads the nonce, so that no leftover of the session's
# uid can read the nonce from its memory or trace it into another answer, as it can this shell.
# It is checked at exec, not before, by what a process of the uid cannot undo:
#  1. its file is opened on fd 9 (the inode is pinned) and hashed there against its name;
#  2. a holder is started from fd 9 (the prelude's hold_pinned) and its identity read;
#  3. the holder's executable (/proc/H/exe: the ELF it runs — for a `#!` script it would be the
#     interpreter) is hashed, and must be fd 9's inode (`-ef`): the holder runs the pushed
#     helper's bytes from that inode, and the holder's code never execs anything else, so while it
#     runs the kernel refuses every write to the inode (ETXTBSY). A file that was a script when
#     the holder was exec'd gave the kernel no such hold (a break attempt rewrote the file around
#     a script "holder" and had its own sweep run: 12 of 12); its holder is not the helper;
#  4. the sweep is started from fd 9 as this shell's child, and once its exec is done (its name
#     is `9`, which only the exec gives it) the holder must still run with that identity: a
#     process alive now was alive all along, so no write reached the inode between the hash and
#     the exec. The holder is this shell's child: killed, it is a zombie or, reaped (bash reaps
#     from its SIGCHLD handler), gone — its start time then names no process. A process of the
#     uid can kill the holder and write the file (it owns it): then this check fails, the sweep
#     is KILLed, and this shell exits 125 — an exec that does not exit 0 proves nothing, whatever
#     it printed.
#  5. This shell exits with the sweep's status.
# Until step 4 nothing has read the nonce: where the helper cannot answer (no such file, a hash
# that differs, no sha256sum, a holder that never said it ran), stderr says why and sweep.sh
# answers, as without the helper. The answer says which: `reader helper`, or `reader grep-z|tr`.
# This shell stays the exec's first process, dumpable: a process of the uid allowed to trace it
# (where ptrace is not restricted) can make it skip step 4 (HELPER_SWEEP_ANSWER_BLIND_SPOT).

set +e +u +x +v +a
unset tether_helper tether_why tether_sweeper tether_tries hold_pid hold_start hold_said why sum

# tether_sweep_under_helper TAG…: runs the helper's sweep and exits with its status, or returns
# (nothing read, nothing signalled) with the reason in tether_why.
tether_sweep_under_helper() {
  case $tether_helper in
    /*/helper-*) ;;
    *) tether_why="$tether_helper is not a pushed helper's path"; return ;;
  esac
  if ! { command exec 9<"$tether_helper"; } 2>/dev/null; then
    tether_why="the helper $tether_helper cannot be opened"
    return
  fi
  if ! hashes_to_name "$tether_helper"; then
    exec 9<&-
    tether_why="the helper $tether_helper does not hash to its name (${sum:-no sha256sum}): refused, never run"
    return
  fi
  # The session's tag (TAG, the first argument) is not the holder's or the sweep's to carry.
  case $1 in TETHER_SESSION_*) case ${1#TETHER_SESSION_} in *[!0-9a-f]* | '') ;; *) unset "$1" ;; esac ;; esac
  if ! hold_pinned "$tether_helper"; then
    exec 9<&-
    tether_why="the helper $tether_helper $why: refused"
    return
  fi
  # From here the nonce may be read: no fallback. The stream's stdin is the sweep's (an
  # asynchronous command's would be /dev/null).
  "/proc/$$/fd/9" --sweep --holder "$hold_pid:$hold_start" "$@" <&3 3<&- &
  tether_sweeper=$!
  exec 3<&-
  # Its exec done and the helper held all along (the prelude's execd_held), or it is refused.
  if ! execd_held "$tether_sweeper"; then
    kill -KILL "$tether_sweeper" 2>/dev/null
    wait "$tether_sweeper" 2>/dev/null
    end_hold
    echo "tether-sweep: the helper $tether_helper was not held unwritable until its sweep's exec (its holder was killed, or that exec was not seen): its answer is refused" >&2
    exit 125
  fi
  # fd 9 was needed until that exec (its path is /proc/$$/fd/9).
  end_hold
  exec 9<&-
  wait "$tether_sweeper"
  exit $?
}

if [ "$1" = --helper ]; then
  tether_helper=$2
  shift 2
  # fd 3: the stream's stdin, for the sweep (step 4).
  exec 3<&0
  tether_sweep_under_helper "$@"
  exec 3<&-
  echo "tether-sweep: $tether_why: the sweep shell answers" >&2
  unset tether_helper tether_why hold_pid hold_start hold_said why sum
fi

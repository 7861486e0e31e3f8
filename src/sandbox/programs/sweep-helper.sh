# tether sweep under the helper (docs/sandbox.md, "The helper answers the sweep"), the first part
# of the sweep exec when the session's commands ran under a pushed helper; sweep.sh follows it in
# the same program:
#   sh -c "$PROGRAM" tether-sweep --helper PATH TAG GRACE_MS KILL_AFTER_MS INTERVAL_MS [WORD…]
#   (stdin: NONCE\n)
# The helper at PATH (pushed and checked by pushHelper: PATH ends in helper-<sha256>) answers the
# sweep itself (native/helper-sweep.c): the same rounds and records as sweep.sh, written by a
# process that is non-dumpable before it reads the nonce, so that no leftover of the session's
# uid can read the nonce from its memory or trace it into another answer, as it can this shell.
# It is checked at exec, not before: its file is opened on fd 9 (the inode is pinned) and hashed
# there against its name; a holder (`--sweep-hold`) is started from fd 9 and says when it has been
# exec'd (SIGUSR1), from when on the kernel refuses every write to the inode (ETXTBSY); the file is
# hashed again, and this shell execs the sweep from fd 9 — the exec's first process, whose stdin
# holds the nonce, is then the helper, with no dumpable process left in the exec. Until that exec
# nothing has read the nonce: where the helper cannot answer (no such file, a hash that differs,
# no sha256sum, a holder that never said it was exec'd), stderr says why and sweep.sh answers, as
# without the helper. The answer says which: `reader helper`, or sweep.sh's `reader grep-z|tr`.

set +e +u +x +v +a
unset tether_helper tether_hold tether_held tether_why

# tether_sweep_under_helper TAG…: execs the helper's sweep, or returns (nothing read, nothing
# signalled) with the reason in tether_why.
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
  tether_held=
  trap 'tether_held=1' USR1
  "/proc/$$/fd/9" --sweep-hold </dev/null >/dev/null 2>&1 &
  tether_hold=$!
  # It says so again every 10 ms: `wait` ends early on the trapped signal. A holder that ended
  # without saying it never ran.
  while [ -z "$tether_held" ]; do
    wait "$tether_hold" 2>/dev/null
    [ -n "$tether_held" ] && break
    kill -0 "$tether_hold" 2>/dev/null && continue
    trap - USR1
    exec 9<&-
    tether_why="the helper $tether_helper did not start its holder"
    return
  done
  if ! hashes_to_name "$tether_helper"; then
    kill -KILL "$tether_hold" 2>/dev/null
    wait "$tether_hold" 2>/dev/null
    trap - USR1
    exec 9<&-
    tether_why="the helper $tether_helper does not hash to its name after its exec (${sum:-no sha256sum}): refused"
    return
  fi
  # Ignored through the exec (a handled signal would be reset to its default, which ends a
  # process): the holder's next word must not end the sweep before it has KILLed the holder.
  trap '' USR1
  # A shell's exec that fails exits (127): the nonce unread, nothing signalled, and tether, without
  # the header, tries the sweep again.
  exec "/proc/$$/fd/9" --sweep --holder "$tether_hold" "$@"
}

if [ "$1" = --helper ]; then
  tether_helper=$2
  shift 2
  tether_sweep_under_helper "$@"
  echo "tether-sweep: $tether_why: the sweep shell answers" >&2
  unset tether_helper tether_hold tether_held tether_why
fi

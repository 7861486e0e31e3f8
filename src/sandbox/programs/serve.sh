# tether serve: starts the resident helper (docs/sandbox.md, "The resident helper"), once per
# channel, through the check at exec that the helper's sweep takes (sweep-helper.sh):
#   sh -c "$PROGRAM" tether-serve PATH DIR IDLE_MS      (stdin: tether-serve TPK\n)
# The helper at PATH (pushed and checked by pushHelper: PATH ends in helper-<sha256>) is opened on
# fd 9 (the inode is pinned), hashed there against its name, held unwritable by a holder started
# from fd 9 (the prelude's hold_pinned), and run as `--serve DIR --idle IDLE_MS` from fd 9 with
# the stream's stdin. Once that exec is done (its name is `9`, which only the exec gives it) the
# holder must still run with the identity it had: the bytes that run are the ones hashed, and they
# agree a key with tether that no process of the uid can read (the server is non-dumpable before
# it reads the stream). This shell then exits with the server's status: 0 after its
# `tether-serve SPK PID START MAC` line. Any other status proves nothing, whatever came before it:
# 125 with a `tether-serve:` line on stderr when this check refused (nothing started, or what
# started is KILLed before it could leave the exec).
# This shell stays the exec's first process, dumpable: a process of the uid allowed to trace it
# (where ptrace is not restricted) can make it skip the last check; one that opened the stream's
# pipes through /proc/$$/fd before the server read them can take both halves of the exchange.

set +e +u +x +v +a
unset tether_helper tether_server tether_tries hold_pid hold_start hold_said why sum

tether_helper=$1
case $tether_helper in
  /*/helper-*) ;;
  *)
    echo "tether-serve: $tether_helper is not a pushed helper's path" >&2
    exit 125
    ;;
esac
if ! { command exec 9<"$tether_helper"; } 2>/dev/null; then
  echo "tether-serve: the helper $tether_helper cannot be opened" >&2
  exit 125
fi
if ! hashes_to_name "$tether_helper"; then
  echo "tether-serve: the helper $tether_helper does not hash to its name (${sum:-no sha256sum}): refused, never run" >&2
  exit 125
fi
if ! hold_pinned "$tether_helper"; then
  echo "tether-serve: the helper $tether_helper $why: refused" >&2
  exit 125
fi
exec 3<&0
"/proc/$$/fd/9" --serve "$2" --idle "$3" <&3 3<&- &
tether_server=$!
exec 3<&-
# Its exec done and the helper held all along (the prelude's execd_held), or it is refused.
if ! execd_held "$tether_server"; then
  kill -KILL "$tether_server" 2>/dev/null
  wait "$tether_server" 2>/dev/null
  end_hold
  echo "tether-serve: the helper $tether_helper was not held unwritable until its exec (its holder was killed, or that exec was not seen): refused" >&2
  exit 125
fi
end_hold
exec 9<&-
wait "$tether_server"
exit $?
